// etr-train's loop on one rank: it learns the synthetic corpus (held-out loss below the
// corpus's bigram entropy, 1.617 nats/token, so it learned more than which byte follows
// which; the entropy rate is 0.315), gradient accumulation equals one large
// micro-batch, and a model resumed from exported weights continues identically.
//
// Finite or stop, at np 1 and 2: a step whose loss or gradient norm is not finite leaves
// the parameters, moments and position bitwise as they were and ends with an error naming
// the step on every rank (optimizer.lr = 1e30, which validation accepts, makes step 2's
// loss NaN; ETR_NONFINITE_AT_STEP puts a NaN into the last rank's gradients only, so the
// other ranks can only learn of it through the sums); optimizer.skip_nonfinite_steps
// skips and counts such steps instead; a checkpoint of non-finite state is refused and
// the previous one stays usable.
#include "examples/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "checkpoint/manifest.h"
#include "examples/gpt/hf_weights.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "unit/scoped_env.h"
#include "examples/gpt/model_presets.h"

namespace etr::train {
namespace {

TrainConfig tiny_config(std::vector<std::string> extra = {}) {
  TrainConfig c = parse_config(R"(
    model { preset: "tiny" }
    optimizer { lr: 3e-3 }
    schedule { warmup_steps: 2 max_steps: 300 }
    batch { global_batch: 4 micro_batch: 2 }
    data { synthetic: true synthetic_size: "64KiB" val_fraction: 0.1 }
    log { log_every: 1000 eval_every: 1000 eval_batches: 4 log_level: LOG_LEVEL_WARN }
    runtime { threads: 1 }
  )");
  apply_overrides(c, extra);
  resolve(c, gpt::model_presets());
  return c;
}

TEST(Trainer, LearnsTheSyntheticCorpus) {
  if (testing::world().size() > 1) GTEST_SKIP() << "a single-process test (data_parallel_test covers np > 1)";
  Trainer t(tiny_config(), testing::world());
  RunSummary s = t.run();
  EXPECT_GT(s.first_loss, 5.0);  // ln 256 = 5.55 at initialisation
  EXPECT_LT(s.final_val_loss, 1.4) << "held-out loss after 300 steps";
}

TEST(Trainer, AccumulatingMicroBatchesEqualsOneLargeBatch) {
  if (testing::world().size() > 1) GTEST_SKIP() << "a single-process test (data_parallel_test covers np > 1)";
  Trainer a(tiny_config({"batch.micro_batch=1"}), testing::world());  // 4 micro-batches
  Trainer b(tiny_config({"batch.micro_batch=4"}), testing::world());  // 1 micro-batch
  for (int i = 0; i < 5; ++i) {
    StepStats sa = a.train_step(), sb = b.train_step();
    EXPECT_NEAR(sa.loss, sb.loss, 1e-5) << "step " << i;
  }
  const int64_t n = a.model().layout().numel();
  double max_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::fabs(double(a.model().params()[i]) - b.model().params()[i]));
  }
  // Float sums in a different order, amplified a little by Adam's normalisation.
  EXPECT_LT(max_diff, 1e-4);
}

TEST(Trainer, ExportedWeightsReloadIntoAnIdenticalModel) {
  if (testing::world().size() > 1) GTEST_SKIP() << "a single-process test (data_parallel_test covers np > 1)";
  Trainer a(tiny_config({"schedule.max_steps=20"}), testing::world());
  a.run();
  const auto dir = std::filesystem::temp_directory_path() / "etr_trainer_export";
  gpt::export_hf(a.model().config(), a.model().layout(), a.model().params(), dir);
  Trainer b(tiny_config({"model.init_from=" + dir.string()}), testing::world());
  EXPECT_EQ(std::memcmp(a.model().params(), b.model().params(),
                        a.model().layout().numel() * sizeof(float)),
            0);
  EXPECT_NEAR(a.evaluate(), b.evaluate(), 0.0);
  std::filesystem::remove_all(dir);
}

TEST(Trainer, RefusesDataTooShortForOneWindow) {
  if (testing::world().size() > 1) GTEST_SKIP() << "a single-process test (data_parallel_test covers np > 1)";
  try {
    Trainer t(tiny_config({"data.synthetic_size=40"}), testing::world());
    FAIL() << "accepted 40 tokens for windows of 65";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than one sequence"), std::string::npos) << e.what();
  }
}

// Parameters, moments and position, compared bitwise (NaN included).
struct Saved {
  std::vector<float> params, m, v;
  uint64_t step = 0, samples = 0;
};

