// FlatState (runtime/flat_state.h), the state seam: the held ranges are checked; each
// state's storage is the held ranges back to back (range(i) points at held()[i].begin's
// element); memory comes from the allocator and is what is held (the allocator's own count
// is the reference); names, element types and zeroing; states of several element types
// (mixed precision's bf16 parameter copy).
#include "runtime/flat_state.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/state_names.h"

namespace etr {
namespace {

ParamLayout three_tensors() {  // 16-element alignment: numel 96
  ParamLayout layout;
  layout.add("a", Shape{10, 3}, 0, true);  // [0, 30), padded to 32
  layout.add("b", Shape{20}, 1, false);    // [32, 52), padded to 64
  layout.add("c", Shape{4, 8}, 2, true);   // [64, 96)
  return layout;
}

TEST(FlatState, HoldsEverythingByDefault) {
  const ParamLayout layout = three_tensors();
  HostAllocator alloc;
  FlatState s(layout, alloc);
  EXPECT_TRUE(s.holds_all());
  EXPECT_EQ(s.held_numel(), layout.numel());
  ASSERT_EQ(s.held().size(), 1u);
  EXPECT_EQ(s.held()[0], (HeldRange{0, layout.numel()}));
}

TEST(FlatState, RangesAreStoredBackToBack) {
  const ParamLayout layout = three_tensors();
  HostAllocator alloc;
  FlatState s(layout, alloc, {{5, 20}, {32, 40}, {70, 96}});
  EXPECT_FALSE(s.holds_all());
  EXPECT_EQ(s.held_numel(), 15 + 8 + 26);
  EXPECT_EQ(s.range_offset(0), 0);
  EXPECT_EQ(s.range_offset(1), 15);
  EXPECT_EQ(s.range_offset(2), 23);
  const size_t before = alloc.stats().in_use;
  s.add(state::kParam);
  s.add(state::kAdamM);
  EXPECT_EQ(alloc.stats().in_use - before, static_cast<size_t>(2 * 49) * sizeof(float));
  EXPECT_EQ(s.bytes(), static_cast<size_t>(2 * 49) * sizeof(float));
  float* p = s.data<float>(state::kParam);
  EXPECT_EQ(s.range<float>(state::kParam, 0), p);
  EXPECT_EQ(s.range<float>(state::kParam, 1), p + 15);
  EXPECT_EQ(s.range<float>(state::kParam, 2), p + 23);
  EXPECT_NE(s.data<float>(state::kAdamM), p);  // each state its own storage
}

TEST(FlatState, RefusesBadRanges) {
  const ParamLayout layout = three_tensors();
  HostAllocator alloc;
  using R = std::vector<HeldRange>;
  EXPECT_THROW(FlatState(layout, alloc, R{{4, 4}}), InvalidArgument);            // empty
  EXPECT_THROW(FlatState(layout, alloc, R{{0, 10}, {5, 20}}), InvalidArgument);  // overlap
  EXPECT_THROW(FlatState(layout, alloc, R{{30, 40}, {0, 10}}), InvalidArgument);  // unsorted
  EXPECT_THROW(FlatState(layout, alloc, R{{90, 97}}), InvalidArgument);  // beyond the layout
  EXPECT_THROW(FlatState(layout, alloc, R{{-1, 3}}), InvalidArgument);
  EXPECT_NO_THROW(FlatState(layout, alloc, R{{0, 10}, {10, 20}}));  // adjacent is fine
}

TEST(FlatState, NamesTypesAndZeroing) {
  const ParamLayout layout = three_tensors();
  HostAllocator alloc;
  FlatState s(layout, alloc, {{0, 32}});
  s.add(state::kParam);
  s.add(state::kGrad);
  EXPECT_THROW(s.add(state::kParam), InvalidArgument);
  EXPECT_TRUE(s.has(state::kGrad));
  EXPECT_FALSE(s.has(state::kAdamV));
  EXPECT_EQ(s.names(), (std::vector<std::string>{std::string(state::kParam), std::string(state::kGrad)}));
  EXPECT_THROW(s.data<float>(state::kAdamV), InvalidArgument);  // no such state
  EXPECT_THROW(s.data<double>(state::kParam), InvalidArgument);  // not f32
  float* g = s.data<float>(state::kGrad);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(g[i], 0.0f) << "added states start at 0";
  for (int i = 0; i < 32; ++i) g[i] = static_cast<float>(i + 1);
  s.data<float>(state::kParam)[3] = 7.0f;
  s.zero(state::kGrad);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(g[i], 0.0f);
  EXPECT_EQ(s.data<float>(state::kParam)[3], 7.0f);  // the other state untouched
}

// Mixed precision: a state of another element type beside the f32 ones (the bf16
// parameter copy) has its own bytes, is zeroed, and refuses another element size.
TEST(FlatState, StatesOfSeveralElementTypes) {
  const ParamLayout layout = three_tensors();
  HostAllocator alloc;
  FlatState s(layout, alloc);
  s.add(state::kParam);
  s.add(state::kParamBf16, DType::kBF16);
  EXPECT_EQ(s.dtype(state::kParam), DType::kF32);
  EXPECT_EQ(s.dtype(state::kParamBf16), DType::kBF16);
  EXPECT_EQ(s.bytes(), static_cast<size_t>(layout.numel()) * (4 + 2));
  EXPECT_EQ(alloc.stats().in_use, s.bytes());
  const uint16_t* p16 = s.data<uint16_t>(state::kParamBf16);
  for (int64_t i = 0; i < s.held_numel(); ++i) ASSERT_EQ(p16[i], 0u) << i;
  EXPECT_THROW(s.data<float>(state::kParamBf16), InvalidArgument);
  EXPECT_THROW(s.data<uint16_t>(state::kParam), InvalidArgument);
  EXPECT_THROW(s.dtype("no such"), InvalidArgument);
  s.data<uint16_t>(state::kParamBf16)[3] = 7;
  s.zero(state::kParamBf16);
  EXPECT_EQ(s.data<uint16_t>(state::kParamBf16)[3], 0u);
}

}  // namespace
}  // namespace etr
