// ParamLayout against arithmetic done by hand: offsets, alignment, layer ranges and ZeRO
// shards, and the errors for duplicate names and out-of-order layers.
#include "runtime/param_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/error.h"

namespace etr {
namespace {

ParamLayout small_model() {
  ParamLayout l;
  l.add("wte.weight", Shape{11, 4}, 0, true);   // 44 -> next at 48
  l.add("wpe.weight", Shape{5, 4}, 0, true);    // 48..68 -> next at 80
  l.add("h.0.ln_1.weight", Shape{4}, 1, false); // 80..84 -> 96
  l.add("h.0.ln_1.bias", Shape{4}, 1, false);   // 96..100 -> 112
  l.add("ln_f.weight", Shape{4}, 3, false);     // 112..116 (layer 2 has nothing)
  return l;
}

TEST(ParamLayout, OffsetsAreAlignedAndInForwardOrder) {
  ParamLayout l = small_model();
  std::vector<int64_t> offsets;
  for (const TensorEntry& e : l.entries()) offsets.push_back(e.offset);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 48, 80, 96, 112}));
  EXPECT_EQ(l.numel(), 116);
  EXPECT_EQ(l.param_count(), 44 + 20 + 4 + 4 + 4);
  EXPECT_EQ(l.num_layers(), 4);
  ASSERT_NE(l.find("h.0.ln_1.bias"), nullptr);
  EXPECT_EQ(l.find("h.0.ln_1.bias")->offset, 96);
  EXPECT_EQ(l.find("nope"), nullptr);
}

TEST(ParamLayout, LayerRangesAreContiguousAndDisjoint) {
  ParamLayout l = small_model();
  EXPECT_EQ(l.layer_range(0), (std::pair<int64_t, int64_t>{0, 68}));
  EXPECT_EQ(l.layer_range(1), (std::pair<int64_t, int64_t>{80, 100}));
  EXPECT_EQ(l.layer_range(2), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(l.layer_range(3), (std::pair<int64_t, int64_t>{112, 116}));
}

TEST(ParamLayout, ShardsCoverThePaddedBufferInEqualParts) {
  ParamLayout l = small_model();  // 116 elements
  for (int n = 1; n <= 7; ++n) {
    const int64_t padded = l.padded_numel(n);
    EXPECT_GE(padded, l.numel());
    EXPECT_LT(padded - l.numel(), n);
    EXPECT_EQ(padded % n, 0);
    int64_t expect_begin = 0;
    for (int r = 0; r < n; ++r) {
      auto [b, e] = l.shard_range(r, n);
      EXPECT_EQ(b, expect_begin) << "n=" << n << " r=" << r;
      EXPECT_EQ(e - b, padded / n);
      expect_begin = e;
    }
    EXPECT_EQ(expect_begin, padded);
  }
}

TEST(ParamLayout, ViewsPointIntoTheFlatBuffer) {
  ParamLayout l = small_model();
  std::vector<float> flat(l.numel());
  TensorView v = l.view(flat.data(), 1);
  EXPECT_EQ(v.data(), flat.data() + 48);
  EXPECT_EQ(v.shape(), (Shape{5, 4}));
  EXPECT_EQ(v.dtype(), DType::kF32);
}

TEST(ParamLayout, RejectsDuplicatesAndLayersOutOfOrder) {
  ParamLayout l = small_model();
  try {
    l.add("wte.weight", Shape{1}, 4, false);
    FAIL() << "duplicate name accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'wte.weight' is already in the layout"),
              std::string::npos);
  }
  try {
    l.add("late", Shape{1}, 1, false);
    FAIL() << "out-of-order layer accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("add tensors in forward order"), std::string::npos);
  }
}

// 2 x 10^5 entries (a model of 10^4 layers has 1.2 x 10^5): the name index still finds
// every entry and still refuses a duplicate of the first, a middle and the last name.
TEST(ParamLayout, ManyEntriesStillRejectDuplicates) {
  ParamLayout l;
  const int n = 200000;
  for (int i = 0; i < n; ++i) l.add("t." + std::to_string(i), Shape{3}, i, false);
  ASSERT_EQ(l.entries().size(), static_cast<size_t>(n));
  for (int i : {0, n / 2, n - 1}) {
    const std::string name = "t." + std::to_string(i);
    ASSERT_NE(l.find(name), nullptr);
    EXPECT_EQ(l.find(name)->offset, int64_t{16} * i);
    EXPECT_THROW(l.add(name, Shape{3}, n, false), InvalidArgument);
  }
  EXPECT_EQ(l.entries().size(), static_cast<size_t>(n));  // refused adds leave no entry
  // Each layer's range by binary search, against the entries themselves.
  for (int i : {0, 1, n / 2, n - 1}) {
    EXPECT_EQ(l.layer_range(i), (std::pair<int64_t, int64_t>{int64_t{16} * i, 16 * i + 3}));
  }
  EXPECT_EQ(l.layer_range(n), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(l.find("t." + std::to_string(n)), nullptr);
}

}  // namespace
}  // namespace etr
