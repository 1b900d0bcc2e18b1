// Tests of parallel/batch_policy.h with the Sampler: every rank's micro-batches of a
// step together are exactly the single-process step, for world sizes 1..5 and uneven
// splits, and a job restored from a DataPosition (with any world size) continues with the
// same samples as an uninterrupted one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "parallel/batch_policy.h"
#include "examples/data/sampler.h"
#include "examples/data/window_space.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

// Splits of a global batch of 24 over 1..5 ranks, some uneven.
std::vector<std::vector<RankBatch>> splits_of_24() {
  return {
      {{24, 1}},
      {{4, 3}, {3, 4}},
      {{12, 1}, {6, 2}},
      {{1, 1}, {5, 3}, {8, 1}},
      {{2, 4}, {2, 4}, {2, 4}},
      {{1, 2}, {3, 2}, {5, 1}, {11, 1}},
      {{6, 1}, {6, 1}, {6, 1}, {6, 1}},
      {{1, 1}, {2, 2}, {3, 1}, {1, 4}, {6, 2}},
      {{3, 2}, {2, 3}, {1, 6}, {3, 1}, {3, 1}},
      // Shorter last micro-batches (RankBatch::last): 8 + 13 + 3 and 5 + 11 + 6 + 2.
      {{5, 2, 3}, {4, 4, 1}, {2, 2, 1}},
      {{4, 2, 1}, {4, 3, 3}, {2, 3, 2}, {2, 1}},
  };
}

// The global sample indices each rank takes in a step, by walking its micro-batches.
std::vector<uint64_t> step_indices(const BatchPlan& plan, uint64_t step_begin) {
  std::vector<uint64_t> all;
  for (int r = 0; r < plan.world_size(); ++r) {
    const RankBatch& rb = plan.rank(r);
    for (uint64_t m = 0; m < rb.accumulation; ++m) {
      const SampleRange mb = plan.micro_batch(step_begin, r, m);
      EXPECT_EQ(mb.count, m + 1 == rb.accumulation ? rb.last_size() : rb.micro_batch);
      for (uint64_t j = 0; j < mb.count; ++j) all.push_back(mb.first + j);
    }
  }
  return all;
}

std::vector<uint64_t> offsets_of(const Sampler& s, std::vector<uint64_t> indices) {
  for (uint64_t& i : indices) i = s.sample(i);
  std::sort(indices.begin(), indices.end());
  return indices;
}

TEST(BatchPlan, RanksTogetherTakeExactlyTheSingleProcessStep) {
  const Sampler sampler(WindowSpace{0, 50 * 4 + 1, 4, 4}, 11);  // 50 windows: epochs roll over
  const BatchPlan single(24, {{24, 1}});
  for (const auto& ranks : splits_of_24()) {
    const BatchPlan plan(24, ranks);
    ASSERT_GE(plan.world_size(), 1);
    ASSERT_LE(plan.world_size(), 5);
    for (uint64_t step = 0; step < 6; ++step) {
      const uint64_t begin = step * 24;
      std::vector<uint64_t> got = step_indices(plan, begin);
      std::sort(got.begin(), got.end());
      std::vector<uint64_t> want(24);
      for (uint64_t i = 0; i < 24; ++i) want[i] = begin + i;
      EXPECT_EQ(got, want) << "world " << plan.world_size() << " step " << step;
      EXPECT_EQ(offsets_of(sampler, got), offsets_of(sampler, step_indices(single, begin)));
    }
  }
}

TEST(BatchPlan, RanksOwnContiguousRangesInRankOrder) {
  const BatchPlan plan(24, {{1, 1}, {5, 3}, {8, 1}});
  EXPECT_EQ(plan.rank_offset(0), 0u);
  EXPECT_EQ(plan.rank_offset(1), 1u);
  EXPECT_EQ(plan.rank_offset(2), 16u);
  EXPECT_EQ(plan.rank_samples(48, 1), (SampleRange{49, 15}));
  EXPECT_EQ(plan.micro_batch(48, 1, 0), (SampleRange{49, 5}));
  EXPECT_EQ(plan.micro_batch(48, 1, 2), (SampleRange{59, 5}));
  EXPECT_EQ(plan.micro_batch(48, 2, 0), (SampleRange{64, 8}));
}

