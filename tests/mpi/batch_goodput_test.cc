// The automatic global batch (batch.global_batch: auto; parallel/batch_goodput.cc) at
// np 1-4: pinned to one B (min = max) it trains bitwise as that B configured (the
// schedule's progress is the step, AdaScale's gain 1 at the base batch); the gradient
// noise scale is measured on every rank alike; the samples seen are the sum of the steps'
// B; and a checkpoint carries the B, the schedule's progress and the noise averages, so a
// resumed run continues bitwise as the uninterrupted one.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "unit/scoped_env.h"
#include "runtime/config/train_config.h"
#include "runtime/state_names.h"

namespace etr::train {
namespace {

TrainConfig config(std::vector<std::string> extra) {
  const int n = testing::world().group().size();
  TrainConfig c = parse_config(R"(
    model { preset: "tiny" }
    optimizer { lr: 3e-3 grad_clip: 0.5 }
    schedule { warmup_steps: 2 max_steps: 100 }
    batch { micro_batch: 2 }
    data { synthetic: true synthetic_size: "64KiB" val_fraction: 0.1 }
    log { log_every: 1000 eval_every: 0 log_level: LOG_LEVEL_WARN }
    runtime { threads: 1 }
  )");
  extra.insert(extra.begin(), "batch.min_global_batch=" + std::to_string(4 * n));
  extra.insert(extra.begin(), "batch.max_global_batch=" + std::to_string(16 * n));
  apply_overrides(c, extra);
  resolve(c, gpt::model_presets());
  return c;
}

struct Outcome {
  std::vector<float> param;
  std::vector<double> losses, lrs, noise;
  uint64_t samples = 0, batch_sum = 0;
  double progress = 0;
};

Outcome train(Trainer& t, int steps) {
  Outcome r;
  for (int i = 0; i < steps; ++i) {
    const StepStats s = t.train_step();
    r.losses.push_back(s.loss);
    r.lrs.push_back(s.lr);
    r.noise.push_back(s.noise_scale);
    r.batch_sum += static_cast<uint64_t>(s.global_batch);
  }
  r.param = t.gather_state(state::kParam);
  r.samples = t.session().position().samples_seen;
  r.progress = t.session().schedule_progress();
  return r;
}

bool bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Goodput, PinnedToOneBatchItTrainsBitwiseAsThatBatchConfigured) {
  World& w = testing::world();
  const std::string B = std::to_string(4 * w.group().size());
  Trainer fixed(config({"batch.global_batch=" + B}), w);
  const Outcome want = train(fixed, 6);
  Trainer pinned(config({"batch.global_batch=auto", "batch.max_global_batch=" + B}), w);
  const Outcome got = train(pinned, 6);
  EXPECT_TRUE(bitwise(want.param, got.param)) << "parameters differ";
  EXPECT_EQ(want.losses, got.losses);
  EXPECT_EQ(want.lrs, got.lrs) << "AdaScale's gain is 1 at the base batch";
  EXPECT_EQ(got.samples, got.batch_sum);
  EXPECT_DOUBLE_EQ(got.progress, 6.0);
}

TEST(Goodput, TheNoiseScaleIsMeasuredAndAgreedOnEveryRank) {
  World& w = testing::world();
  Trainer t(config({"batch.global_batch=auto", "batch.micro_batch=1"}), w);
  const Outcome r = train(t, 8);
  const double mine = t.session().noise_scale();
  ASSERT_TRUE(std::isfinite(mine)) << "no noise scale after 8 steps";
  EXPECT_GE(mine, 0.0);
  double lo = mine, hi = mine;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, w.group().comm());
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, w.group().comm());
  EXPECT_EQ(lo, hi) << "the ranks' estimates differ: their decisions would";
  EXPECT_EQ(r.samples, r.batch_sum) << "samples seen are the sum of the steps' global batches";
}

// The GPU's engine (DeviceEngine: each bucket's local norm taken on the device before its
// sum over the device communicator) run on host memory measures the noise the host's
// engine measures, step by step (the squares summed in another order: 1e-9 relative).
TEST(Goodput, TheDeviceEngineMeasuresTheHostEnginesNoise) {
  World& w = testing::world();
  const TrainConfig c = config({"batch.global_batch=auto", "batch.micro_batch=1"});
  Trainer host(c, w);
  const Outcome want = train(host, 6);
  testing::ScopedEnv device_engine("ETR_TEST_HOST_DEVICE_ENGINE", "1");
  Trainer dev(c, w);
  const Outcome got = train(dev, 6);
  ASSERT_EQ(want.noise.size(), got.noise.size());
  int finite = 0;
  for (size_t i = 0; i < want.noise.size(); ++i) {
    if (!std::isfinite(want.noise[i])) {
      EXPECT_FALSE(std::isfinite(got.noise[i])) << "step " << i;
      continue;
    }
    ++finite;
    EXPECT_NEAR(got.noise[i], want.noise[i], 1e-9 * std::abs(want.noise[i]) + 1e-12) << "step " << i;
  }
  EXPECT_GT(finite, 0) << "no step measured the noise";
}

TEST(Goodput, ACheckpointCarriesTheBatchPolicyAndResumesBitwise) {
  World& w = testing::world();
  etr::testing::SharedTempDir dir(w.group(), "goodput_ckpt");
  const std::vector<std::string> o = {"batch.global_batch=auto", "batch.micro_batch=1",
                                      "checkpoint.async=false",
                                      "checkpoint.dir=" + (dir.path() / "run").string()};
  Outcome first, second, whole;
  {
    Trainer t(config(o), w);
    first = train(t, 6);
    ASSERT_TRUE(t.save_checkpoint("durable"));
    second = train(t, 4);
  }
  std::vector<std::string> again = o;
  again.push_back("checkpoint.resume=latest");
  Trainer r(config(again), w);
  ASSERT_TRUE(r.resumed_from().has_value());
  EXPECT_EQ(r.session().schedule_progress(), first.progress);
  whole = train(r, 4);
  EXPECT_TRUE(bitwise(second.param, whole.param)) << "the resumed run differs";
  EXPECT_EQ(second.losses, whole.losses);
  EXPECT_EQ(second.lrs, whole.lrs);
  EXPECT_EQ(second.progress, whole.progress);
}

}  // namespace
}  // namespace etr::train