Saved save_state(Trainer& t) {
  const size_t n = static_cast<size_t>(t.model().layout().numel());
  Saved s{{t.model().params(), t.model().params() + n},
          {t.adam_m(), t.adam_m() + n},
          {t.adam_v(), t.adam_v() + n},
          t.position().step,
          t.position().samples_seen};
  return s;
}

void expect_same_state(const Saved& a, const Saved& b) {
  EXPECT_TRUE(testing::bitwise_equal(a.params, b.params)) << "the parameters changed";
  EXPECT_TRUE(testing::bitwise_equal(a.m, b.m)) << "adam.m changed";
  EXPECT_TRUE(testing::bitwise_equal(a.v, b.v)) << "adam.v changed";
}

// ETR_NONFINITE_AT_STEP for the last rank only.
std::string on_last_rank(int step) {
  return std::to_string(step) + ":" + std::to_string(testing::world().size() - 1);
}

// The error of a step that must stop, or "" when it did not throw.
std::string stop_error(Trainer& t) {
  try {
    t.train_step();
  } catch (const NonFiniteError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainerFiniteOrStop, NonFiniteLossStopsBeforeTheOptimizerAndNamesTheStep) {
  Trainer t(tiny_config({"optimizer.lr=1e30"}), testing::world());
  EXPECT_TRUE(std::isfinite(t.train_step().loss));
  const Saved before = save_state(t);
  const std::string error = stop_error(t);
  EXPECT_NE(error.find("step 2: the loss"), std::string::npos) << error;
  EXPECT_NE(error.find("is nan"), std::string::npos) << error;
  EXPECT_NE(error.find("optimizer.skip_nonfinite_steps"), std::string::npos) << error;
  expect_same_state(before, save_state(t));
  EXPECT_EQ(t.position().step, 1u);
  EXPECT_EQ(t.position().samples_seen, before.samples);
}

TEST(TrainerFiniteOrStop, NonFiniteGradientOnOneRankStopsEveryRank) {
  testing::ScopedEnv env("ETR_NONFINITE_AT_STEP", on_last_rank(3));
  Trainer t(tiny_config(), testing::world());
  t.train_step();
  const StepStats second = t.train_step();
  EXPECT_TRUE(std::isfinite(second.loss) && std::isfinite(second.grad_norm));
  const Saved before = save_state(t);
  const std::string error = stop_error(t);
  EXPECT_NE(error.find("step 3: the norm of the gradients"), std::string::npos) << error;
  expect_same_state(before, save_state(t));
  EXPECT_EQ(t.position().step, 2u);
}

TEST(TrainerFiniteOrStop, SkipsAndCountsUpToTheLimitThenStops) {
  // lr 1e30: every step from 2 on is NaN; two are skipped, the third stops the run.
  Trainer t(tiny_config({"optimizer.lr=1e30", "optimizer.skip_nonfinite_steps=2"}),
            testing::world());
  EXPECT_FALSE(t.train_step().skipped);
  const Saved after_first = save_state(t);
  for (int i = 0; i < 2; ++i) {
    const StepStats s = t.train_step();
    EXPECT_TRUE(s.skipped) << "step " << i + 2;
    expect_same_state(after_first, save_state(t));
  }
  EXPECT_EQ(t.skipped_steps(), 2);
  EXPECT_EQ(t.position().step, 3u);  // the data moved on
  EXPECT_EQ(t.position().samples_seen, 3u * 4u);
  const std::string error = stop_error(t);
  EXPECT_NE(error.find("step 4: the loss"), std::string::npos) << error;
  EXPECT_NE(error.find("2 such steps were skipped already"), std::string::npos) << error;
  expect_same_state(after_first, save_state(t));
}

TEST(TrainerFiniteOrStop, SkippedStepLeavesTheStateAndTrainingGoesOn) {
  testing::ScopedEnv env("ETR_NONFINITE_AT_STEP", on_last_rank(2));
  Trainer t(tiny_config({"optimizer.skip_nonfinite_steps=1", "schedule.max_steps=5"}),
            testing::world());
  EXPECT_FALSE(t.train_step().skipped);
  const Saved after_first = save_state(t);
  EXPECT_TRUE(t.train_step().skipped);
  expect_same_state(after_first, save_state(t));
  EXPECT_EQ(t.position().samples_seen, 2u * 4u);
  const RunSummary sum = t.run();
  EXPECT_EQ(sum.steps, 3);
  EXPECT_EQ(sum.skipped_steps, 0);  // counted in the train_step() above, not in run()
  EXPECT_EQ(t.skipped_steps(), 1);
  EXPECT_TRUE(std::isfinite(sum.final_loss));
  EXPECT_FALSE(testing::bitwise_equal(after_first.params, save_state(t).params))
      << "training did not go on after the skipped step";
}

TEST(TrainerFiniteOrStop, RunCountsSkippedSteps) {
  testing::ScopedEnv env("ETR_NONFINITE_AT_STEP", on_last_rank(2));
  Trainer t(tiny_config({"optimizer.skip_nonfinite_steps=3", "schedule.max_steps=4"}),
            testing::world());
  const RunSummary sum = t.run();
  EXPECT_EQ(sum.steps, 4);
  EXPECT_EQ(sum.skipped_steps, 1);
  EXPECT_TRUE(std::isfinite(sum.final_loss));
}

TEST(TrainerFiniteOrStop, CheckpointOfNonFiniteStateIsRefusedAndThePreviousStays) {
  testing::SharedTempDir tmp(testing::world().group(), "trainer_nonfinite_ckpt");
  for (const char* async : {"false", "true"}) {
    SCOPED_TRACE(std::string("checkpoint.async=") + async);
    const auto root = tmp.path() / (std::string("async-") + async);
    Trainer t(tiny_config({"checkpoint.dir=" + root.string(),
                           std::string("checkpoint.async=") + async, "checkpoint.keep=0"}),
              testing::world());
    t.train_step();
    EXPECT_TRUE(t.save_checkpoint("durable"));
    t.flush_checkpoints();
    ASSERT_TRUE(t.checkpoint_writer()->stats().back().ok);
    t.train_step();
    // A NaN in one parameter (the same on every rank: replicas) and an infinity in adam.v.
    const TensorEntry& e = t.model().layout().entries()[1];
    t.model().params()[e.offset + e.numel() / 2] = std::nanf("");
    const_cast<float*>(t.adam_v())[t.model().layout().entries().back().offset] = INFINITY;
    t.save_checkpoint("durable");
    t.flush_checkpoints();
    const SaveStats& s = t.checkpoint_writer()->stats().back();
    EXPECT_FALSE(s.ok) << "a checkpoint of NaN parameters was written";
    EXPECT_NE(s.error.find("non-finite"), std::string::npos) << s.error;
    EXPECT_NE(s.error.find("'param'"), std::string::npos) << s.error;
    testing::idle_barrier(testing::world().group());
    EXPECT_FALSE(std::filesystem::exists(root / step_dir_name(2)));
    EXPECT_EQ(testing::names_in(root), std::vector<std::string>{step_dir_name(1)});
    EXPECT_EQ(verify_files(root / step_dir_name(1), read_manifest(root / step_dir_name(1))), "");
  }
}

// A resume with another global batch records where it took effect, so that the data
// position of its checkpoints still agrees with their step (check_manifest_sense) and a
// second resume from them works.
TEST(TrainerCheckpoint, ResumeWithAnotherGlobalBatchSavesCheckpointsThatResume) {
  testing::SharedTempDir tmp(testing::world().group(), "trainer_batch_change");
  const std::string dir = "checkpoint.dir=" + tmp.path().string();
  {
    Trainer t(tiny_config({dir, "checkpoint.async=false"}), testing::world());
    t.train_step();
    t.train_step();
    ASSERT_TRUE(t.save_checkpoint("durable"));
  }
  {
    Trainer t(tiny_config({dir, "checkpoint.async=false", "checkpoint.resume=latest",
                           "batch.global_batch=6"}),
              testing::world());
    ASSERT_EQ(t.position().samples_seen, 8u);
    t.train_step();
    ASSERT_TRUE(t.save_checkpoint("durable"));
  }
  const ckpt::Manifest m = read_manifest(tmp.path() / step_dir_name(3));  // throws if senseless
  EXPECT_EQ(m.data().samples_seen(), 8u + 6u);
  EXPECT_EQ(m.data().batch_origin_step(), 2u);
  EXPECT_EQ(m.data().batch_origin_samples(), 8u);
  Trainer t(tiny_config({dir, "checkpoint.resume=latest", "batch.global_batch=6"}),
            testing::world());
  ASSERT_TRUE(t.resumed_from().has_value());
  EXPECT_EQ(*t.resumed_from(), tmp.path() / step_dir_name(3));
  EXPECT_EQ(t.position().samples_seen, 14u);
}

}  // namespace
}  // namespace etr::train
