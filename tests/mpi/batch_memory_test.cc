// The batch policy's memory side (parallel/train_session.h, "Memory") at np 1-4:
//   - the memory model's planned peak is within 5 % of the allocator's measured peak over
//     a grid of micro-batches, ZeRO stages, recomputation and pipeline schedules;
//   - an out-of-memory error inside a step (ETR_TEST_BUDGET_CUT: the budget cut between
//     two checks) is agreed on by every rank, the step runs again with half the
//     micro-batch, and the run equals one that used the smaller micro-batch from the start
//     (bitwise when every rank halves; within rounding when one does), no sample lost;
//   - a cut seen at a step boundary re-plans without an error, and the peak stays in it;
//   - when not even one sequence fits, recomputation (auto) makes it fit, bitwise as a run
//     that recomputed from the start; without it, one sentence on every rank;
//   - runtime.recompute = blocks trains bitwise as without it;
//   - batch.micro_batch = auto picks the largest that fits the budget less the margin;
//   - ETR_RUN_MEMORY_HALVINGS halves the micro-batch, the global batch kept.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "mpi/batch_test_util.h"
#include "parallel/zero_engine.h"
#include "mpi/mpi_test_main.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/state_names.h"

namespace etr::train {
namespace {

using namespace batch_testing;

// The tiny GPT with 4 blocks, global batch 4 per rank in micro-batches of 4.
TrainConfig config(std::vector<std::string> extra) {
  extra.insert(extra.begin(), "batch.global_batch=" + std::to_string(4 * testing::world().group().size()));
  TrainConfig c = parse_config(R"(
    model { preset: "tiny" n_layer: 4 }
    optimizer { lr: 3e-3 grad_clip: 0.5 }
    schedule { warmup_steps: 1 max_steps: 100 }
    batch { micro_batch: 4 }
    data { synthetic: true synthetic_size: "64KiB" val_fraction: 0.1 }
    parallel { first_bucket_size: "8KiB" bucket_size: "20KiB" }
    log { log_every: 1000 eval_every: 0 log_level: LOG_LEVEL_WARN }
    runtime { threads: 1 }
  )");
  apply_overrides(c, extra);
  resolve(c, gpt::model_presets());
  return c;
}

// Between the planned peaks at micro-batches b and b + 1 of `c` (this rank's).
size_t budget_between(const TrainConfig& c, int64_t b) {
  Trainer probe(c, testing::world());
  const MemoryModel& m = probe.session().memory_model();
  const bool rc = probe.session().recompute();
  return (m.peak(b, rc) + m.peak(b + 1, rc)) / 2;
}

TEST(BatchMemory, ModelWithinFivePercentOfTheMeasuredPeak) {
  World& w = testing::world();
  const int n = w.group().size();
  std::vector<std::vector<std::string>> grid;
  for (int stage = 0; stage <= 3; ++stage) {
    for (const char* b : {"1", "2", "4"}) {
      grid.push_back({"parallel.zero_stage=" + std::to_string(stage), std::string("batch.micro_batch=") + b});
    }
  }
  grid.push_back({"runtime.recompute=blocks", "batch.micro_batch=4"});
  grid.push_back({"runtime.recompute=blocks", "parallel.zero_stage=3", "batch.micro_batch=2"});
  // Mixed precision: bf16 activations with f32 statistics and the bf16 parameter copy.
  grid.push_back({"runtime.precision=bf16", "batch.micro_batch=2"});
  grid.push_back({"runtime.precision=bf16", "runtime.recompute=blocks", "batch.micro_batch=4"});
  if (n % 2 == 0) {
    for (const char* s : {"gpipe", "1f1b", "zb-h1"}) {
      grid.push_back({"parallel.pp=2", std::string("parallel.pp_schedule=") + s, "batch.micro_batch=1"});
    }
    grid.push_back({"parallel.pp=2", "parallel.zero_stage=3", "batch.micro_batch=2"});
    grid.push_back({"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.pp_virtual_stages=2",
                    "batch.micro_batch=1", "model.n_layer=6"});
    grid.push_back({"parallel.pp=2", "parallel.pp_schedule=zb-v", "batch.micro_batch=1"});
  }
  for (const auto& extra : grid) {
    std::string what;
    for (const std::string& e : extra) what += e + " ";
    Trainer t(config(extra), w);
    for (int i = 0; i < 3; ++i) t.train_step();
    const double planned = static_cast<double>(t.session().predicted_peak());
    const double measured = static_cast<double>(t.session().allocator().stats().peak);
    EXPECT_LT(std::fabs(planned - measured), 0.05 * measured)
        << what << "on rank " << w.rank() << ": planned " << planned << ", measured " << measured
        << " (windows measured " << t.session().engine().memory().unreduced_peak << " + "
        << t.session().engine().memory().gathered_peak << ", planned "
        << t.session().engine().predicted_windows(static_cast<int>(t.session().batch_plan().rank(t.grid().dp_rank()).accumulation)).grads
        << " + " << t.session().engine().predicted_windows(1).params << ")";
  }
}

TEST(BatchMemory, OutOfMemoryInTheFirstStepEqualsTheHalfMicroBatchBitwise) {
  World& w = testing::world();
  const State want = [&] {
    Trainer t(config({"batch.micro_batch=2"}), w);
    return train(t, 3);
  }();
  const std::string cut = "1:" + std::to_string(budget_between(config({}), 2));
  ScopedEnv env("ETR_TEST_BUDGET_CUT", cut);  // every rank
  Trainer t(config({}), w);
  const State got = train(t, 3);
  EXPECT_EQ(t.session().oom_recoveries(), 1);
  EXPECT_EQ(t.session().micro_batch(), 2);
  expect_bitwise(want, got, "out of memory at step 1, " + cut);
  EXPECT_LE(t.session().allocator().stats().peak, t.session().allocator().stats().budget);
}

TEST(BatchMemory, OutOfMemoryInBf16EqualsTheHalfMicroBatchBitwise) {
  World& w = testing::world();
  const State want = [&] {
    Trainer t(config({"runtime.precision=bf16", "batch.micro_batch=2"}), w);
    return train(t, 3);
  }();
  const std::string cut = "1:" + std::to_string(budget_between(config({"runtime.precision=bf16"}), 2));
  ScopedEnv env("ETR_TEST_BUDGET_CUT", cut);
  Trainer t(config({"runtime.precision=bf16"}), w);
  const State got = train(t, 3);
  EXPECT_EQ(t.session().oom_recoveries(), 1);
  EXPECT_EQ(t.session().micro_batch(), 2);
  expect_bitwise(want, got, "bf16, out of memory at step 1, " + cut);
}

TEST(BatchMemory, OutOfMemoryOnOneRankLaterIsRedoneWithinRounding) {
  World& w = testing::world();
  const State want = [&] {
    Trainer t(config({"batch.micro_batch=2"}), w);
    return train(t, 4);
  }();
  const int last = w.group().size() - 1;
  const std::string cut = "3:" + std::to_string(budget_between(config({}), 2)) + ":" + std::to_string(last);
  ScopedEnv env("ETR_TEST_BUDGET_CUT", cut);
  Trainer t(config({}), w);
  const State got = train(t, 4);
  EXPECT_EQ(t.session().oom_recoveries(), 1) << "every rank counts it";
  EXPECT_EQ(t.session().micro_batch(), w.rank() == last ? 2 : 4);
  expect_near(want, got, "out of memory at step 3 on rank " + std::to_string(last));
}

// An out-of-memory error inside backward (ETR_OOM_IN_BACKWARD_AT_STEP: after the middle
// block's backward of the last micro-batch, the buckets of the later layers launched, the
// ZeRO gathers and windows in use) at every ZeRO stage and on the GPU's engine (its staged
// communicator on host memory): the failing rank makes the rest of the step's engine calls
// without compute, every rank discards the step and redoes it with half the micro-batch.
// When every rank fails at step 1 the run is bitwise one that used the half micro-batch
// from the start; when one rank fails later, within rounding.
TEST(BatchMemory, OutOfMemoryInsideBackwardIsRedoneAtEveryZeroStage) {
  World& w = testing::world();
  const int last = w.group().size() - 1;
  for (const std::string stage : {"0", "1", "2", "3", "device"}) {
    std::vector<std::string> o = {stage == "device" ? "parallel.zero_stage=0" : "parallel.zero_stage=" + stage};
    std::optional<ScopedEnv> engine;
    if (stage == "device") engine.emplace("ETR_TEST_HOST_DEVICE_ENGINE", "1");
    std::vector<std::string> half = o;
    half.push_back("batch.micro_batch=2");
    const State want = [&] {
      Trainer t(config(half), w);
      return train(t, 4);
    }();
    {
      ScopedEnv env("ETR_OOM_IN_BACKWARD_AT_STEP", "1");  // every rank
      Trainer t(config(o), w);
      const State got = train(t, 4);
      EXPECT_EQ(t.session().oom_recoveries(), 1) << stage;
      EXPECT_EQ(t.session().micro_batch(), 2) << stage;
      expect_bitwise(want, got, "stage " + stage + ": out of memory inside backward at step 1");
    }
    ScopedEnv env("ETR_OOM_IN_BACKWARD_AT_STEP", "3:" + std::to_string(last));
    Trainer t(config(o), w);
    const State got = train(t, 4);
    EXPECT_EQ(t.session().oom_recoveries(), 1) << stage << ": every rank counts it";
    EXPECT_EQ(t.session().micro_batch(), w.rank() == last ? 2 : 4) << stage;
    expect_near(want, got, "stage " + stage + ": out of memory inside backward at step 3 on rank " +
                               std::to_string(last));
  }
}

// An allocation failure at every allocation site of a step (ETR_TEST_FAIL_ALLOCATION=1:N on
// every rank): at ZeRO 0 and at ZeRO-3 accumulating 2 micro-batches, N swept over the host
// allocation events of step 1 (the activations; ZeRO-3's gathered parameters and gradient
// window, layer by layer and bucket by bucket, in forward and backward): every one of the
// first 16, then every k-th (at most 32 runs in all) and the last, so every site recurs in
// the sweep. Each run redoes the step at half the micro-batch and is bitwise the run at that
// micro-batch from the start; no site ends the run.
TEST(BatchMemory, AnAllocationFailureAnywhereInAStepIsRedone) {
  World& w = testing::world();
  for (const std::string stage : {"0", "3"}) {
    const std::vector<std::string> o = {"parallel.zero_stage=" + stage, "batch.micro_batch=2",
                                        "parallel.first_bucket_size=32KiB", "parallel.bucket_size=64KiB"};
    const State want = [&] {
      std::vector<std::string> half = o;
      half[1] = "batch.micro_batch=1";
      Trainer t(config(half), w);
      return train(t, 2);
    }();
    unsigned long long events = 0;
    {
      Trainer t(config(o), w);
      const uint64_t before = t.session().allocator().events();
      t.train_step();
      events = t.session().allocator().events() - before;
      MPI_Allreduce(MPI_IN_PLACE, &events, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, w.group().comm());
    }
    ASSERT_GT(events, 0u) << "stage " << stage << ": step 1 allocated nothing";
    if (stage == "3") {
      EXPECT_GT(events, 8u) << "ZeRO-3's windows take memory inside the step";
    }
    const unsigned long long stride = std::max<unsigned long long>(1, (events - 16 + 15) / 16);
    for (unsigned long long n = 1; n <= events; n += n < 16 ? 1 : std::min(stride, std::max(1ull, events - n))) {
      const std::string what = "stage " + stage + ", allocation " + std::to_string(n) + " of " +
                               std::to_string(events) + " in step 1 failed";
      ScopedEnv env("ETR_TEST_FAIL_ALLOCATION", "1:" + std::to_string(n));
      Trainer t(config(o), w);
      const State got = train(t, 2);
      EXPECT_EQ(t.session().oom_recoveries(), 1) << what;
      EXPECT_EQ(t.session().micro_batch(), 1) << what;
      expect_bitwise(want, got, what);
    }
  }
}

// Every rank's budget alike (the smallest), between the plan of `o` that keeps the whole
// gradient window and the one that reduces each micro-batch (in blocks).
size_t budget_between_modes(const std::vector<std::string>& o, int64_t b) {
  Trainer probe(config(o), testing::world());
  auto& z = dynamic_cast<ZeroEngine&>(probe.session().engine());
  const int k = static_cast<int>(probe.rank_batch().accumulation);
  const size_t whole = z.predicted_windows_if(k, false).grads, each = z.predicted_windows_if(k, true).grads;
  size_t budget = probe.session().memory_model().peak(b, false) - (whole - each) / 2, lowest = budget;
  MPI_Allreduce(&budget, &lowest, 1, MPI_UNSIGNED_LONG, MPI_MIN, testing::world().group().comm());
  return lowest;
}

// ZeRO-2 and 3 accumulating 4 micro-batches under a budget that holds the plan with a
// blocked gradient window but not with the whole one (stage 2 also with buckets narrower
// than a row): each micro-batch is reduce-scattered
// into the shard in blocks (the engine says so; the GPT's layers write through its sink,
// the head's part of the tied wte reduced apart), the micro-batch is not lowered, the peak
// stays within the budget and the gradient window within its prediction (a bucket in
// flight and a block: under a tenth of the model's gradients here), and after 3 steps the
// state is stage 0's within rounding (the sums over ranks, micro-batches, the wte's two
// parts and the row blocks are added in another order). With room, the same runs keep the
// whole window (bitwise: the tests above).
TEST(BatchMemory, ZeroReducesEachMicroBatchWhenTheWholeWindowDoesNotFit) {
  World& w = testing::world();
  const State want = [&] {
    Trainer t(config({"batch.micro_batch=1"}), w);
    return train(t, 3);
  }();
  // Stage 2 also with buckets of 512 B, narrower than fc_proj's rows (1 KiB): a block is
  // then a row over several buckets, and the tied wte's reduced apart in many.
  for (const auto& [stage_name, bucket] : {std::pair{"2", ""}, std::pair{"3", ""}, std::pair{"2", "512B"}}) {
    const std::string stage = std::string(stage_name) + (*bucket ? std::string(", buckets of ") + bucket : "");
    std::vector<std::string> o = {std::string("parallel.zero_stage=") + stage_name, "batch.micro_batch=1"};
    if (*bucket) {
      o.push_back(std::string("parallel.first_bucket_size=") + bucket);
      o.push_back(std::string("parallel.bucket_size=") + bucket);
    }
    size_t budget = 0, each_window = 0;
    {
      Trainer probe(config(o), w);
      auto& z = dynamic_cast<ZeroEngine&>(probe.session().engine());
      ASSERT_FALSE(z.reduces_each_micro_batch()) << "stage " << stage << ": with room, one reduction a step";
      const int k = static_cast<int>(probe.rank_batch().accumulation);
      ASSERT_EQ(k, 4);
      const size_t whole = z.predicted_windows_if(k, false).grads;
      each_window = z.predicted_windows_if(k, true).grads;
      ASSERT_LT(each_window, whole);
      budget = probe.session().memory_model().peak(1, false) - (whole - each_window) / 2;
      size_t lowest = budget;  // every rank's budget alike (the smallest)
      MPI_Allreduce(&budget, &lowest, 1, MPI_UNSIGNED_LONG, MPI_MIN, w.group().comm());
      budget = lowest;
    }
    std::vector<std::string> tight = o;
    tight.push_back("runtime.memory_budget=" + std::to_string(budget));
    Trainer t(config(tight), w);
    auto& z = dynamic_cast<ZeroEngine&>(t.session().engine());
    EXPECT_TRUE(z.reduces_each_micro_batch()) << "stage " << stage;
    EXPECT_TRUE(z.blocks_gradients()) << "stage " << stage;
    EXPECT_LT(each_window * 10, static_cast<size_t>(t.session().engine().memory().psi) * sizeof(float))
        << "stage " << stage << ": the blocked window is a bucket and a block";
    EXPECT_EQ(t.session().micro_batch(), 1) << "stage " << stage;
    const State got = train(t, 3);
    EXPECT_LE(t.session().allocator().stats().peak, budget) << "stage " << stage;
    EXPECT_LE(z.memory().unreduced_peak, each_window) << "stage " << stage;
    expect_near(want, got, "stage " + stage + " reducing each micro-batch");
  }
}

// Blocked gradients (ZeRO-2, each micro-batch reduced, 2 a step) with an allocation failure
// on every rank at the first events of step 1's backward (the window's pages for the
// head's blocks of the tied wte, reduced apart, then the blocks' buckets) and at a few
// later ones: each rank makes the engine calls it had not made, the collectives of the
// shared tensor's blocks included (ZeroEngine::finish_shared), the step is redone at half
// the micro-batch (whose plan then keeps the whole window: its activations make room) and
// the run stays within rounding of stage 0. (A failure on one rank
// only leaves the ranks with different micro-batch counts, which turns reducing each
// micro-batch off: under this budget the whole window does not fit, so it is not run.)
TEST(BatchMemory, AnAllocationFailureInsideBlockedGradientsIsRedone) {
  World& w = testing::world();
  const State want = [&] {
    Trainer t(config({"batch.micro_batch=1"}), w);
    return train(t, 2);
  }();
  std::vector<std::string> o = {"parallel.zero_stage=2", "batch.micro_batch=2"};
  o.push_back("runtime.memory_budget=" + std::to_string(budget_between_modes(o, 2)));
  unsigned long long events = 0;
  {
    Trainer t(config(o), w);
    ASSERT_TRUE(dynamic_cast<ZeroEngine&>(t.session().engine()).blocks_gradients());
    const uint64_t before = t.session().allocator().events();
    t.train_step();
    events = t.session().allocator().events() - before;
    MPI_Allreduce(MPI_IN_PLACE, &events, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, w.group().comm());
  }
  ASSERT_GT(events, 12u);
  for (unsigned long long n : {2ull, 3ull, 4ull, 6ull, events / 3, events / 2, events - 1}) {
    const std::string what = "allocation " + std::to_string(n) + " of " + std::to_string(events) + " in step 1 failed";
    ScopedEnv env("ETR_TEST_FAIL_ALLOCATION", "1:" + std::to_string(n));
    Trainer t(config(o), w);
    const State got = train(t, 2);
    EXPECT_EQ(t.session().oom_recoveries(), 1) << what;
    expect_near(want, got, what);
  }
}

TEST(BatchMemory, ACutSeenAtAStepBoundaryReplansWithoutAnError) {
  World& w = testing::world();
  const size_t bytes = budget_between(config({}), 2);
  ScopedEnv env("ETR_TEST_BUDGET_CUT", "2:" + std::to_string(bytes));
  ScopedEnv mode("ETR_TEST_BUDGET_CUT_MODE", "boundary");
  Trainer t(config({}), w);
  t.train_step();
  EXPECT_EQ(t.session().micro_batch(), 2) << "re-planned at the end of step 1";
  const State got = train(t, 2);
  EXPECT_EQ(t.session().oom_recoveries(), 0);
  EXPECT_EQ(t.session().memory_replans(), 1);
  EXPECT_LE(t.session().allocator().stats().peak, bytes) << "the peak since the re-plan";
  EXPECT_EQ(got.samples, 3u * 4u * static_cast<uint64_t>(w.group().size()));
}

TEST(BatchMemory, RecomputationIsBitwiseAndTurnsOnWhenOneSequenceDoesNotFitWithoutIt) {
  World& w = testing::world();
  const State plain = [&] {
    Trainer t(config({"batch.micro_batch=1", "runtime.recompute=off"}), w);
    return train(t, 3);
  }();
  const State recomputed = [&] {
    Trainer t(config({"batch.micro_batch=1", "runtime.recompute=blocks"}), w);
    EXPECT_TRUE(t.session().recompute());
    return train(t, 3);
  }();
  expect_bitwise(plain, recomputed, "recomputation");
  // A budget between the peaks of one sequence with and without recomputation.
  size_t bytes = 0;
  {
    Trainer probe(config({"batch.micro_batch=1"}), w);
    const MemoryModel& m = probe.session().memory_model();
    ASSERT_LT(m.peak(1, true), m.peak(1, false));
    bytes = (m.peak(1, true) + m.peak(1, false)) / 2;
  }
  {
    ScopedEnv env("ETR_TEST_BUDGET_CUT", "1:" + std::to_string(bytes));
    Trainer t(config({"batch.micro_batch=1"}), w);
    expect_bitwise(plain, train(t, 3), "recomputation turned on by an out-of-memory error");
    EXPECT_TRUE(t.session().recompute());
    EXPECT_EQ(t.session().oom_recoveries(), 1);
  }
  {
    ScopedEnv env("ETR_TEST_BUDGET_CUT", "1:" + std::to_string(bytes));
    Trainer t(config({"batch.micro_batch=1", "runtime.recompute=off"}), w);
    try {
      t.train_step();
      ADD_FAILURE() << "no error when nothing fits";
    } catch (const OutOfMemory& e) {
      EXPECT_NE(std::string(e.what()).find("not even a micro-batch of 1 sequence"), std::string::npos)
          << e.what();
    }
  }
}

// With an automatic micro-batch and runtime.recompute = auto, recomputation that lets a
// larger micro-batch fit is timed against the smaller one without it; every rank keeps the
// same choice, which is one of the two, and training goes on within the budget.
TEST(BatchMemory, RecomputationIsTimedForSpeedAndEveryRankKeepsTheSameChoice) {
  World& w = testing::world();
  size_t budget = 0;
  int64_t share = 0;
  {
    Trainer probe(config({"batch.micro_batch=4"}), w);
    const MemoryModel& m = probe.session().memory_model();
    share = static_cast<int64_t>(probe.session().batch_plan().rank(w.group().rank()).samples());
    // 4 fits with recomputation only (under the automatic margin of 10 %).
    budget = static_cast<size_t>(static_cast<double>(m.peak(4, true) + m.peak(4, false)) / 2 / 0.9);
    ASSERT_LT(static_cast<double>(m.peak(4, true)), 0.9 * static_cast<double>(budget));
    ASSERT_GT(static_cast<double>(m.peak(4, false)), 0.9 * static_cast<double>(budget));
  }
  ASSERT_EQ(share, 4);
  Trainer t(config({"batch.micro_batch=auto", "runtime.memory_budget=" + std::to_string(budget)}), w);
  const int64_t without = t.session().micro_batch();
  ASSERT_LT(without, 4);
  EXPECT_EQ(t.session().recompute_trial_phase(), 1);
  for (int i = 0; i < 7; ++i) t.train_step();
  EXPECT_EQ(t.session().recompute_trial_phase(), 3);
  const bool rc = t.session().recompute();
  EXPECT_EQ(t.session().micro_batch(), rc ? 4 : without);
  int64_t mine[2] = {rc ? 1 : 0, t.session().micro_batch()}, lo[2], hi[2];
  MPI_Allreduce(mine, lo, 2, MPI_INT64_T, MPI_MIN, w.group().comm());
  MPI_Allreduce(mine, hi, 2, MPI_INT64_T, MPI_MAX, w.group().comm());
  EXPECT_EQ(lo[0], hi[0]) << "the ranks chose differently";
  EXPECT_LE(t.session().allocator().stats().peak, budget);
}

TEST(BatchMemory, AutoMicroBatchIsTheLargestThatFitsTheBudgetLessTheMargin) {
  World& w = testing::world();
  const size_t budget = budget_between(config({}), 2) + (1 << 20);
  Trainer t(config({"batch.micro_batch=auto", "runtime.memory_budget=" + std::to_string(budget)}), w);
  const MemoryModel& m = t.session().memory_model();
  const int64_t share = static_cast<int64_t>(t.session().batch_plan().rank(w.group().rank()).samples());
  int64_t brute = 0;
  for (int64_t b = 1; b <= share; ++b) {
    if (static_cast<double>(m.peak(b, false)) <= 0.9 * static_cast<double>(budget)) brute = b;
  }
  ASSERT_GT(brute, 0);
  EXPECT_EQ(t.session().micro_batch(), brute);
  t.train_step();
  EXPECT_LE(t.session().allocator().stats().peak, budget);
}

TEST(BatchMemory, MemoryHalvingsFromEtrRunHalveTheMicroBatch) {
  World& w = testing::world();
  ScopedEnv env("ETR_RUN_MEMORY_HALVINGS", "1");
  Trainer t(config({}), w);
  EXPECT_EQ(t.session().micro_batch(), 2);
  EXPECT_EQ(t.session().batch_plan().global_batch(), 4u * static_cast<uint64_t>(w.group().size()));
}

}  // namespace
}  // namespace etr::train
