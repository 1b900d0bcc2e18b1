// read_with_peers (checkpoint/peer_read.h): a memory-tier restore where each rank's "host"
// holds only some of the shard files. Each rank has a directory of its own with the files
// f % size == rank (rank 3 of 4 holds none) and reads ranges of two states that start and
// end inside tensors, in padding and on shard-file edges, from its files and from their
// holders. The reference is CheckpointReader::read_state of the whole state from the
// complete checkpoint (bitwise: bytes are copied, not computed). Also: the bytes each rank
// reports received are those it lacked, and every byte received was sent; a holder whose
// file is shorter than the manifest says gives every rank one error naming it, and no
// rank waits for a message that is never sent.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/agreement.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "checkpoint/offline.h"
#include "checkpoint/peer_read.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "unit/ragged_layout.h"

namespace etr::testing {
namespace {

namespace fs = std::filesystem;
constexpr int kFiles = 3;

// The complete checkpoint, written by rank 0 for kFiles writers; its path on every rank.
fs::path write_complete(const fs::path& root, const ParamLayout& layout) {
  const Group& world = testing::world().group();
  if (world.rank() == 0) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> param(static_cast<size_t>(layout.numel()), 0.0f), m = param;
    for (float& x : param) x = u(rng);
    for (float& x : m) x = u(rng);
    ckpt::Manifest meta;
    meta.set_step(3);
    meta.mutable_data()->set_samples_seen(24);
    meta.mutable_layout()->set_world_size(kFiles);
    meta.mutable_layout()->set_dp_size(kFiles);
    meta.mutable_layout()->set_pp_size(1);
    meta.set_tier("memory");
    meta.set_writer("peer_read_test");
    const std::vector<NamedState> states = {{"param", param.data()}, {"adam.m", m.data()}};
    write_checkpoint(root / "complete", meta, layout, states, kFiles);
  }
  idle_barrier(world);
  return root / "complete" / step_dir_name(3);
}

// This rank's "host": a directory with the files f % size == rank of `complete`.
fs::path make_host(const fs::path& root, const fs::path& complete, const ckpt::Manifest& m) {
  const Group& world = testing::world().group();
  const fs::path host = root / ("host-" + std::to_string(world.rank()));
  fs::create_directories(host);
  for (int f = 0; f < m.files_size(); ++f) {
    if (f % world.size() == world.rank()) fs::copy_file(complete / m.files(f).name(), host / m.files(f).name());
  }
  return host;
}

PeerFiles sources(int files) {
  const Group& world = testing::world().group();
  PeerFiles p;
  for (int f = 0; f < files; ++f) {
    p.holder.push_back(f % world.size());
    p.here.push_back(f % world.size() == world.rank() ? 1 : 0);
  }
  return p;
}

TEST(PeerRead, EachRangeEqualsTheCompleteCheckpoints) {
  const Group& world = testing::world().group();
  SharedTempDir tmp(world, "peer-read");
  const ParamLayout layout = ragged_layout();
  const int64_t n = layout.numel();
  const fs::path complete = write_complete(tmp.path(), layout);
  const ckpt::Manifest manifest = read_manifest(complete);
  ASSERT_EQ(manifest.files_size(), kFiles);
  const fs::path host = make_host(tmp.path(), complete, manifest);
  const PeerFiles files = sources(kFiles);

  std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, n}, {0, 7}, {3, 20}, {7, 16}, {20, 100}, {81, 96}, {96, 97}, {50, 142}, {141, 142}};
  std::rotate(ranges.begin(), ranges.begin() + world.rank() % 4, ranges.end());  // ranks differ
  CheckpointReader reader(host, manifest);  // this host: no manifest, some files
  std::vector<std::vector<float>> dests;
  std::vector<ShardRead> reads;
  uint64_t lacking = 0;
  for (const char* state : {"param", "adam.m"}) {
    for (auto [b, e] : ranges) {
      dests.emplace_back(static_cast<size_t>(e - b), 0.0f);
      for (const ShardRead& r : reader.plan_range(state, layout, dests.back().data(), b, e)) {
        reads.push_back(r);
        if (!files.here[static_cast<size_t>(r.file)]) lacking += r.bytes;
      }
    }
  }
  PeerReadResult got;
  const std::string error = read_with_peers(reader, files, reads, world, got);
  ASSERT_EQ(error, "");
  EXPECT_EQ(got.received_bytes, lacking);
  EXPECT_EQ(got.local_bytes + got.received_bytes, [&] {
    uint64_t all = 0;
    for (const ShardRead& r : reads) all += r.bytes;
    return all;
  }());
  struct Moved {
    uint64_t sent, received;
  };
  uint64_t sent = 0, received = 0;
  for (const Moved& m : all_gather(world, Moved{got.sent_bytes, got.received_bytes})) {
    sent += m.sent;
    received += m.received;
  }
  EXPECT_EQ(sent, received) << "bytes sent and received over all ranks";
  if (world.size() > 1) {
    EXPECT_GT(received, 0u) << "some rank lacks a file";
  }

  CheckpointReader whole_reader(complete);
  size_t k = 0;
  for (const char* state : {"param", "adam.m"}) {
    std::vector<float> whole(static_cast<size_t>(n), 0.0f);
    whole_reader.read_state(state, layout, whole.data(), 0, n);
    for (auto [b, e] : ranges) {
      const std::vector<float>& got_range = dests[k++];
      for (int64_t i = b; i < e; ++i) {
        ASSERT_EQ(got_range[static_cast<size_t>(i - b)], whole[static_cast<size_t>(i)])
            << state << " range [" << b << ", " << e << "), element " << i << ", rank "
            << world.rank();
      }
    }
  }
}

TEST(PeerRead, AShortFileOnItsHolderIsOneErrorEverywhere) {
  const Group& world = testing::world().group();
  if (world.size() < 2) GTEST_SKIP() << "needs a rank that lacks the file";
  SharedTempDir tmp(world, "peer-read-short");
  const ParamLayout layout = ragged_layout();
  const fs::path complete = write_complete(tmp.path(), layout);
  const ckpt::Manifest manifest = read_manifest(complete);
  const fs::path host = make_host(tmp.path(), complete, manifest);
  const PeerFiles files = sources(kFiles);
  if (world.rank() == 1) fs::resize_file(host / manifest.files(1).name(), 8);  // its holder
  CheckpointReader reader(host, manifest);
  std::vector<float> dest(static_cast<size_t>(layout.numel()), 0.0f);
  const std::vector<ShardRead> reads = reader.plan_range("param", layout, dest.data(), 0, layout.numel());
  PeerReadResult got;
  const std::string error = first_error(world, read_with_peers(reader, files, reads, world, got));
  EXPECT_NE(error.find(manifest.files(1).name()), std::string::npos) << error;
  EXPECT_NE(error.find("too short"), std::string::npos) << error;
}

}  // namespace
}  // namespace etr::testing
