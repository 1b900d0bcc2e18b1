// etr-train's loop in mixed precision on the host (runtime.precision = bf16: the example
// GPT-2's bf16 layers on the CPU's bf16 kernel set, the f32 master state in DeviceEngine),
// at np 1 and 2, against the same loop in fp32 with the same global batch:
// - 100 steps of the tiny GPT-2: the bf16 run's loss curve stays within 2 % of the fp32
//   one (the median of every 10 steps, and the held-out loss after the 100), and it
//   learns (the loss falls by more than half);
// - the bf16 copy the layers compute with is the f32 master rounded to nearest even,
//   bitwise, after steps 25, 50, 75 and 100, and the replicas' masters are the same bits
//   on every rank;
// - a checkpoint holds the f32 master only (no "param.bf16" anywhere in it): one written
//   in bf16 resumes in fp32 and one written in fp32 resumes in bf16, the restored state
//   bitwise the saved one;
// - bf16 with ZeRO is refused with a ConfigError naming the setting.
#include <gtest/gtest.h>

#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/config/train_config.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/state_names.h"

namespace etr::train {
namespace {

using ::etr::testing::SharedTempDir;
using ::etr::testing::test_log;

TrainConfig config(const std::string& precision, std::vector<std::string> extra = {}) {
  TrainConfig c = parse_config(R"(
    model { preset: "tiny" n_layer: 2 n_head: 4 d_model: 72 seq_len: 37 vocab_size: 301 }
    optimizer { lr: 2e-3 grad_clip: 1.0 }
    schedule { warmup_steps: 10 max_steps: 200 }
    batch { global_batch: 8 micro_batch: 2 }
    data { synthetic: true synthetic_size: "64KiB" val_fraction: 0.1 }
    log { log_every: 1000 eval_every: 1000 eval_batches: 4 log_level: LOG_LEVEL_WARN }
    runtime { threads: 1 }
  )");
  extra.push_back("runtime.precision=" + precision);
  apply_overrides(c, extra);
  resolve(c, gpt::model_presets());
  return c;
}

const Group& world() { return ::etr::testing::world().group(); }

// The engine's bf16 copy against the master, element by element.
void expect_copy_is_the_rounded_master(Trainer& t, int step) {
  FlatState& s = t.session().engine().state();
  ASSERT_TRUE(s.has(state::kParamBf16));
  const float* p = s.data<float>(state::kParam);
  const uint16_t* p16 = s.data<uint16_t>(state::kParamBf16);
  for (int64_t i = 0; i < s.held_numel(); ++i) {
    ASSERT_EQ(p16[i], f32_to_bf16(p[i])) << "element " << i << " after step " << step;
  }
}

TEST(MixedPrecisionTraining, Bf16FollowsFp32For100Steps) {
  Trainer fp32(config("fp32"), world(), test_log());
  Trainer bf16(config("bf16"), world(), test_log());
  std::vector<double> a, b;
  for (int i = 0; i < 100; ++i) {
    a.push_back(fp32.train_step().loss);
    b.push_back(bf16.train_step().loss);
    ASSERT_TRUE(std::isfinite(b.back())) << "step " << i + 1;
    if (i % 25 == 24) expect_copy_is_the_rounded_master(bf16, i + 1);
  }
  EXPECT_LT(b.back(), 0.5 * b.front()) << "the bf16 run learns";
  // The curves by the median of every 10 steps (measured: within 0.25 % at np 1 and 2). A
  // median, because a single step may spike in one run and not in the other: at lr 3e-3
  // and 4 sequences a step, step 15 of the fp32 run was 4.53 beside 3.4 around it, of the
  // bf16 run 4.37 at np 1 and 3.43 at np 2 (Adam's response to the order of the sums).
  auto median10 = [](const std::vector<double>& v, int k) {
    std::vector<double> w(v.begin() + 10 * k, v.begin() + 10 * k + 10);
    std::nth_element(w.begin(), w.begin() + 5, w.end());
    return w[5];
  };
  for (int k = 0; k < 10; ++k) {
    const double ma = median10(a, k), mb = median10(b, k);
    EXPECT_NEAR(mb, ma, 0.02 * ma) << "the median loss of steps " << 10 * k + 1 << "-" << 10 * k + 10;
  }
  const double ea = fp32.evaluate(), eb = bf16.evaluate();
  EXPECT_NEAR(eb, ea, 0.02 * ea) << "held-out loss";
  // The replicas are the same bits (the summed gradients are).
  std::vector<float> mine = bf16.gather_state(state::kParam), root = mine;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, world().comm());
  EXPECT_EQ(root, mine) << "rank " << world().rank() << "'s parameters differ from rank 0's";
}

// Every byte of every file under `dir`, for a search.
std::string all_bytes(const std::filesystem::path& dir) {
  std::string out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    out.append(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  return out;
}

void save_and_resume(const std::string& saved_in, const std::string& resumed_in) {
  SharedTempDir dir(world(), "mixed_precision");
  const std::string ckpt = (dir.path() / "ckpt").string();
  Trainer saver(config(saved_in, {"checkpoint.dir=" + ckpt, "checkpoint.async=false"}), world(),
                test_log());
  for (int i = 0; i < 3; ++i) saver.train_step();
  ASSERT_TRUE(saver.save_checkpoint("durable"));
  saver.flush_checkpoints();
  MPI_Barrier(world().comm());
  EXPECT_EQ(all_bytes(ckpt).find(state::kParamBf16), std::string::npos)
      << "the checkpoint holds the f32 master only";
  const std::vector<float> p = saver.gather_state(state::kParam),
                           m = saver.gather_state(state::kAdamM),
                           v = saver.gather_state(state::kAdamV);
  Trainer resumer(config(resumed_in, {"checkpoint.resume=" + ckpt}), world(), test_log());
  ASSERT_TRUE(resumer.resumed_from().has_value());
  EXPECT_EQ(resumer.position().step, 3u);
  EXPECT_EQ(resumer.gather_state(state::kParam), p) << "parameters restored bitwise";
  EXPECT_EQ(resumer.gather_state(state::kAdamM), m) << "adam.m restored bitwise";
  EXPECT_EQ(resumer.gather_state(state::kAdamV), v) << "adam.v restored bitwise";
  if (resumed_in == "bf16") expect_copy_is_the_rounded_master(resumer, 3);
  for (int i = 0; i < 2; ++i) {
    const double a = saver.train_step().loss, b = resumer.train_step().loss;
    EXPECT_NEAR(b, a, 0.02 * a) << "step " << 4 + i;
  }
}

TEST(MixedPrecisionTraining, ABf16CheckpointResumesInFp32) { save_and_resume("bf16", "fp32"); }

TEST(MixedPrecisionTraining, AnFp32CheckpointResumesInBf16) { save_and_resume("fp32", "bf16"); }

// Generation under bf16 on the host runs the fp32 twin on a copy of the master and leaves
// the session training (on a GPU it would end training): sampling twice between steps
// works, and the steps after it are the steps of a run that never sampled.
TEST(MixedPrecisionTraining, GeneratingBetweenStepsLeavesTrainingAsItWas) {
  Trainer sampled(config("bf16"), world(), test_log());
  Trainer plain(config("bf16"), world(), test_log());
  for (int i = 0; i < 3; ++i) {
    const double a = sampled.train_step().loss, b = plain.train_step().loss;
    EXPECT_EQ(a, b) << "step " << i + 1;
    const std::string text = sampled.generate("ab", 4);  // every rank: no collective
    EXPECT_FALSE(text.empty()) << "after step " << i + 1;
  }
  EXPECT_EQ(sampled.gather_state(state::kParam), plain.gather_state(state::kParam));
}

TEST(MixedPrecisionTraining, Bf16WithZeroIsRefused) {
  try {
    Trainer t(config("bf16", {"parallel.zero_stage=1"}), world(), test_log());
    FAIL() << "bf16 with ZeRO stage 1 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.zero_stage = 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace etr::train
