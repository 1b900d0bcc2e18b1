// The job's side of a resize (runtime/elastic.h, Trainer::run): etr-run's SIGUSR1 reaches
// one rank (here: only rank 0, which is harder than mpirun's forwarding to all), and every
// rank stops at the same step boundary with a committed checkpoint of that step.
//  - a request that arrives before training starts (while the trainer restores) is not
//    lost: the job stops after its first step;
//  - a request at any moment while async saves are in flight stops the job at the next
//    step boundary, every rank at the same step, with that step's checkpoint the newest;
//  - resuming from the resize checkpoint continues exactly: bitwise equal to the run
//    that never stopped (same layout);
//  - with the memory tier saving every step, the resize writes nothing to disk (the step
//    is in the memory tier) and the relaunch resumes from the memory tier at that step.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/agreement.h"
#include "checkpoint/manifest.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/elastic.h"

namespace etr {
namespace {

namespace fs = std::filesystem;
using testing::SharedTempDir;
using testing::snapshot;
using testing::test_log;
using testing::tiny_config;
using testing::world;
using train::Trainer;

// An active launch whose run directory is `dir` (rank 0 creates it).
ElasticLaunch launch_in(const fs::path& dir) {
  if (world().rank() == 0) fs::create_directories(dir);
  testing::idle_barrier(world().group());
  ElasticLaunch l;
  l.active = true;
  l.run_dir = dir;
  return l;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `t` while rank 0 raises etr-run's resize request (SIGUSR1) `after` into the run,
// at a moment no rank chooses.
auto run_with_a_request_after(Trainer& t, std::chrono::milliseconds after) {
  std::thread requester;
  if (world().rank() == 0) {
    requester = std::thread([after] {
      std::this_thread::sleep_for(after);
      std::raise(SIGUSR1);
    });
  }
  const auto s = t.run();
  if (requester.joinable()) requester.join();
  return s;
}

TEST(ElasticResize, RequestBeforeTrainingIsNotLostAndResumingContinuesExactly) {
  install_resize_signal_handler();
  clear_resize_request();
  SharedTempDir tmp(world().group(), "elastic_resize");
  const std::string ck = (tmp.path() / "ck").string();
  ElasticReporter reporter(launch_in(tmp.path() / "run"));
  // The request comes while the trainer is being built and restored: before any step.
  if (world().rank() == 0) std::raise(SIGUSR1);
  {
    Trainer t(tiny_config({"checkpoint.dir=" + ck, "checkpoint.every=0"}), world().group(), test_log(),
              &reporter);
    const auto s = t.run();
    EXPECT_TRUE(s.resized);
    EXPECT_EQ(t.position().step, 1u);
    EXPECT_EQ(s.steps, 1);
    EXPECT_FALSE(resize_requested());
  }
  ASSERT_TRUE(fs::exists(fs::path(ck) / step_dir_name(1) / "manifest.pb"));
  if (world().rank() == 0) {
    EXPECT_NE(read_text(tmp.path() / "run" / "events").find("resize-exit step=1 saved=1"), std::string::npos);
    EXPECT_EQ(std::stoll(read_text(tmp.path() / "run" / "progress")), 1);
  }
  // Relaunched (no resize now): resumes at step 1 and ends where the uninterrupted run ends.
  testing::TrainState resumed, straight;
  {
    Trainer t(tiny_config({"checkpoint.dir=" + ck, "checkpoint.every=0", "checkpoint.resume=latest"}),
              world().group(), test_log());
    ASSERT_TRUE(t.resumed_from().has_value());
    const auto s = t.run();
    EXPECT_FALSE(s.resized);
    EXPECT_EQ(s.start_step, 1);
    resumed = snapshot(t);
  }
  {
    Trainer t(tiny_config({}), world().group(), test_log());
    t.run();
    straight = snapshot(t);
  }
  EXPECT_TRUE(testing::bitwise_equal(resumed.params, straight.params));
  EXPECT_TRUE(testing::bitwise_equal(resumed.m, straight.m));
  EXPECT_TRUE(testing::bitwise_equal(resumed.v, straight.v));
  EXPECT_EQ(resumed.position.samples_seen, straight.position.samples_seen);
}

TEST(ElasticResize, RequestDuringAsyncSavesStopsEveryRankAtOneStepWithItsCheckpoint) {
  install_resize_signal_handler();
  clear_resize_request();
  SharedTempDir tmp(world().group(), "elastic_resize_async");
  const std::string ck = (tmp.path() / "ck").string();
  ElasticReporter reporter(launch_in(tmp.path() / "run"));
  // Saves every step (async: most steps end with a background save in flight); the
  // request lands at a moment no rank chooses.
  Trainer t(tiny_config({"checkpoint.dir=" + ck, "checkpoint.every=1", "checkpoint.async=true",
                         "checkpoint.keep=2", "schedule.max_steps=100000"}),
            world().group(), test_log(), &reporter);
  const auto s = run_with_a_request_after(t, std::chrono::milliseconds(150));
  ASSERT_TRUE(s.resized);
  const uint64_t step = t.position().step;
  EXPECT_GT(step, 0u);
  EXPECT_LT(step, 100000u);
  const auto steps = all_gather(world().group(), step);
  for (uint64_t other : steps) EXPECT_EQ(other, step);
  const fs::path newest = fs::path(ck) / step_dir_name(step);
  ASSERT_TRUE(fs::exists(newest / "manifest.pb")) << newest;
  EXPECT_FALSE(fs::exists(fs::path(ck) / step_dir_name(step + 1)));
  const auto m = read_manifest(newest);
  EXPECT_EQ(m.step(), step);
  EXPECT_EQ(m.data().samples_seen(), t.position().samples_seen);
  clear_resize_request();
}

// A resize saves its step to disk even when the memory tier holds it: the job does not know
// which hosts the next launch keeps, and a shrink that takes away a shard's host and its
// buddy's would leave the memory tier without that step. The relaunch still reads the
// memory tier first.
TEST(ElasticResize, AResizeSavesItsStepToDiskBesideTheMemoryTier) {
  install_resize_signal_handler();
  clear_resize_request();
  SharedTempDir tmp(world().group(), "elastic_resize_memory");
  const std::string ck = (tmp.path() / "ck").string(), mem = (tmp.path() / "mem").string();
  const std::vector<std::string> settings = {
      "checkpoint.dir=" + ck, "checkpoint.every=1000", "checkpoint.memory_every=1",
      "checkpoint.memory_dir=" + mem, "schedule.max_steps=100000"};
  uint64_t step = 0;
  {
    ElasticReporter reporter(launch_in(tmp.path() / "run"));
    Trainer t(tiny_config(settings), world().group(), test_log(), &reporter);
    const auto s = run_with_a_request_after(t, std::chrono::milliseconds(150));
    ASSERT_TRUE(s.resized);
    step = t.position().step;
  }
  ASSERT_GT(step, 0u);
  EXPECT_TRUE(fs::exists(fs::path(mem) / step_dir_name(step) / "manifest.pb"));
  EXPECT_TRUE(fs::exists(fs::path(ck) / step_dir_name(step) / "manifest.pb"));
  if (world().rank() == 0) {
    const std::string exit = "resize-exit step=" + std::to_string(step) + " saved=1";
    EXPECT_NE(read_text(tmp.path() / "run" / "events").find(exit), std::string::npos);
  }
  // The relaunch (etr-run's restart 1, --resume latest) takes the step from memory.
  ElasticLaunch relaunch = launch_in(tmp.path() / "run2");
  relaunch.restart = 1;
  ElasticReporter reporter(relaunch);
  std::vector<std::string> resume = settings;
  resume.push_back("checkpoint.resume=latest");
  Trainer t(tiny_config(resume), world().group(), test_log(), &reporter);
  ASSERT_TRUE(t.resumed_from().has_value());
  EXPECT_EQ(*t.resumed_from(), fs::path(mem) / step_dir_name(step));
  EXPECT_EQ(t.position().step, step);
  clear_resize_request();
}

}  // namespace
}  // namespace etr
