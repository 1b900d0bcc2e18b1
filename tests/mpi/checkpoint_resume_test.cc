// Resume equivalence (checkpoint/, examples/train/trainer.h), run at np 4: a checkpoint
// saved by the first a ranks after 3 of 6 steps, resumed by the first b ranks.
//   - restore is a byte copy whatever the world sizes: right after it, parameters and
//     both AdamW moments equal the saver's at step 3 bitwise, and so does the position
//   - a == b: training on to step 6 gives the uninterrupted run's losses and parameters
//     bitwise (the sums run in the same order as without the interruption)
//   - a != b: within data_parallel_test's tolerance of the single-process run
// and checkpoint.resume: "latest" picks the newest checkpoint over both tiers, starts
// fresh when there is none; an explicit path with nothing usable is a CheckpointError.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr::testing {
namespace {
namespace fs = std::filesystem;
using train::Trainer;

constexpr int kSaveStep = 3;
constexpr int kSteps = 6;
// data_parallel_test's tolerance against the single-process run: the batch is summed in
// another order on another number of ranks, which Adam's m / sqrt(v) amplifies where a
// gradient is near eps. There 1.8e-6 to 3.5e-6 after 6 steps; 2e-5 allowed. Losses 1e-5.
constexpr double kTolerance = 2e-5;
constexpr double kLossTolerance = 1e-5;

// An uninterrupted run on the first n ranks that saved a checkpoint after kSaveStep
// steps (sync, into `dir`). Every rank of the world holds the results (rank 0's).
struct SavedRun {
  fs::path dir;
  TrainState at_save;
  std::vector<double> losses;  // steps 1..kSteps
  std::vector<float> final_params;
};

class CheckpointResume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = new SharedTempDir(world().group(), "ckpt_resume"); }
  static void TearDownTestSuite() {
    runs_.clear();
    delete root_;
    root_ = nullptr;
  }

  // The run on n ranks, made on first use (collective over the world).
  static const SavedRun& saved(int n) {
    auto it = runs_.find(n);
    if (it != runs_.end()) return it->second;
    SavedRun r;
    r.dir = root_->path() / ("saved-by-" + std::to_string(n));
    if (const auto g = first_ranks(n))
      guarded([&] {
        Trainer t(tiny_config({"checkpoint.dir=" + r.dir.string(), "checkpoint.async=false"}), *g,
                  test_log());
        for (int i = 0; i < kSaveStep; ++i) r.losses.push_back(t.train_step().loss);
        EXPECT_TRUE(t.save_checkpoint("durable"));
        r.at_save = snapshot(t);
        for (int i = kSaveStep; i < kSteps; ++i) r.losses.push_back(t.train_step().loss);
        r.final_params = snapshot(t).params;
      });
    idle_barrier(world().group());
    broadcast(r.at_save, 0, world().group());
    broadcast(r.losses, 0, world().group());
    broadcast(r.final_params, 0, world().group());
    return runs_.emplace(n, std::move(r)).first->second;
  }

  static SharedTempDir* root_;
  static std::map<int, SavedRun> runs_;
};

SharedTempDir* CheckpointResume::root_ = nullptr;
std::map<int, SavedRun> CheckpointResume::runs_;

struct WorldSizes {
  int save, resume;
};

class RoundTrip : public CheckpointResume, public ::testing::WithParamInterface<WorldSizes> {};

// The first b ranks resume from `saver`'s checkpoint and train on to kSteps; `diff` is
// max |parameters - reference's| at the end. (A function, so that an ASSERT leaves only
// the group's part and every rank still meets the barrier after it.)
void resume_and_compare(int a, int b, const Group& g, const SavedRun& saver,
                        const SavedRun& reference, double& diff) {
  Trainer t(tiny_config({"checkpoint.resume=" + saver.dir.string()}), g, test_log());
  ASSERT_TRUE(t.resumed_from().has_value());
  EXPECT_EQ(*t.resumed_from(), saver.dir / step_dir_name(kSaveStep));
  const TrainState restored = snapshot(t);
  EXPECT_TRUE(bitwise_equal(restored.params, saver.at_save.params)) << "parameters";
  EXPECT_TRUE(bitwise_equal(restored.m, saver.at_save.m)) << "adam.m";
  EXPECT_TRUE(bitwise_equal(restored.v, saver.at_save.v)) << "adam.v";
  EXPECT_EQ(restored.position, saver.at_save.position) << to_string(restored.position);
  EXPECT_EQ(restored.position.step, uint64_t{kSaveStep});
  EXPECT_EQ(restored.position.samples_seen, uint64_t{kSaveStep} * 10);
  for (int i = kSaveStep; i < kSteps; ++i) {
    const double loss = t.train_step().loss;
    if (a == b) {
      EXPECT_EQ(loss, reference.losses[i]) << "step " << i + 1;
    } else {
      EXPECT_NEAR(loss, reference.losses[i], kLossTolerance) << "step " << i + 1;
    }
  }
  const std::vector<float> params = snapshot(t).params;
  diff = max_abs_diff(params, reference.final_params);
  if (a == b) {
    EXPECT_TRUE(bitwise_equal(params, reference.final_params))
        << "max |resumed - uninterrupted| = " << diff;
  } else {
    EXPECT_LT(diff, kTolerance);
  }
  std::vector<float> root_params = params;  // the replicas stay identical
  broadcast(root_params, 0, g);
  EXPECT_TRUE(bitwise_equal(params, root_params)) << "rank " << g.rank() << " of " << b;
}

