// ShardPlan with owners (a ZeRO rank writes the blocks it holds): every tensor element and
// every byte of every file once, each rank's file packed from its own pieces only, and the
// manifest's extents leading back to the saved values; owners that miss or repeat an
// element are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.pb.h"
#include "checkpoint/shard_plan.h"
#include "runtime/error.h"
#include "unit/ragged_layout.h"

namespace etr {
namespace {

const std::vector<std::string> kNames = {"param", "adam.m", "adam.v"};

// Flat [0, numel) in blocks of `block` elements dealt to the ranks in turn, as ZeRO deals
// a block of every bucket (the blocks cross tensors and padding).
ShardOwners dealt(int64_t numel, int world, int64_t block) {
  ShardOwners o(static_cast<size_t>(world));
  int r = 0;
  for (int64_t a = 0; a < numel; a += block, r = (r + 1) % world) {
    o[static_cast<size_t>(r)].push_back({a, std::min(numel, a + block)});
  }
  return o;
}

// Each state's values (padding NaN) and, per rank, a copy of only what it owns.
struct Held {
  std::vector<std::vector<float>> whole;                             // [state][flat]
  std::vector<std::vector<std::vector<std::vector<float>>>> copies;  // [rank][state][piece]
  std::vector<std::vector<std::vector<StatePiece>>> pieces;          // [rank][state]
};

Held hold(const ParamLayout& layout, const ShardOwners& owners, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Held h;
  for (size_t s = 0; s < kNames.size(); ++s) {
    std::vector<float> v(static_cast<size_t>(layout.numel()), std::nanf(""));
    for (const TensorEntry& e : layout.entries()) {
      for (int64_t i = 0; i < e.numel(); ++i) v[static_cast<size_t>(e.offset + i)] = u(rng);
    }
    h.whole.push_back(std::move(v));
  }
  h.copies.resize(owners.size());
  h.pieces.resize(owners.size());
  for (size_t r = 0; r < owners.size(); ++r) {
    for (size_t s = 0; s < kNames.size(); ++s) {
      h.copies[r].emplace_back();
      h.pieces[r].emplace_back();
      h.copies[r][s].reserve(owners[r].size());
      for (const auto& [a, b] : owners[r]) {
        h.copies[r][s].emplace_back(h.whole[s].begin() + a, h.whole[s].begin() + b);
        h.pieces[r][s].push_back({a, b, h.copies[r][s].back().data()});
      }
    }
  }
  return h;
}

TEST(ShardPlanOwners, EveryElementOnceFromItsOwnerAndTheExtentsLeadBackToIt) {
  const ParamLayout layout = testing::ragged_layout();
  for (int world = 1; world <= 5; ++world) {
    for (int64_t block : {1, 5, 16, 200}) {
      SCOPED_TRACE("world " + std::to_string(world) + ", blocks of " + std::to_string(block));
      const ShardOwners owners = dealt(layout.numel(), world, block);
      const ShardPlan plan(layout, world, kNames, &owners);
      const Held h = hold(layout, owners, static_cast<uint32_t>(world * 100 + block));
      std::vector<std::vector<char>> files(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) {
        auto& f = files[static_cast<size_t>(r)];
        plan.pack(r, h.pieces[static_cast<size_t>(r)], [&](const void* p, size_t n) {
          f.insert(f.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
        });
        EXPECT_EQ(f.size(), plan.file_bytes(r)) << plan.file_name(r);
      }
      ckpt::Manifest m;
      plan.describe(m);
      ASSERT_EQ(m.tensors_size(), static_cast<int>(layout.entries().size() * kNames.size()));
      std::vector<std::vector<int>> read(files.size());
      for (size_t r = 0; r < files.size(); ++r) read[r].resize(files[r].size());
      for (const ckpt::TensorRecord& t : m.tensors()) {
        const TensorEntry* e = layout.find(t.name());
        ASSERT_NE(e, nullptr) << t.name();
        const size_t s = static_cast<size_t>(std::find(kNames.begin(), kNames.end(), t.state()) -
                                             kNames.begin());
        ASSERT_LT(s, kNames.size()) << t.state();
        uint64_t next = 0;
        for_each_extent(t, [&](const ExtentRef& x) {  // the runs' extents; files(r) is rank r's
          ASSERT_EQ(x.tensor_begin, next) << t.name();  // in tensor order, no gap, no overlap
          ASSERT_GT(x.count, 0u) << t.name();
          ASSERT_TRUE(x.file >= 0 && x.file < world) << x.file;
          const auto& f = files[static_cast<size_t>(x.file)];
          ASSERT_LE(x.file_offset + x.count * sizeof(float), f.size()) << t.name();
          for (uint64_t i = 0; i < x.count; ++i) {
            float got;
            std::memcpy(&got, f.data() + x.file_offset + i * sizeof(float), sizeof got);
            const float want = h.whole[s][static_cast<size_t>(e->offset) + x.tensor_begin + i];
            ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
                << t.state() << " " << t.name() << " element " << x.tensor_begin + i;
            for (size_t b = 0; b < sizeof(float); ++b)
              ++read[static_cast<size_t>(x.file)][x.file_offset + i * 4 + b];
          }
          next += x.count;
        });
        EXPECT_EQ(next, static_cast<uint64_t>(e->numel())) << t.name();
      }
      for (size_t r = 0; r < read.size(); ++r) {
        for (size_t b = 0; b < read[r].size(); ++b)
          ASSERT_EQ(read[r][b], 1) << "file " << r << " byte " << b;
      }
    }
  }
}

TEST(ShardPlanOwners, OwnersThatMissOrRepeatAnElementAreRefused) {
  const ParamLayout layout = testing::ragged_layout();  // a [0, 7), b [16, 81), ...
  const int64_t n = layout.numel();
  const ShardOwners gap = {{{0, 20}}, {{21, n}}};    // b's element 4: no one's
  const ShardOwners twice = {{{0, 30}}, {{20, n}}};  // b's elements 4-13: both ranks'
  const int64_t end = layout.entries().back().offset + layout.entries().back().numel();
  const ShardOwners short_ = {{{0, end - 1}}, {}};      // d's last element: no one's
  const ShardOwners padding = {{{0, 7}, {16, n}}, {}};  // only padding left out: fine
  EXPECT_THROW(ShardPlan(layout, 2, kNames, &gap), InvalidArgument);
  EXPECT_THROW(ShardPlan(layout, 2, kNames, &twice), InvalidArgument);
  EXPECT_THROW(ShardPlan(layout, 2, kNames, &short_), InvalidArgument);
  EXPECT_THROW(ShardPlan(layout, 3, kNames, &padding), InvalidArgument);  // 2 lists for 3 ranks
  const ShardPlan plan(layout, 2, kNames, &padding);
  EXPECT_EQ(plan.file_bytes(1), 0u);
  EXPECT_EQ(plan.file_bytes(0), static_cast<uint64_t>(layout.param_count()) * 4 * kNames.size());
}

TEST(ShardPlanOwners, APackFromPiecesThatLackAnOwnedElementIsRefused) {
  const ParamLayout layout = testing::ragged_layout();
  const ShardOwners owners = dealt(layout.numel(), 2, 16);
  const ShardPlan plan(layout, 2, kNames, &owners);
  Held h = hold(layout, owners, 7);
  h.pieces[1][2].front().end -= 1;  // adam.v's [16, 32) of rank 1 without b's element 15
  const auto sink = [](const void*, size_t) {};
  EXPECT_NO_THROW(plan.pack(0, h.pieces[0], sink));
  EXPECT_THROW(plan.pack(1, h.pieces[1], sink), InvalidArgument);
}

TEST(ShardPlanOwners, OwnedPiecesAreTheOwnersRangesOrTheEvenSplits) {
  const ParamLayout layout = testing::ragged_layout();
  std::vector<float> whole(static_cast<size_t>(layout.numel()));
  NamedState s("param", whole.data(), 0);
  const auto even = owned_pieces(s, layout, 3, 1);
  ASSERT_EQ(even.size(), 1u);
  const auto [a, b] = ShardPlan(layout, 3, {"param"}).flat_range(1);
  EXPECT_EQ(even[0].begin, a);
  EXPECT_EQ(even[0].end, b);
  EXPECT_EQ(even[0].data, whole.data() + a);
  s.owners = std::make_shared<const ShardOwners>(dealt(layout.numel(), 3, 40));
  const auto dealt_pieces = owned_pieces(s, layout, 3, 1);  // [40, 80)
  ASSERT_EQ(dealt_pieces.size(), 1u);
  EXPECT_EQ(dealt_pieces[0].begin, 40);
  EXPECT_EQ(dealt_pieces[0].end, 80);
  EXPECT_EQ(dealt_pieces[0].data, whole.data() + 40);
}

// The writer's cache gives the same plan while the layout, world, states and owners
// object stay, and a new one when any of them changes; a plan given earlier stays usable
// (its own copy of the layout) after the cache moved on and the caller's layout is gone.
TEST(ShardPlanOwners, TheCacheKeepsAPlanWhileItsInputsStay) {
  ShardPlanCache cache;
  auto owners = std::make_shared<const ShardOwners>(dealt(testing::ragged_layout().numel(), 3, 16));
  std::shared_ptr<const ShardPlan> first;
  {
    const ParamLayout layout = testing::ragged_layout();
    first = cache.get(layout, 3, kNames, owners);
    EXPECT_EQ(cache.get(layout, 3, kNames, owners), first);
    const ParamLayout copy = layout;  // another object, the same layout
    EXPECT_EQ(cache.get(copy, 3, kNames, owners), first);
    EXPECT_NE(cache.get(layout, 3, {"param"}, owners), first);
    auto same_ranges = std::make_shared<const ShardOwners>(*owners);  // another agreement
    EXPECT_NE(cache.get(layout, 3, kNames, same_ranges), cache.get(layout, 3, kNames, owners));
    EXPECT_NE(cache.get(layout, 3, kNames, nullptr)->file_bytes(0), first->file_bytes(0));
    ParamLayout bigger = layout;
    bigger.add("e", Shape{5}, 3, false);
    const auto plan = cache.get(bigger, 3, kNames, nullptr);
    EXPECT_EQ(plan->packed_numel(), first->packed_numel() + 5);
  }
  // The layout `first` was made from is gone, and the cache holds another plan. Another
  // layout now takes its place: a plan that still referred to the old one would read it.
  ParamLayout other;
  other.add("z", Shape{40, 3}, 0, true);
  other.add("y", Shape{2}, 1, false);
  other.add("x", Shape{9}, 2, false);
  other.add("w", Shape{33}, 3, false);
  ASSERT_NE(other.numel(), testing::ragged_layout().numel());
  const ParamLayout layout = testing::ragged_layout();
  const Held h = hold(layout, *owners, 5);
  const ShardPlan fresh(layout, 3, kNames, owners.get());
  for (int r = 0; r < 3; ++r) {
    std::vector<char> a, b;
    first->pack(r, h.pieces[static_cast<size_t>(r)], [&](const void* p, size_t n) {
      a.insert(a.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    });
    fresh.pack(r, h.pieces[static_cast<size_t>(r)], [&](const void* p, size_t n) {
      b.insert(b.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
    });
    EXPECT_EQ(a, b) << "rank " << r;
  }
  // Its records, worked out now (after that layout went) and then copied, are a fresh
  // plan's.
  ckpt::Manifest once, twice, fresh_records;
  first->describe(once);
  first->describe(twice);
  fresh.describe(fresh_records);
  EXPECT_GT(fresh_records.tensors_size(), 0);
  EXPECT_EQ(once.SerializeAsString(), fresh_records.SerializeAsString());
  EXPECT_EQ(twice.SerializeAsString(), fresh_records.SerializeAsString());
}

}  // namespace
}  // namespace etr