TEST(BatchPlan, Uniform) {
  const BatchPlan plan = BatchPlan::uniform(32, 4, 2);
  EXPECT_EQ(plan.world_size(), 4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(plan.rank(r), (RankBatch{2, 4}));
  EXPECT_THROW(BatchPlan::uniform(30, 4, 2), InvalidArgument);
  EXPECT_THROW(BatchPlan::uniform(32, 0, 2), InvalidArgument);
}

TEST(BatchPlan, BalancedSplitsAnyGlobalBatchOverAnyWorld) {
  for (uint64_t B = 1; B <= 40; ++B) {
    for (int w = 1; w <= 5; ++w) {
      for (uint64_t b = 1; b <= 6; ++b) {
        if (B < static_cast<uint64_t>(w)) {
          EXPECT_THROW(BatchPlan::balanced(B, w, b), InvalidArgument);
          continue;
        }
        const BatchPlan plan = BatchPlan::balanced(B, w, b);
        uint64_t total = 0, smallest = B, largest = 0;
        for (int r = 0; r < w; ++r) {
          const RankBatch& rb = plan.rank(r);
          EXPECT_LE(rb.micro_batch, b);
          EXPECT_EQ(rb.accumulation, (rb.samples() + b - 1) / b) << "fewest micro-batches";
          total += rb.samples();
          smallest = std::min(smallest, rb.samples());
          largest = std::max(largest, rb.samples());
        }
        EXPECT_EQ(total, B);
        EXPECT_LE(largest - smallest, 1u) << "B=" << B << " w=" << w;
        // The union over ranks is the single-process step.
        std::vector<uint64_t> idx = step_indices(plan, 100);
        std::sort(idx.begin(), idx.end());
        for (uint64_t i = 0; i < B; ++i) ASSERT_EQ(idx[i], 100 + i);
      }
    }
  }
  EXPECT_EQ(BatchPlan::balanced(8, 3, 4).rank(2), (RankBatch{2, 1, 0}));
  EXPECT_EQ(BatchPlan::balanced(10, 2, 3).rank(0), (RankBatch{3, 2, 2}));
  EXPECT_THROW(BatchPlan::balanced(8, 2, 0), InvalidArgument);
}

TEST(BatchPlan, RejectsPlansThatDoNotAddUp) {
  EXPECT_THROW(BatchPlan(4, {{2, 2, 3}}), InvalidArgument);  // last > micro-batch
  EXPECT_THROW(BatchPlan(24, {}), InvalidArgument);
  EXPECT_THROW(BatchPlan(24, {{0, 24}}), InvalidArgument);
  EXPECT_THROW(BatchPlan(24, {{24, 0}}), InvalidArgument);
  try {
    BatchPlan(24, {{4, 3}, {3, 3}});
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("sum to 21 samples, not the global batch 24"),
              std::string::npos)
        << e.what();
  }
  const BatchPlan plan(24, {{4, 3}, {3, 4}});
  EXPECT_THROW(plan.micro_batch(0, 0, 3), InvalidArgument);
  EXPECT_THROW(plan.rank(2), InvalidArgument);
  EXPECT_THROW(plan.rank(-1), InvalidArgument);
}

// One step's window offsets, sorted (the order within a step does not change the update).
using StepOffsets = std::vector<uint64_t>;

StepOffsets run_step(const Sampler& sampler, const BatchPlan& plan, DataPosition& pos) {
  StepOffsets s = offsets_of(sampler, step_indices(plan, pos.samples_seen));
  pos.advance(plan.global_batch());
  return s;
}

TEST(BatchPlan, RestoredPositionContinuesTheUninterruptedSequence) {
  const WindowSpace train{0, 37 * 8 + 1, 8, 8};  // 37 windows: steps straddle epochs
  const uint64_t seed = 1234;

  std::vector<StepOffsets> uninterrupted;
  {
    const Sampler sampler(train, seed);
    const BatchPlan plan = BatchPlan::uniform(12, 1, 12);
    DataPosition pos{.seed = seed};
    for (int i = 0; i < 20; ++i) uninterrupted.push_back(run_step(sampler, plan, pos));
  }

  for (int stop : {0, 1, 7, 19}) {
    // The first job runs `stop` steps on 3 ranks, then "saves" its position.
    DataPosition saved;
    {
      const Sampler sampler(train, seed);
      const BatchPlan plan(12, {{2, 2}, {1, 3}, {5, 1}});
      DataPosition pos{.seed = seed};
      for (int i = 0; i < stop; ++i) EXPECT_EQ(run_step(sampler, plan, pos), uninterrupted[i]);
      saved = pos;  // a plain struct: what the checkpoint stores
    }
    // The relaunched job has 5 ranks and rebuilds everything from the saved position.
    const Sampler sampler(train, saved.seed);
    const BatchPlan plan(12, {{1, 2}, {2, 1}, {3, 1}, {1, 1}, {4, 1}});
    DataPosition pos = saved;
    EXPECT_EQ(pos.step, static_cast<uint64_t>(stop));
    EXPECT_EQ(pos.samples_seen, static_cast<uint64_t>(stop) * 12);
    for (int i = stop; i < 20; ++i)
      EXPECT_EQ(run_step(sampler, plan, pos), uninterrupted[i]) << "stop " << stop << " step " << i;
  }
}

TEST(BatchPlan, ChangingTheGlobalBatchNeitherSkipsNorRepeatsSamples) {
  const Sampler sampler(WindowSpace{0, 64 * 2 + 1, 2, 2}, 5);
  DataPosition pos{.seed = 5};
  std::vector<uint64_t> consumed;
  for (uint64_t b : {8, 8, 12, 4, 16, 16}) {
    const BatchPlan plan = BatchPlan::uniform(b, 2, b / 4);
    const std::vector<uint64_t> idx = step_indices(plan, pos.samples_seen);
    consumed.insert(consumed.end(), idx.begin(), idx.end());
    pos.advance(b);
  }
  std::sort(consumed.begin(), consumed.end());
  ASSERT_EQ(consumed.size(), pos.samples_seen);
  for (uint64_t i = 0; i < consumed.size(); ++i) EXPECT_EQ(consumed[i], i);
  // 64 samples: exactly the first epoch, every window once.
  EXPECT_EQ(pos.samples_seen, 64u);
  std::vector<uint64_t> offsets = offsets_of(sampler, consumed);
  EXPECT_EQ(std::unique(offsets.begin(), offsets.end()), offsets.end());
}

}  // namespace
}  // namespace etr::data