TEST_P(RoundTrip, RestoresBitwiseAndTrainsOnAsTheUninterruptedRun) {
  const auto [a, b] = GetParam();
  if (std::max(a, b) > world().size()) {
    GTEST_SKIP() << "needs " << std::max(a, b) << " ranks";
  }
  const SavedRun& saver = saved(a);
  const SavedRun& reference = saved(a == b ? b : 1);  // same layout, or the single process
  double diff = -1;
  if (const auto g = first_ranks(b)) {
    guarded([&] { resume_and_compare(a, b, *g, saver, reference, diff); });
  }
  if (world().rank() == 0) {
    std::printf("%d -> %d ranks: max |resumed - %s| = %.3g\n", a, b,
                a == b ? "uninterrupted on the same ranks" : "single process", diff);
  }
  idle_barrier(world().group());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, RoundTrip,
                         ::testing::Values(WorldSizes{1, 1}, WorldSizes{2, 2}, WorldSizes{2, 3},
                                           WorldSizes{3, 1}, WorldSizes{4, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.save) + "_to_" +
                                  std::to_string(info.param.resume);
                         });

// checkpoint.resume = "latest" over the durable and the fast tier, on the whole world.
TEST_F(CheckpointResume, LatestPicksTheNewestOverBothTiers) {
  const fs::path durable = root_->path() / "latest-durable", fast = root_->path() / "latest-fast";
  const std::vector<std::string> tiers = {"checkpoint.dir=" + durable.string(),
                                          "checkpoint.fast_dir=" + fast.string(),
                                          "checkpoint.async=false"};
  auto with_latest = tiers;
  with_latest.push_back("checkpoint.resume=latest");
  Trainer t(tiny_config(tiers), world().group(), test_log());
  t.train_step();
  t.train_step();
  ASSERT_TRUE(t.save_checkpoint("durable"));  // durable step 2
  t.train_step();
  ASSERT_TRUE(t.save_checkpoint("fast"));  // fast step 3: the newest
  const TrainState at3 = snapshot(t);
  {
    Trainer r(tiny_config(with_latest), world().group(), test_log());
    ASSERT_TRUE(r.resumed_from().has_value());
    EXPECT_EQ(*r.resumed_from(), fast / step_dir_name(3));
    const TrainState s = snapshot(r);
    EXPECT_EQ(s.position, at3.position);
    EXPECT_TRUE(bitwise_equal(s.params, at3.params));
    EXPECT_TRUE(bitwise_equal(s.m, at3.m));
    EXPECT_TRUE(bitwise_equal(s.v, at3.v));
  }
  t.train_step();
  ASSERT_TRUE(t.save_checkpoint("durable"));  // durable step 4: now the newest
  const TrainState at4 = snapshot(t);
  Trainer r(tiny_config(with_latest), world().group(), test_log());
  ASSERT_TRUE(r.resumed_from().has_value());
  EXPECT_EQ(*r.resumed_from(), durable / step_dir_name(4));
  EXPECT_EQ(r.position(), at4.position);
  EXPECT_TRUE(bitwise_equal(snapshot(r).params, at4.params));
}

TEST_F(CheckpointResume, LatestWithNoCheckpointStartsFresh) {
  const fs::path empty = root_->path() / "fresh-empty";  // exists, holds nothing usable
  const fs::path absent = root_->path() / "fresh-absent";
  if (world().rank() == 0) fs::create_directories(empty / ".step-000000005.partial");
  idle_barrier(world().group());
  Trainer fresh(tiny_config({}), world().group(), test_log());
  Trainer t(tiny_config({"checkpoint.dir=" + absent.string(),
                         "checkpoint.fast_dir=" + empty.string(), "checkpoint.resume=latest"}),
            world().group(), test_log());
  EXPECT_FALSE(t.resumed_from().has_value());
  EXPECT_EQ(t.position().step, 0u);
  EXPECT_EQ(t.position().samples_seen, 0u);
  EXPECT_TRUE(bitwise_equal(snapshot(t).params, snapshot(fresh).params));
  EXPECT_TRUE(bitwise_equal(snapshot(t).m, snapshot(fresh).m));
}

TEST_F(CheckpointResume, ExplicitPathWithNothingUsableIsACheckpointError) {
  const fs::path empty = root_->path() / "explicit-empty";
  const fs::path unfinished = root_->path() / "explicit-unfinished";  // step-7/ without manifest
  if (world().rank() == 0) {
    fs::create_directories(empty);
    fs::create_directories(unfinished / step_dir_name(7));
  }
  idle_barrier(world().group());
  for (const fs::path& p : {empty, unfinished, unfinished / step_dir_name(7)}) {
    CapturedLog log;
    try {
      Trainer t(tiny_config({"checkpoint.resume=" + p.string()}), world().group(), log.log());
      ADD_FAILURE() << "resumed from " << p << " which holds no usable checkpoint";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("usable checkpoint"), std::string::npos) << what;
      EXPECT_NE(what.find(p.string()), std::string::npos) << what;
    }
    if (world().rank() == 0 && p != empty) {  // the unfinished save was tried and refused
      EXPECT_NE(log.text().find("no older checkpoint to fall back to"), std::string::npos)
          << log.text();
    }
  }
}

}  // namespace
}  // namespace etr::testing
