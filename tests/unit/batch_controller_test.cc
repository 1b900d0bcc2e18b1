// BatchController (parallel/batch_controller.h) without a session: a memory model of
// known parts, budgets, step times and gradient norms injected, peers played by the test.
// Each expected micro-batch is computed here from the model's own arithmetic.
#include "parallel/batch_controller.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "examples/gpt/model_presets.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"

namespace etr {
namespace {

// The ranks of a data-parallel group as this test plays them: this rank is `rank`; the
// others answer each gather with `others(rank, what, mine)` (default: the same as this
// one) and each minimum with their `min_others` value.
class ScriptedPeers final : public BatchPeers {
 public:
  ScriptedPeers(int rank, int size) : rank_(rank), size_(size) {}
  int dp_rank() const override { return rank_; }
  int dp_size() const override { return size_; }
  int world_size() const override { return size_; }
  bool leader() const override { return rank_ == 0; }
  int64_t min_over_world(int64_t mine, const char*) override { return std::min(mine, min_others); }
  std::vector<int64_t> gather_dp(std::span<const int64_t> mine, const char*) override {
    std::vector<int64_t> all;
    for (int r = 0; r < size_; ++r) all.insert(all.end(), mine.begin(), mine.end());
    return all;
  }
  std::vector<double> gather_dp(std::span<const double> mine, const char* what) override {
    std::vector<double> all;
    for (int r = 0; r < size_; ++r) {
      const std::vector<double> v = r == rank_ || !others ? std::vector<double>(mine.begin(), mine.end())
                                                         : others(r, what, mine);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  }
  int64_t min_others = INT64_MAX;
  std::function<std::vector<double>(int, const char*, std::span<const double>)> others;

 private:
  int rank_, size_;
};

// A small valid job (the controller reads its batch, runtime and schedule settings).
TrainConfig resolved(const std::vector<std::string>& overrides) {
  TrainConfig c = parse_config("data { synthetic: true }");
  apply_overrides(c, overrides);
  resolve(c, gpt::model_presets());
  return c;
}

constexpr size_t kFixed = 1000;  // the model: 1000 bytes, plus 100 per sample of activations
size_t activations(int64_t b, bool recompute) { return static_cast<size_t>(b) * (recompute ? 30 : 100); }
MemoryModel model() { return MemoryModel({{"state", kFixed}}, activations); }

// The largest b in [1, most] with kFixed + activations(b) <= (1 - margin) budget, by hand.
int64_t fitting(size_t budget, double margin, int64_t most, bool recompute = false) {
  int64_t best = 0;
  for (int64_t b = 1; b <= most; ++b) {
    if (static_cast<double>(kFixed + activations(b, recompute)) <= (1 - margin) * static_cast<double>(budget)) best = b;
  }
  return best;
}

struct Job {
  explicit Job(std::vector<std::string> overrides, int rank = 0, int size = 1)
      : config(resolved(with(std::move(overrides)))), peers(rank, size), alloc(2000) {
    log.set_level(LogLevel::kError);
  }
  static std::vector<std::string> with(std::vector<std::string> o) {
    o.insert(o.begin(), "batch.memory_margin=0.1");
    return o;
  }
  BatchController& start(BatchLayout layout = {}) {
    BatchHooks hooks;
    hooks.read_budget = [this] { alloc.set_budget(budget); };
    hooks.release_activations = [this] { ++releases; };
    hooks.planned = [this](int64_t b) { planned.push_back(b); };
    hooks.decision = [this](uint64_t, const std::string& tag, const std::string& text) {
      decisions.push_back(tag + ": " + text);
    };
    controller = std::make_unique<BatchController>(config, peers, alloc, log, std::move(hooks), layout);
    controller->start(model());
    return *controller;
  }
  uint64_t samples() const {
    uint64_t n = 0;
    for (const RankBatch& r : controller->plan().ranks()) n += r.samples();
    return n;
  }
  TrainConfig config;
  ScriptedPeers peers;
  HostAllocator alloc;
  Logger log{"test"};
  size_t budget = 2000;
  int releases = 0;
  std::vector<int64_t> planned;
  std::vector<std::string> decisions;
  std::unique_ptr<BatchController> controller;
};

TEST(BatchController, PicksTheLargestMicroBatchTheBudgetHolds) {
  Job job({"batch.global_batch=16", "batch.micro_batch=auto"});
  BatchController& c = job.start();
  const int64_t want = fitting(2000, 0.1, 16);
  ASSERT_EQ(want, 8);
  EXPECT_EQ(c.micro_batch(), want);
  EXPECT_EQ(c.rank_batch(), (RankBatch{8, 2, 0}));
  EXPECT_EQ(job.planned, std::vector<int64_t>{8});
  EXPECT_EQ(c.predicted_peak(), kFixed + activations(8, false));
}

TEST(BatchController, ABudgetCutLowersTheMicroBatchAndGrowthWaitsForRoom) {
  Job job({"batch.global_batch=16", "batch.micro_batch=auto"});
  BatchController& c = job.start();
  job.budget = 1500;
  ASSERT_TRUE(c.budget_wants_replan());
  c.after_step({.step = 1, .replan = true});
  EXPECT_EQ(c.micro_batch(), fitting(1500, 0.1, 16));  // 3
  EXPECT_EQ(c.rank_batch(), (RankBatch{3, 6, 1}));
  EXPECT_EQ(job.samples(), 16u);
  EXPECT_EQ(c.replans(), 1);
  EXPECT_EQ(job.releases, 1);
  // Grown back only as far as another 5 % of the budget stays free.
  job.budget = 2000;
  ASSERT_TRUE(c.budget_wants_replan());
  c.after_step({.step = 2, .replan = true});
  EXPECT_EQ(c.micro_batch(), fitting(2000, 0.15, 16));  // 7, not the 8 a fresh start takes
  job.budget = 2010;  // a wavering budget: nothing to do
  EXPECT_FALSE(c.budget_wants_replan());
  ASSERT_EQ(job.decisions.size(), 2u);
  EXPECT_NE(job.decisions[0].find("micro-batch 8 -> 3 x 6"), std::string::npos) << job.decisions[0];
}

TEST(BatchController, OutOfMemoryHalvesThenRecomputesThenSaysWhatWouldFit) {
  Job job({"batch.global_batch=16", "batch.micro_batch=auto", "runtime.recompute=auto"});
  BatchController& c = job.start();
  ASSERT_EQ(c.micro_batch(), 8);
  for (int64_t want : {4, 2, 1}) {
    c.recover_from_oom(3, "out of memory (a test's)");
    EXPECT_EQ(c.micro_batch(), want);
    EXPECT_EQ(job.samples(), 16u) << "the global batch is kept";
    EXPECT_FALSE(c.recompute());
  }
  c.recover_from_oom(3, "");
  EXPECT_EQ(c.micro_batch(), 1);
  EXPECT_TRUE(c.recompute());
  EXPECT_EQ(c.oom_recoveries(), 4);
  // The budget does not bring the failed micro-batch back until it grows past the one at
  // the last failure.
  EXPECT_FALSE(c.budget_wants_replan());
  try {
    c.recover_from_oom(3, "");
    FAIL() << "no smaller micro-batch is left";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("not even a micro-batch of 1"), std::string::npos) << e.what();
  }
}

TEST(BatchController, AnotherRankWithoutRoomStopsEveryRankWithTheSentence) {
  Job job({"batch.global_batch=16", "batch.micro_batch=auto"});
  job.peers.min_others = 0;  // a peer fits nothing
  try {
    job.start();
    FAIL() << "a rank without room must end the job";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("on another rank"), std::string::npos) << e.what();
  }
}

TEST(BatchController, SharesFollowTheRanksSpeeds) {
  Job job({"batch.global_batch=16", "batch.micro_batch=2", "batch.shares=throughput"}, 0, 2);
  job.budget = 1 << 20;
  // Rank 1 takes three times as long per sample as this one.
  job.peers.others = [](int, const char* what, std::span<const double> mine) {
    if (std::string(what).find("throughput") == std::string::npos) return std::vector<double>(mine.begin(), mine.end());
    return std::vector<double>{3 * mine[0], mine[1]};
  };
  BatchController& c = job.start();
  ASSERT_EQ(c.plan().rank(0).samples(), 8u);
  for (uint64_t step = 1; step <= 6 && c.rebalances() == 0; ++step) {
    c.after_step({.step = step, .compute_seconds = 0.1 * static_cast<double>(c.rank_batch().samples())});
  }
  ASSERT_EQ(c.rebalances(), 1);
  EXPECT_EQ(c.plan().rank(0).samples(), 12u);  // 3 : 1 of the 16
  EXPECT_EQ(c.plan().rank(1).samples(), 4u);
  EXPECT_EQ(c.rank_batch().micro_batch, 2u);
}

// One rank, the automatic global batch, gradients drawn from a model of known noise: the
// per-sample gradient has |G|^2 = 1 and trace(Sigma) = 1000, so E|g_b|^2 = 1 + 1000 / b;
// the step costs 1 s (measured as the optimizer's) plus 0.01 s a sample. Far below the noise scale, a larger B is
// almost free in statistical efficiency and spreads the fixed second: B grows.
TEST(BatchController, TheAutomaticGlobalBatchFollowsTheNoiseScale) {
  Job job({"batch.global_batch=auto", "batch.min_global_batch=4", "batch.max_global_batch=64",
           "batch.micro_batch=2", "schedule.max_steps=1000"});
  job.budget = 1 << 20;
  BatchController& c = job.start();
  ASSERT_TRUE(c.automatic_global_batch());
  ASSERT_EQ(c.global_batch(), 4u);
  const double trace = 1000;
  for (uint64_t step = 1; step <= 40 && c.global_batch() == 4; ++step) {
    const double B = static_cast<double>(c.global_batch()), b = 2;
    EXPECT_GT(c.learning_rate(step - 1), 0);
    c.first_micro_batch((b / B) * (b / B) * (1 + trace / b), 2);  // the first micro-batch's part
    StepOutcome o;
    o.step = step;
    o.samples_seen = step * c.global_batch();
    o.grad_norm = std::sqrt(1 + trace / B);
    o.summed_compute_seconds = 1.0 + 0.01 * B;  // the step's time, its fixed second included
    o.summed_optimizer_seconds = 1.0;
    c.after_step(o);
  }
  EXPECT_GT(c.global_batch(), 4u);
  EXPECT_NEAR(c.noise_scale(), trace, 0.25 * trace);
  EXPECT_EQ(job.samples(), c.global_batch());
  EXPECT_EQ(c.origin().samples, c.origin().step * 4) << "B changed after that many steps of 4";
}

// The recomputation trial: without it micro-batch 8 fits, with it 16 (the whole share);
// each choice is timed for two steps after a warm-up step, and the faster per sample kept.
void run_trial(double seconds_without, double seconds_with, bool keep) {
  Job job({"batch.global_batch=16", "batch.micro_batch=auto", "runtime.recompute=auto"});
  BatchController& c = job.start();
  ASSERT_EQ(c.trial_phase(), 1);
  ASSERT_EQ(c.micro_batch(), 8);
  for (uint64_t step = 1; step <= 6; ++step) {
    c.after_step({.step = step, .summed_compute_seconds = c.recompute() ? seconds_with : seconds_without});
    if (step == 3) {
      EXPECT_TRUE(c.recompute());
      EXPECT_EQ(c.micro_batch(), fitting(2000, 0.1, 16, true));  // 16
    }
  }
  EXPECT_EQ(c.trial_phase(), 3);
  EXPECT_EQ(c.recompute(), keep);
  EXPECT_EQ(c.micro_batch(), keep ? 16 : 8);
}

TEST(BatchController, TheRecomputationTrialKeepsTheFasterChoice) {
  run_trial(1.0, 0.5, true);
  run_trial(1.0, 0.99, false);  // within 3 %: not worth it
}

TEST(BatchController, ZeroThreeRunsEveryRankAtTheSameCount) {
  Job job({"batch.global_batch=15", "batch.micro_batch=auto", "parallel.zero_stage=3"}, 0, 2);
  BatchLayout layout;
  layout.same_counts = true;
  BatchController& c = job.start(layout);
  // 8 and 7 samples; 8 fits at once on both, so one micro-batch each.
  EXPECT_EQ(c.plan().rank(0), (RankBatch{8, 1, 0}));
  EXPECT_EQ(c.plan().rank(1), (RankBatch{7, 1, 0}));
  job.budget = 1500;  // 3 fit: 8 and 7 in 3 pieces each
  c.after_step({.step = 1, .replan = c.budget_wants_replan()});
  EXPECT_EQ(c.plan().rank(0).accumulation, c.plan().rank(1).accumulation);
  EXPECT_EQ(c.plan().rank(0), (RankBatch{3, 3, 2}));
  EXPECT_EQ(c.plan().rank(1), (RankBatch{3, 3, 1}));
}

}  // namespace
}  // namespace etr
