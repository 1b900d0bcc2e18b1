// etr-train's loop on one rank: it learns the synthetic corpus (held-out loss below the
// corpus's bigram entropy, 1.617 nats/token, so it learned more than which byte follows
// which; the entropy rate is 0.315), gradient accumulation equals one large
// micro-batch, and a model resumed from exported weights continues identically.
#include "examples/train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "examples/gpt/hf_weights.h"
#include "mpi/mpi_test_main.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"

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
  resolve(c);
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
  gpt::export_hf(a.model(), dir);
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

}  // namespace
}  // namespace etr::train
