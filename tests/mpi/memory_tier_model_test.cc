// The memory model's share for the checkpoint memory tier (TrainSession::memory_tier_bytes,
// taken off the host budget; parallel/checkpoint_cadence.h) against what the tier holds
// after a run: checkpoint.memory_keep saves of this rank's file, each of the size the
// model gave one save. The files follow the engine's owners (checkpoint_owners()), which
// for ZeRO are the rank's blocks and for a pipeline its stage's chunks, so the even split of
// the whole model would be far off (a cut of 1 and 7 layers gives one stage most of it).
// Every owner range is covered by the states the engine hands the writer (states()'s
// pieces, or whole buffers). One host here, so no buddy copies: what those add, per host
// layout, is tests/unit/memory_tier_bytes_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "mpi/pipeline_test_config.h"

namespace etr {
namespace {

namespace fs = std::filesystem;
using testing::SharedTempDir;
using testing::test_log;
using testing::tiny_config;
using testing::world;
using train::Trainer;

constexpr int kKeep = 2;

std::vector<std::string> tier_settings(const fs::path& mem, std::vector<std::string> more) {
  more.push_back("checkpoint.memory_every=1");
  more.push_back("checkpoint.memory_keep=" + std::to_string(kKeep));
  more.push_back("checkpoint.memory_dir=" + mem.string());
  more.push_back("schedule.max_steps=4");
  return more;
}

// Every range of `owned` lies inside the pieces of `s` (or `s` is a whole buffer).
void expect_covered(const NamedState& s, const std::vector<std::pair<int64_t, int64_t>>& owned) {
  if (s.data) return;
  std::vector<std::pair<int64_t, int64_t>> held;  // the pieces, adjacent ones joined
  for (const StatePiece& p : s.pieces) {
    if (!held.empty() && held.back().second == p.begin) {
      held.back().second = p.end;
    } else {
      held.emplace_back(p.begin, p.end);
    }
  }
  for (const auto& [lo, hi] : owned) {
    const bool inside = std::any_of(held.begin(), held.end(),
                                    [&](const auto& h) { return h.first <= lo && hi <= h.second; });
    EXPECT_TRUE(inside) << s.name << ": [" << lo << ", " << hi << ") is not all held";
  }
}

struct SaveBytes {
  uint64_t mine = 0;   // this rank's file, one save
  uint64_t model = 0;  // each saved state's elements once, as f32
};

// Runs `c` with the memory tier and checks its files against the model's bytes.
SaveBytes expect_model_holds(const TrainConfig& c, const fs::path& mem) {
  Trainer t(c, world().group(), test_log());
  const uint64_t predicted = t.session().memory_tier_bytes();
  EXPECT_GT(predicted, 0u);
  EXPECT_EQ(predicted % (kKeep + 1), 0u);
  const std::shared_ptr<const ShardOwners> owners = t.session().engine().checkpoint_owners();
  t.run();
  t.flush_checkpoints();
  // Rank 0, the directory's leader, prunes the older saves; the others look after it has.
  testing::idle_barrier(world().group());
  if (owners) {
    EXPECT_EQ(owners->size(), static_cast<size_t>(world().size()));
    for (const NamedState& s : t.session().engine().states()) {
      EXPECT_EQ(s.owners, owners);  // the object the model sized the files by
      expect_covered(s, owners->at(static_cast<size_t>(world().rank())));
    }
  }
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.bin", world().rank(), world().size());
  int saves = 0;
  for (const auto& e : fs::directory_iterator(mem)) {
    if (!fs::exists(e.path() / "manifest.pb")) continue;
    ++saves;
    EXPECT_EQ(fs::file_size(e.path() / name), predicted / (kKeep + 1)) << e.path();
  }
  EXPECT_EQ(saves, kKeep);
  testing::idle_barrier(world().group());
  const auto numel = static_cast<uint64_t>(t.session().host_stack().layout().numel());
  return {predicted / (kKeep + 1), 3 * sizeof(float) * numel};
}

uint64_t sum_over_ranks(uint64_t mine) {
  uint64_t all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, world().group().comm());
  return all;
}

TEST(MemoryTierModel, DataParallelFilesAreTheEvenSplit) {
  SharedTempDir tmp(world().group(), "tier_model_dp");
  const TrainConfig c = tiny_config(tier_settings(tmp.path() / "mem", {}));
  const SaveBytes b = expect_model_holds(c, tmp.path() / "mem");
  EXPECT_EQ(sum_over_ranks(b.mine), b.model);
}

TEST(MemoryTierModel, ZeroFilesAreEachRanksBlocks) {
  for (int stage : {1, 3}) {
    SCOPED_TRACE("zero stage " + std::to_string(stage));
    SharedTempDir tmp(world().group(), "tier_model_zero");
    const TrainConfig c = tiny_config(tier_settings(
        tmp.path() / "mem", {"parallel.zero_stage=" + std::to_string(stage),
                             "parallel.first_bucket_size=8KiB", "parallel.bucket_size=20KiB"}));
    const SaveBytes b = expect_model_holds(c, tmp.path() / "mem");
    EXPECT_EQ(sum_over_ranks(b.mine), b.model);
  }
}

// Interleaved: two chunks a rank, a tied parameter's copy borrowed by the chunk that uses
// it (saved by its owner only), at ZeRO 2 (each chunk's blocks in its stage's dp group at
// np 4).
TEST(MemoryTierModel, InterleavedPipelineFilesAreEachRanksChunks) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "pp 2 needs an even world";
  SharedTempDir tmp(world().group(), "tier_model_interleaved");
  const TrainConfig c = train::testing_config::pipeline_config(tier_settings(
      tmp.path() / "mem", {"parallel.pp=2", "parallel.pp_schedule=interleaved", "parallel.zero_stage=2"}));
  const SaveBytes b = expect_model_holds(c, tmp.path() / "mem");
  EXPECT_EQ(sum_over_ranks(b.mine), b.model);
}

TEST(MemoryTierModel, PipelineFilesAreEachRanksStage) {
  if (world().size() % 2 != 0) GTEST_SKIP() << "pp 2 needs an even world";
  for (const std::string zero : {"0", "1"}) {
    SCOPED_TRACE("zero stage " + zero);
    SharedTempDir tmp(world().group(), "tier_model_pp");
    const TrainConfig c = train::testing_config::pipeline_config(tier_settings(
        tmp.path() / "mem", {"parallel.pp=2", "parallel.pp_partition=1,7", "parallel.zero_stage=" + zero}));
    const SaveBytes b = expect_model_holds(c, tmp.path() / "mem");
    EXPECT_EQ(sum_over_ranks(b.mine), b.model);
    // Stage 0 (1 layer: the embeddings) and stage 1 (7) hold different shares; the even
    // split of the world would give every rank the same.
    uint64_t first = b.mine;
    MPI_Bcast(&first, 1, MPI_UINT64_T, 0, world().group().comm());
    const uint64_t even = b.model / static_cast<uint64_t>(world().size());
    if (world().rank() == world().size() - 1) {
      EXPECT_NE(b.mine, first);
    }
    EXPECT_GT(std::max(b.mine, even) - std::min(b.mine, even), even / 10);
  }
}

}  // namespace
}  // namespace etr
