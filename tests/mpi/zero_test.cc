// ZeRO stages 1-3 (parallel/zero_engine.h) at np 1-4: after k steps every stage's
// parameters and AdamW moments are bitwise those of stage 0 (data parallelism) on the
// same ranks with the same global batch, with and without gradient accumulation, with
// buckets smaller than a layer and a world that does not divide the layout (the
// replicated tail); a checkpoint saved at one stage and world size loads at every other
// one with the same state and continues bitwise as stage 0 does on that world size (and
// as the uninterrupted run on the same one); a model that
// does not fit the host memory budget at stage 0 trains at stage 3 under that budget.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "unit/scoped_env.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "parallel/zero_engine.h"
#include "runtime/state_names.h"

namespace etr::train {
namespace {

namespace fs = std::filesystem;

// The tiny GPT, global batch 12: at np 3 and 4 the shares are 4+4+4 and 3+3+3+3, with
// micro_batch 2 a short last micro-batch; buckets of 8 and 20 KiB split its 196 KB
// blocks into many buckets.
TrainConfig config(int stage, std::vector<std::string> extra) {
  TrainConfig c = parse_config(R"(
    model { preset: "tiny" }
    optimizer { lr: 3e-3 grad_clip: 0.5 }
    schedule { warmup_steps: 1 max_steps: 100 }
    batch { global_batch: 12 micro_batch: 6 }
    data { synthetic: true synthetic_size: "64KiB" val_fraction: 0.1 }
    parallel { first_bucket_size: "8KiB" bucket_size: "20KiB" }
    log { log_every: 1000 eval_every: 0 log_level: LOG_LEVEL_WARN }
    runtime { threads: 1 }
  )");
  extra.push_back("parallel.zero_stage=" + std::to_string(stage));
  apply_overrides(c, extra);
  resolve(c, gpt::model_presets());
  return c;
}

struct State {
  std::vector<float> param, m, v;
  std::vector<double> losses;
};

State state_of(Trainer& t) {
  State s;
  s.param = t.gather_state(state::kParam);
  s.m = t.gather_state(state::kAdamM);
  s.v = t.gather_state(state::kAdamV);
  return s;
}

State train(Trainer& t, int steps) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(t.train_step().loss);
  State s = state_of(t);
  s.losses = losses;
  return s;
}

bool bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void expect_same_state(const State& want, const State& got, const std::string& what) {
  EXPECT_TRUE(bitwise(want.param, got.param)) << what << ": parameters differ";
  EXPECT_TRUE(bitwise(want.m, got.m)) << what << ": adam.m differs";
  EXPECT_TRUE(bitwise(want.v, got.v)) << what << ": adam.v differs";
  ASSERT_EQ(want.losses.size(), got.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_EQ(want.losses[i], got.losses[i]) << what << ": loss of step " << i + 1;
  }
}

void every_stage_equals_stage_0(const std::vector<std::string>& extra) {
  World& w = testing::world();
  Trainer zero(config(0, extra), w);
  const State ref = train(zero, 3);
  for (int stage = 1; stage <= 3; ++stage) {
    Trainer t(config(stage, extra), w);
    expect_same_state(ref, train(t, 3), "stage " + std::to_string(stage) + " on " +
                                            std::to_string(w.group().size()) + " ranks");
  }
}

TEST(Zero, EveryStageEqualsStage0Bitwise) { every_stage_equals_stage_0({}); }

TEST(Zero, EveryStageEqualsStage0BitwiseWithAccumulation) {
  every_stage_equals_stage_0({"batch.micro_batch=1"});
}

TEST(Zero, EveryStageEqualsStage0BitwiseWithOverlapOffAndOneBucket) {
  every_stage_equals_stage_0({"parallel.overlap=false", "parallel.first_bucket_size=64MiB",
                              "parallel.bucket_size=64MiB"});
}

// Stage 3 gathers each layer's buckets before its forward and backward: the recorded
// order predicts every later step (no re-recording), and it gathers about 2 Psi per
// micro-batch (forward and backward).
TEST(Zero, Stage3PrefetchesInTheRecordedOrder) {
  World& w = testing::world();
  Trainer t(config(3, {}), w);
  for (int i = 0; i < 3; ++i) t.train_step();
  auto& e = dynamic_cast<ZeroEngine&>(t.session().engine());
  ASSERT_NE(e.gatherer(), nullptr);
  EXPECT_EQ(e.gatherer()->reorders(), 0);
  const double psi_bytes = static_cast<double>(t.model().layout().numel()) * sizeof(float);
  const double per_pass = static_cast<double>(e.gathered_bytes()) /
                          (3.0 * static_cast<double>(t.rank_batch().accumulation));
  EXPECT_GT(per_pass, 1.9 * psi_bytes);  // forward and backward of every micro-batch
  EXPECT_LT(per_pass, 3.1 * psi_bytes);  // the head re-gathers the tied wte's buckets
}

// Prefetch: from the second step on (the first records the order), most layer passes find
// buckets the pass before launched ahead (counted by the gatherer; a layer's backward right
// after its own forward has nothing new to prefetch); with parallel.zero_prefetch_size = 0
// none does.
TEST(Zero, Stage3PrefetchesTheNextPassBeforeItRuns) {
  World& w = testing::world();
  for (const bool prefetch : {true, false}) {
    Trainer t(config(3, {prefetch ? "parallel.zero_prefetch_size=1MiB"
                                  : "parallel.zero_prefetch_size=0"}),
              w);
    const int steps = 3;
    for (int i = 0; i < steps; ++i) t.train_step();
    auto& e = dynamic_cast<ZeroEngine&>(t.session().engine());
    const int64_t passes =
        2 * t.session().stack().size() * static_cast<int64_t>(t.rank_batch().accumulation);
    if (prefetch) {
      EXPECT_GE(e.gatherer()->prefetched_passes(), (steps - 1) * passes / 2)
          << "of " << passes << " passes a step";
    } else {
      EXPECT_EQ(e.gatherer()->prefetched_passes(), 0) << "without prefetch";
    }
  }
}

// An evaluation at stage 3 gathers the whole model and gives it back after: no gathered
// parameters are held between steps; training goes on bitwise as stage 0's.
TEST(Zero, Stage3ReleasesTheParametersAfterAnEvaluation) {
  World& w = testing::world();
  Trainer t(config(3, {}), w);
  t.train_step();
  auto& e = dynamic_cast<ZeroEngine&>(t.session().engine());
  EXPECT_EQ(e.gathered_resident_bytes(), 0u) << "after a step";
  const double eval3 = t.evaluate();
  EXPECT_EQ(e.gathered_resident_bytes(), 0u) << "after an evaluation";
  t.train_step();
  State got = state_of(t);
  Trainer zero(config(0, {}), w);
  zero.train_step();
  EXPECT_EQ(zero.evaluate(), eval3);
  zero.train_step();
  State want = state_of(zero);
  expect_same_state(want, got, "stage 3 with an evaluation between steps");
}

// A pass in another order (here: forward of the layers backwards) is noticed, logged and
// recorded; the next normal step is noticed again and recorded again, and from then on
// the order holds. Training stays exact throughout (stage 0 never sees the odd pass).
TEST(Zero, Stage3RecordsAChangedOrderAgain) {
  World& w = testing::world();
  Trainer t(config(3, {}), w);
  t.train_step();
  t.train_step();
  auto& e = dynamic_cast<ZeroEngine&>(t.session().engine());
  ASSERT_EQ(e.gatherer()->reorders(), 0);
  e.begin_step();
  for (int l = t.session().stack().size(); l-- > 0;) e.before_forward(l);
  e.end_backward();
  EXPECT_EQ(e.gatherer()->reorders(), 1);
  t.train_step();
  EXPECT_EQ(e.gatherer()->reorders(), 2);
  t.train_step();
  t.train_step();
  EXPECT_EQ(e.gatherer()->reorders(), 2) << "the normal order should hold again";
  State got = state_of(t);
  Trainer zero(config(0, {}), w);
  State want = train(zero, 5);
  want.losses.clear();
  expect_same_state(want, got, "stage 3 after an odd pass");
}

// A checkpoint written at stage 2 (asynchronously: the writer thread reads each rank's own
// blocks of the parameters while the gathers of the others' may still run) and at stage 3
// on every rank, each rank writing the blocks it owns, read at every stage on every world
// size from 1 to N (the first ranks): the restored state is the saved one; every stage
// continues bitwise as stage 0 does on that world size, and on N ranks as the
// uninterrupted run.
void checkpoints_load_at_any_stage_and_world_size(int saved_stage, bool async) {
  World& w = testing::world();
  const int n = w.group().size();
  testing::SharedTempDir dir(w.group(), "zero_ckpt");
  const std::vector<std::string> ckpt = {
      "checkpoint.dir=" + dir.path().string(), "checkpoint.every=0",
      std::string("checkpoint.async=") + (async ? "true" : "false")};
  State saved, continued;
  fs::path step_dir;
  {
    Trainer t(config(saved_stage, ckpt), w);
    train(t, 2);
    ASSERT_TRUE(t.save_checkpoint("durable"));
    saved = state_of(t);
    continued = train(t, 2);
    t.flush_checkpoints();
    step_dir = t.checkpoint_writer()->stats().back().dir;
    ASSERT_TRUE(t.checkpoint_writer()->stats().back().ok);
  }
  for (int world = 1; world <= n; ++world) {
    std::optional<Group> g = testing::first_ranks(world);
    if (g) {
      testing::guarded([&] {
        State stage0;  // the continuation at stage 0 on this world size
        for (int stage = 0; stage <= 3; ++stage) {
          const std::string what = "stage " + std::to_string(saved_stage) + " on " +
                                   std::to_string(n) + " ranks read at stage " +
                                   std::to_string(stage) + " on " + std::to_string(world);
          Trainer t(config(stage, {}), *g, w.log());
          t.restore(step_dir);
          State s = state_of(t);
          s.losses = saved.losses;
          expect_same_state(saved, s, what);
          const State next = train(t, 2);
          if (stage == 0) stage0 = next;
          expect_same_state(stage0, next, what + ", continued (against stage 0)");
          if (world == n) expect_same_state(continued, next, what + ", continued");
        }
      });
    }
    testing::idle_barrier(w.group());
  }
}

TEST(Zero, CheckpointsLoadAtAnyStageAndWorldSize) {
  checkpoints_load_at_any_stage_and_world_size(3, false);
}

TEST(Zero, CheckpointsOfStage2SavedInTheBackgroundLoadAtAnyStageAndWorldSize) {
  checkpoints_load_at_any_stage_and_world_size(2, true);
}

// ZeRO's device path (what a GPU runs: whole windows, the gradients and parameters through
// the staged communicators, every operation on the state through DeviceOps, host copies
// for checkpoints and restores) on host memory (ETR_TEST_HOST_DEVICE_ENGINE): every stage
// bitwise stage 0 of the host path, with and without accumulation; a checkpoint of the
// device path loads on the host path and the reverse, bitwise, and both go on alike.
TEST(Zero, TheDevicePathOnHostMemoryIsTheHostPathBitwise) {
  World& w = testing::world();
  const std::string n = std::to_string(w.group().size()) + " ranks";
  for (const std::vector<std::string>& extra : {std::vector<std::string>{}, {"batch.micro_batch=1"}}) {
    Trainer zero(config(0, extra), w);
    const State ref = train(zero, 3);
    testing::ScopedEnv device_path("ETR_TEST_HOST_DEVICE_ENGINE", std::string("1"));
    for (int stage = 1; stage <= 3; ++stage) {
      Trainer t(config(stage, extra), w);
      expect_same_state(ref, train(t, 3), "the device path at stage " + std::to_string(stage) + " on " + n +
                                              (extra.empty() ? "" : ", accumulating"));
    }
  }
  testing::SharedTempDir dir(w.group(), "zero_device_ckpt");
  const std::vector<std::string> ckpt = {"checkpoint.dir=" + dir.path().string(), "checkpoint.every=0",
                                         "checkpoint.async=false"};
  for (const bool device_saves : {true, false}) {
    State saved, continued;
    fs::path step_dir;
    {
      std::optional<testing::ScopedEnv> env;
      if (device_saves) env.emplace("ETR_TEST_HOST_DEVICE_ENGINE", std::string("1"));
      Trainer t(config(device_saves ? 3 : 1, ckpt), w);
      train(t, 2);
      ASSERT_TRUE(t.save_checkpoint("durable"));
      step_dir = t.checkpoint_writer()->stats().back().dir;
      saved = state_of(t);
      continued = train(t, 2);
    }
    std::optional<testing::ScopedEnv> env;
    if (!device_saves) env.emplace("ETR_TEST_HOST_DEVICE_ENGINE", std::string("1"));
    const int stage = device_saves ? 2 : 3;
    const std::string what = std::string(device_saves ? "the device path's" : "the host path's") +
                             " checkpoint read at stage " + std::to_string(stage) + " on the other path";
    Trainer t(config(stage, {}), w);
    t.restore(step_dir);
    State s = state_of(t);
    s.losses = saved.losses;
    expect_same_state(saved, s, what);
    expect_same_state(continued, train(t, 2), what + ", continued");
  }
}

// ETR_HOST_MEMORY_BUDGET halfway between what stage 3 and stage 0 take: stage 0 runs out
// of memory, stage 3 trains.
TEST(Zero, Stage3TrainsAModelThatStage0CannotFit) {
  World& w = testing::world();
  if (w.group().size() == 1) GTEST_SKIP() << "one rank holds everything at every stage";
  // 8 blocks of 0.75 MiB: stage 3 gathers two at a time; no accumulation.
  const std::vector<std::string> wide = {"model.n_layer=8", "model.d_model=128",
                                         "model.seq_len=16", "batch.global_batch=4",
                                         "batch.micro_batch=4",
                                         "parallel.first_bucket_size=256KiB",
                                         "parallel.bucket_size=256KiB"};
  constexpr int kSteps = 4;
  size_t peak[4] = {};
  for (int stage : {0, 3}) {
    Trainer t(config(stage, wide), w);
    for (int i = 0; i < kSteps; ++i) t.train_step();
    // The memory model's peak (parallel/memory_model.h): measured at stage 0, at least the
    // measured one at stage 3, whose gradient window it bounds by all of it.
    peak[stage] = t.session().predicted_peak();
    EXPECT_GE(peak[stage], t.session().allocator().stats().peak);
  }
  ASSERT_LT(peak[3], peak[0]) << "stage 3 should need less memory than stage 0";
  const std::string budget = std::to_string((peak[0] + peak[3]) / 2);
  setenv("ETR_HOST_MEMORY_BUDGET", budget.c_str(), 1);
  // Refused up front (ConfigError: the state does not fit) or by the allocator.
  EXPECT_THROW(Trainer(config(0, wide), w), Error) << "budget " << budget;
  {
    Trainer t(config(3, wide), w);
    double last = 0;
    for (int i = 0; i < kSteps; ++i) last = t.train_step().loss;
    EXPECT_TRUE(std::isfinite(last));
    EXPECT_LE(t.session().allocator().stats().peak, std::stoull(budget));
  }
  unsetenv("ETR_HOST_MEMORY_BUDGET");
}

// Configuration errors, alike on every rank and before any communication.
TEST(Zero, RefusesAnImpossibleStage) {
  EXPECT_THROW(config(4, {}), ConfigError);
  EXPECT_THROW(config(-1, {}), ConfigError);
}

}  // namespace
}  // namespace etr::train
