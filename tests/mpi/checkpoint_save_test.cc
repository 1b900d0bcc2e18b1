// Saving checkpoints from etr-train's Trainer (checkpoint/checkpoint_writer.h), at np 1-4:
//   - async and sync saves of the same run write byte-identical shard files and equal
//     manifests (but for the time of writing and the checkpoint settings themselves)
//   - an async save holds the states it was given only until wait_for_snapshot():
//     changing them right after that leaves the checkpoint as it was at save(), with the
//     writer on the rank's cores and on the node's spare ones
//   - retention: keep = 2 leaves exactly the newest two complete checkpoints; the fast
//     tier takes the steps in between (fast_every) and keeps its own fast_keep
//   - a stale ".step-N.partial" directory (a crashed save) is never chosen to resume
//     from, even when it is newer and complete inside, and the next save removes it;
//     an unfinished step-N/ older than the newest checkpoint is pruned
//   - a wait for a late rank in the save's agreements is not charged to the save
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/manifest.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"

namespace etr::testing {
namespace {
namespace fs = std::filesystem;
using train::Trainer;

// Trains config `c` from its start to schedule.max_steps with Trainer::run() (which
// saves when due and flushes at the end); every save must have succeeded.
void run_to_end(const TrainConfig& c) {
  Trainer t(c, world().group(), test_log());
  t.run();
  ASSERT_NE(t.checkpoint_writer(), nullptr);
  for (const SaveStats& s : t.checkpoint_writer()->stats()) {
    EXPECT_TRUE(s.ok) << "step " << s.step << " (" << s.tier << "): " << s.error;
  }
}

// The manifest of `dir` without what differs between two runs by construction: the
// time of writing and the checkpoint settings (directory, async).
ckpt::Manifest comparable_manifest(const fs::path& dir) {
  ckpt::Manifest m = read_manifest(dir);
  m.clear_created_unix_ms();
  m.mutable_config()->mutable_checkpoint()->clear_dir();
  m.mutable_config()->mutable_checkpoint()->clear_async();
  m.mutable_config()->mutable_checkpoint()->clear_writer_cpus();
  return m;
}

// Six tensors of odd sizes, 12M elements in all (48 MB a state), so that the writer
// thread's copy takes a while.
ParamLayout large_layout() {
  ParamLayout layout;
  for (int i = 0; i < 6; ++i) {
    std::string name = "t";
    name += std::to_string(i);
    layout.add(name, Shape{2'000'003 - 7 * i}, i, false);
  }
  return layout;
}

// The largest |x - y| over the layout's tensors (padding between them is not saved).
double max_tensor_diff(const ParamLayout& layout, const std::vector<float>& x,
                       const std::vector<float>& y) {
  double worst = 0;
  for (const TensorEntry& e : layout.entries()) {
    for (int64_t i = e.offset; i < e.offset + e.numel(); ++i) {
      const auto k = static_cast<size_t>(i);
      worst = std::max(worst, static_cast<double>(std::abs(x[k] - y[k])));
    }
  }
  return worst;
}

class AsyncSnapshot : public ::testing::TestWithParam<bool> {};  // spare_cpus

TEST_P(AsyncSnapshot, StatesMayChangeOnceWaitForSnapshotReturns) {
  SharedTempDir tmp(world().group(), "ckpt_snapshot");
  const ParamLayout layout = large_layout();
  const size_t n = static_cast<size_t>(layout.numel());
  std::vector<float> a(n), b(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1009) * 0.5f;
    b[i] = -1.0f - static_cast<float>(i % 997);
  }
  CheckpointWriter writer(world().group(), /*async=*/true, test_log(), GetParam());
  const CheckpointTier tier{tmp.path(), "durable", 0};
  for (uint64_t step : {1, 2}) {
    ckpt::Manifest meta;
    meta.set_step(step);
    meta.set_writer("checkpoint_save_test");
    const NamedState states[] = {{"param", a.data()}, {"adam.m", b.data()}};
    ASSERT_TRUE(writer.save(tier, meta, layout, states));
    writer.wait_for_snapshot();
    // What an optimizer update does right after the fence: both states change.
    std::swap(a, b);
    for (float& x : a) x += 1.0f;
    writer.flush();
    ASSERT_TRUE(writer.stats().back().ok) << writer.stats().back().error;
    EXPECT_GE(writer.stats().back().stall_seconds, 0.0);
  }
  // Step 1 saved (a0, b0) and step 2 saved (b0 + 1, a0): rebuild them independently.
  std::vector<float> a0(n), b0(n);
  for (size_t i = 0; i < n; ++i) {
    a0[i] = static_cast<float>(i % 1009) * 0.5f;
    b0[i] = -1.0f - static_cast<float>(i % 997);
  }
  std::vector<float> b1 = b0;
  for (float& x : b1) x += 1.0f;
  const std::vector<std::pair<uint64_t, std::pair<const std::vector<float>*, const std::vector<float>*>>>
      expected = {{1, {&a0, &b0}}, {2, {&b1, &a0}}};
  for (const auto& [step, want] : expected) {
    SCOPED_TRACE("step " + std::to_string(step));
    CheckpointReader reader(tmp.path() / step_dir_name(step));
    std::vector<float> param(n, 0.f), m(n, 0.f);
    reader.read_state("param", layout, param.data(), 0, static_cast<int64_t>(n));
    reader.read_state("adam.m", layout, m.data(), 0, static_cast<int64_t>(n));
    EXPECT_EQ(max_tensor_diff(layout, param, *want.first), 0.0);
    EXPECT_EQ(max_tensor_diff(layout, m, *want.second), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(WriterCpus, AsyncSnapshot, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "spare" : "rank"; });

// An async save of a small state that the world's last rank reaches `late` seconds after
// the others; `then` runs on every rank after save() returns (what training does before
// flush()). The save's stats and its training_cost().
struct LateSave {
  SaveStats stats;
  double charged = 0;
};
LateSave save_behind_a_late_rank(const char* name, double late,
                                 const std::function<void(CheckpointWriter&)>& then) {
  const int n = world().group().size();
  SharedTempDir tmp(world().group(), name);
  ParamLayout layout;
  layout.add("w", Shape{4096}, 0, false);
  std::vector<float> w(4096, 0.5f);
  CheckpointWriter writer(world().group(), /*async=*/true, test_log());
  const CheckpointTier tier{tmp.path(), "durable", 0};
  ckpt::Manifest meta;
  meta.set_step(1);
  meta.set_writer("checkpoint_save_test");
  const NamedState states[] = {{"param", w.data()}};
  MPI_Barrier(MPI_COMM_WORLD);
  if (world().group().rank() == n - 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>(late));
  }
  EXPECT_TRUE(writer.save(tier, meta, layout, states));
  then(writer);
  writer.flush();
  LateSave r{writer.stats().back(), 0};
  r.charged = writer.training_cost(r.stats);
  EXPECT_TRUE(r.stats.ok) << r.stats.error;
  EXPECT_LE(r.stats.peer_wait_seconds, r.stats.stall_seconds + r.stats.commit_seconds + 1e-9);
  EXPECT_GE(r.charged, 0.0);
  return r;
}

// A rank that reaches save() late (its step took longer) keeps the others' writer threads
// waiting in the save's first agreement, not their training: save() returns at once, and
// a wait for the commit (here flush()'s) is counted in SaveStats::peer_wait_seconds and
// left out of training_cost(): the ranks' step-to-step difference, not a cost of the save.
TEST(CheckpointSave, AWaitForALateRankIsNotChargedToTheSave) {
  if (world().group().size() < 2) GTEST_SKIP() << "needs a second rank to wait for";
  constexpr double kLate = 0.5;
  const LateSave r = save_behind_a_late_rank("ckpt_late", kLate, [](CheckpointWriter&) {});
  const SaveStats& s = r.stats;
  if (world().group().rank() == 0) {
    EXPECT_LT(s.stall_seconds, 0.2 * kLate);   // save() did not wait for the late rank
    EXPECT_GE(s.commit_seconds, 0.6 * kLate);  // flush() did, for the writer's commit
    EXPECT_GE(s.peer_wait_seconds, 0.6 * kLate);
    EXPECT_LE(r.charged, s.stall_seconds + s.commit_seconds - 0.6 * kLate);
  }
}

// The other side: a late rank keeps this rank's writer waiting while this rank's training
// goes on (here a sleep); that wait overlapped none of training's own, so nothing of the
// save's cost is taken off as a wait for peers.
TEST(CheckpointSave, AWriterWaitingWhileTrainingRunsIsNoPeerWaitOfTheCaller) {
  if (world().group().size() < 2) GTEST_SKIP() << "needs a second rank to wait for";
  constexpr double kLate = 0.3;
  const LateSave r = save_behind_a_late_rank("ckpt_overlap", kLate, [&](CheckpointWriter& w) {
    // "Training" long enough for every writer to be done before the snapshot wait and flush.
    std::this_thread::sleep_for(std::chrono::duration<double>(3 * kLate));
    w.wait_for_snapshot();
  });
  if (world().group().rank() == 0) {
    EXPECT_LT(r.stats.stall_seconds + r.stats.commit_seconds, 0.2 * kLate);
    EXPECT_LT(r.stats.peer_wait_seconds, 0.1 * kLate);  // overlapped no wait of the caller
  }
}

// And a caller that needs the snapshot at once (its next update comes before a late rank
// reaches save()) waits behind the writer's agreement with that rank: a wait for the
// peer, counted in peer_wait_seconds and left out of training_cost().
TEST(CheckpointSave, ASnapshotWaitBehindALateRankIsAPeerWait) {
  if (world().group().size() < 2) GTEST_SKIP() << "needs a second rank to wait for";
  constexpr double kLate = 0.5;
  const LateSave r = save_behind_a_late_rank("ckpt_snapwait", kLate,
                                             [](CheckpointWriter& w) { w.wait_for_snapshot(); });
  const SaveStats& s = r.stats;
  if (world().group().rank() == 0) {
    EXPECT_GE(s.stall_seconds, 0.6 * kLate);  // the snapshot waited for the late rank
    EXPECT_GE(s.peer_wait_seconds, 0.6 * kLate);
    EXPECT_LE(r.charged, s.stall_seconds + s.commit_seconds - 0.6 * kLate);
  }
}

// The caller's time producing the states (a ZeRO rank's exchange of its shards, before
// save()) is charged to the save: in stall_seconds, so in the log's "step stall" and in
// training_cost(), which the memory tier's bounded cadence reads; async and sync alike.
TEST(CheckpointSave, TheTimeStagingTheStatesIsChargedToTheSave) {
  constexpr double kStaged = 0.25;
  for (const bool async : {true, false}) {
    SharedTempDir tmp(world().group(), async ? "ckpt_staged_async" : "ckpt_staged_sync");
    ParamLayout layout;
    layout.add("w", Shape{4096}, 0, false);
    std::vector<float> w(4096, 0.5f);
    CheckpointWriter writer(world().group(), async, test_log());
    ckpt::Manifest meta;
    meta.set_step(1);
    meta.set_writer("checkpoint_save_test");
    const NamedState states[] = {{"param", w.data()}};
    const CheckpointTier tier{tmp.path(), "durable", 0};
    EXPECT_TRUE(writer.save(tier, meta, layout, states, kStaged));
    writer.flush();
    const SaveStats& st = writer.stats().back();
    EXPECT_TRUE(st.ok) << st.error;
    EXPECT_GE(st.stall_seconds, kStaged) << (async ? "async" : "sync");
    EXPECT_GE(writer.training_cost(st), kStaged - st.peer_wait_seconds)
        << (async ? "async" : "sync");
    EXPECT_LT(st.stall_seconds, kStaged + 5.0);  // the staging once, not more
  }
}

TEST(CheckpointSave, AsyncAndSyncWriteIdenticalCheckpoints) {
  SharedTempDir tmp(world().group(), "ckpt_async");
  const fs::path async_dir = tmp.path() / "async", sync_dir = tmp.path() / "sync";
  // Saves at steps 2 and 4 (the last); both kept.
  const std::vector<std::string> common = {"schedule.max_steps=4", "checkpoint.every=2",
                                           "checkpoint.keep=0"};
  auto with = [&](const fs::path& dir, bool async) {
    auto o = common;
    o.push_back("checkpoint.dir=" + dir.string());
    o.push_back(std::string("checkpoint.async=") + (async ? "true" : "false"));
    return tiny_config(o);
  };
  run_to_end(with(async_dir, true));
  run_to_end(with(sync_dir, false));
  if (world().rank() != 0) return;
  for (uint64_t step : {2, 4}) {
    SCOPED_TRACE("step " + std::to_string(step));
    const fs::path a = async_dir / step_dir_name(step), s = sync_dir / step_dir_name(step);
    ASSERT_EQ(names_in(a), names_in(s));
    int shards = 0;
    for (const fs::path& f : files_in(a)) {
      if (f.filename() == ckpt_format::kManifestName) continue;
      ++shards;
      EXPECT_TRUE(read_bytes(f) == read_bytes(s / f.filename()))
          << f.filename() << " differs between the async and the sync save";
    }
    EXPECT_EQ(shards, world().size());
    const ckpt::Manifest ma = comparable_manifest(a), ms = comparable_manifest(s);
    EXPECT_EQ(ma.SerializeAsString(), ms.SerializeAsString());
    std::string diff;
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(ma, ms)) << diff;
    EXPECT_EQ(ma.step(), step);
  }
}

// The steps of a tier's complete checkpoints (step-*/ with a manifest.pb).
std::vector<uint64_t> complete_steps(const fs::path& root) {
  std::vector<uint64_t> out;
  for (const CheckpointEntry& e : list_checkpoints(root)) {
    if (e.has_manifest) out.push_back(e.step);
  }
  return out;
}

std::vector<std::string> step_names(std::initializer_list<uint64_t> steps) {
  std::vector<std::string> out;
  for (uint64_t s : steps) out.push_back(step_dir_name(s));
  return out;
}

class Retention : public ::testing::TestWithParam<bool> {};  // async

TEST_P(Retention, KeepsTheNewestAndFastTierTakesTheStepsBetween) {
  const bool async = GetParam();
  SharedTempDir tmp(world().group(), "ckpt_retention");
  const fs::path durable = tmp.path() / "durable", fast = tmp.path() / "fast";
  std::vector<std::string> o = {"schedule.max_steps=6",
                                "checkpoint.dir=" + durable.string(),
                                "checkpoint.every=2",
                                "checkpoint.keep=2",
                                "checkpoint.fast_dir=" + fast.string(),
                                "checkpoint.fast_every=1",
                                "checkpoint.fast_keep=2",
                                std::string("checkpoint.async=") + (async ? "true" : "false")};
  // Leftovers of a crashed job: saves in flight, an unfinished checkpoint directory.
  if (world().rank() == 0) {
    fs::create_directories(durable / ".step-000000001.partial");
    write_bytes(durable / ".step-000000001.partial" / "shard-00000-of-00001.bin", "junk");
    fs::create_directories(durable / step_dir_name(1));
    fs::create_directories(fast / ".step-000000002.partial");
  }
  idle_barrier(world().group());
  run_to_end(tiny_config(o));
  if (world().rank() == 0) {
    // Durable: steps 2, 4, 6 saved, the newest two kept. Fast: 1, 3, 5 (a step due for
    // both tiers goes to the durable one only), the newest two kept.
    EXPECT_EQ(names_in(durable), step_names({4, 6}));
    EXPECT_EQ(names_in(fast), step_names({3, 5}));
    EXPECT_EQ(complete_steps(durable), (std::vector<uint64_t>{4, 6}));
    EXPECT_EQ(complete_steps(fast), (std::vector<uint64_t>{3, 5}));
    EXPECT_EQ(read_manifest(fast / step_dir_name(5)).tier(), "fast");
    EXPECT_EQ(read_manifest(durable / step_dir_name(6)).tier(), "durable");
    // A crashed save of step 9 that got as far as its manifest: newer than anything and
    // complete inside, but not a checkpoint until renamed.
    fs::copy(durable / step_dir_name(6), durable / ".step-000000009.partial",
             fs::copy_options::recursive);
  }
  idle_barrier(world().group());
  const fs::path roots[] = {durable, fast};
  for (const fs::path& p : resume_candidates(roots)) {
    EXPECT_EQ(p.filename().string().find("partial"), std::string::npos) << p;
  }
  CapturedLog log;
  EXPECT_EQ(find_resumable(roots, world().group(), log.log()).value_or("nothing"),
            durable / step_dir_name(6));
  // Resume at 6 and save step 7: the stale partial directory goes, keep = 2 holds.
  o.push_back("schedule.max_steps=7");
  o.push_back("checkpoint.resume=latest");
  {
    Trainer t(tiny_config(o), world().group(), test_log());
    EXPECT_EQ(t.resumed_from().value_or("nothing"), durable / step_dir_name(6));
    t.run();
  }
  if (world().rank() == 0) {
    EXPECT_EQ(names_in(durable), step_names({6, 7}));
    EXPECT_EQ(names_in(fast), step_names({3, 5}));
  }
  idle_barrier(world().group());
}

INSTANTIATE_TEST_SUITE_P(Writer, Retention, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Async" : "Sync"; });

}  // namespace
}  // namespace etr::testing
