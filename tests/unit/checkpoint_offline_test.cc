// Tests of checkpoint/offline.h (what etr-ckpt builds on) and of the packed shard plan it
// writes through: a layout from a manifest, whole checkpoints written by one process for
// world sizes 1..7 and read back by CheckpointReader, a reshard through the reader that
// gives the same bytes as writing from memory, durable copies that check every file, and
// the plan's extents covering every tensor and every file byte exactly once (the sense
// checks of a manifest are unit/manifest_sense_test.cc's). Tensor sizes are odd (primes,
// 1, 0) so that ranges split tensors at every possible place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.h"
#include "checkpoint/offline.h"
#include "checkpoint/shard_plan.h"
#include "runtime/error.h"
#include "unit/odd_layout.h"

namespace etr {
namespace {

namespace fs = std::filesystem;
using testing::kStates;
using testing::meta;
using testing::odd_layout;

// Flat buffers of `layout`, one per state, with distinct values; padding holds NaN.
std::vector<std::vector<float>> random_states(const ParamLayout& layout, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> out;
  for (size_t s = 0; s < kStates.size(); ++s) {
    std::vector<float> v(static_cast<size_t>(layout.numel()), std::nanf(""));
    for (const TensorEntry& e : layout.entries()) {
      for (int64_t i = 0; i < e.numel(); ++i) v[static_cast<size_t>(e.offset + i)] = u(rng);
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<NamedState> named(const std::vector<std::vector<float>>& states) {
  std::vector<NamedState> out;
  for (size_t s = 0; s < states.size(); ++s) out.push_back({kStates[s], states[s].data()});
  return out;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every tensor element of every state read back equals the original.
void expect_reads_back(const fs::path& dir, const ParamLayout& layout,
                       const std::vector<std::vector<float>>& states) {
  CheckpointReader reader(dir);
  for (size_t s = 0; s < kStates.size(); ++s) {
    std::vector<float> back(static_cast<size_t>(layout.numel()), 0.f);
    reader.read_state(kStates[s], layout, back.data(), 0, layout.numel());
    for (const TensorEntry& e : layout.entries()) {
      for (int64_t i = 0; i < e.numel(); ++i) {
        const size_t at = static_cast<size_t>(e.offset + i);
        ASSERT_EQ(back[at], states[s][at]) << kStates[s] << " " << e.name << "[" << i << "]";
      }
    }
  }
}

class CheckpointOffline : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "etr-ckpt-offline-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointOffline, LayoutFromManifestHasTheSavedTensorsInOrder) {
  const ParamLayout layout = odd_layout();
  ckpt::Manifest m = meta(4, 2);
  ShardPlan(layout, 2, kStates).describe(m);
  const ParamLayout back = layout_from_manifest(m);
  ASSERT_EQ(back.entries().size(), layout.entries().size());
  for (size_t i = 0; i < layout.entries().size(); ++i) {
    EXPECT_EQ(back.at(i).name, layout.at(i).name);
    EXPECT_EQ(back.at(i).shape, layout.at(i).shape) << layout.at(i).name;
    EXPECT_EQ(back.at(i).offset, layout.at(i).offset) << layout.at(i).name;
    EXPECT_EQ(back.at(i).layer, 0);
    EXPECT_FALSE(back.at(i).weight_decay);
  }
  EXPECT_EQ(back.numel(), layout.numel());

  // Without a "param" state the first state's records are taken.
  ckpt::Manifest moments = meta(4, 1);
  ShardPlan(layout, 1, {"adam.m", "adam.v"}).describe(moments);
  EXPECT_EQ(layout_from_manifest(moments).entries().size(), layout.entries().size());

  EXPECT_THROW(layout_from_manifest(meta(4, 1)), CheckpointError);  // no tensors
  m.mutable_tensors(0)->set_dtype("bf16");
  EXPECT_THROW(layout_from_manifest(m), CheckpointError);
}

TEST_F(CheckpointOffline, WrittenCheckpointReadsBackAtEveryWorldSize) {
  const ParamLayout layout = odd_layout();
  const auto states = random_states(layout, 1);
  const auto refs = named(states);
  for (int world = 1; world <= 7; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    const fs::path root = dir_ / ("w" + std::to_string(world));
    const fs::path out = write_checkpoint(root, meta(6, world), layout, refs, world);
    EXPECT_EQ(out, root / step_dir_name(6));
    const ckpt::Manifest m = read_manifest(out);
    EXPECT_EQ(m.files_size(), world);
    EXPECT_EQ(m.layout().world_size(), world);
    EXPECT_EQ(m.writer(), "checkpoint_offline_test");
    EXPECT_EQ(std::vector<std::string>(m.states().begin(), m.states().end()), kStates);
    EXPECT_EQ(verify_files(out, m), "");
    EXPECT_EQ(shard_bytes(m), 272u * sizeof(float) * kStates.size());
    expect_reads_back(out, layout, states);
    // Complete or invisible: nothing but the checkpoint is left in the root.
    EXPECT_EQ(std::distance(fs::directory_iterator(root), fs::directory_iterator()), 1);
  }
}

TEST_F(CheckpointOffline, ReshardThroughTheReaderGivesTheBytesOfAWriteFromMemory) {
  const ParamLayout layout = odd_layout();
  const auto states = random_states(layout, 2);
  const fs::path two = write_checkpoint(dir_ / "two", meta(8, 2), layout, named(states), 2);
  const fs::path direct = write_checkpoint(dir_ / "direct", meta(8, 3), layout, named(states), 3);

  const ckpt::Manifest src = read_manifest(two);
  const ParamLayout from_manifest = layout_from_manifest(src);
  CheckpointReader reader(two);
  const ShardPlan plan(from_manifest, 3, kStates);
  int64_t asked = 0;
  const fs::path resharded =
      write_checkpoint(dir_ / "three", meta(8, 3), from_manifest, kStates, 3,
                       [&](const std::string& state, float* flat, int64_t begin, int64_t end) {
                         asked += end - begin;
                         reader.read_state(state, from_manifest, flat, begin, end);
                       });
  // Each state's flat buffer was asked for once, padding between tensors aside.
  EXPECT_GE(asked, 272 * 3);
  EXPECT_LE(asked, from_manifest.numel() * 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(read_all(resharded / plan.file_name(r)), read_all(direct / plan.file_name(r)))
        << plan.file_name(r);
  }
  expect_reads_back(resharded, layout, states);
}

TEST_F(CheckpointOffline, RefusesAnExistingStepAndLeavesNothingOnFailure) {
  const ParamLayout layout = odd_layout();
  const auto states = random_states(layout, 3);
  write_checkpoint(dir_, meta(2, 1), layout, named(states), 1);
  EXPECT_THROW(write_checkpoint(dir_, meta(2, 2), layout, named(states), 2), CheckpointError);
  EXPECT_EQ(read_manifest(dir_ / step_dir_name(2)).files_size(), 1);  // untouched

  const auto failing = [](const std::string&, float*, int64_t, int64_t) {
    throw IoError("the source went away");
  };
  EXPECT_THROW(write_checkpoint(dir_, meta(4, 2), layout, kStates, 2, failing), IoError);
  EXPECT_THROW(write_checkpoint(dir_ / "new", meta(4, 2), layout, kStates, 2, failing), IoError);
  EXPECT_FALSE(fs::exists(dir_ / "new"));  // the root it made, removed again
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
  EXPECT_EQ(names, std::vector<std::string>{step_dir_name(2)});
}

TEST_F(CheckpointOffline, CopyIsIdenticalAndChecksEveryFile) {
  const ParamLayout layout = odd_layout();
  const auto states = random_states(layout, 4);
  const fs::path src = write_checkpoint(dir_ / "src", meta(10, 3), layout, named(states), 3);
  const fs::path copy = copy_checkpoint(src, dir_ / "dst");
  EXPECT_EQ(copy, dir_ / "dst" / step_dir_name(10));
  for (const auto& e : fs::directory_iterator(src)) {
    EXPECT_EQ(read_all(e.path()), read_all(copy / e.path().filename())) << e.path();
  }
  EXPECT_THROW(copy_checkpoint(src, dir_ / "dst"), CheckpointError);  // exists

  // A flipped bit in the middle shard: the copy fails naming it and leaves nothing.
  const fs::path bad = src / "shard-00001-of-00003.bin";
  std::string bytes = read_all(bad);
  bytes[bytes.size() / 2] ^= 0x10;
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes;
  try {
    copy_checkpoint(src, dir_ / "other");
    ADD_FAILURE() << "copied a corrupt checkpoint";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00001-of-00003.bin fails its checksum"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ / "other"));
}

// Extents cover every tensor exactly once (in tensor order), every byte of every shard
// file exactly once, and each rank's flat_range spans exactly the pieces it packs.
TEST(ShardPlanCoverage, EveryTensorAndEveryFileByteOnceForWorlds1To5) {
  ParamLayout tiny;  // fewer elements than ranks: some files are empty
  tiny.add("x", Shape{3}, 0, false);
  const std::vector<ParamLayout> layouts = {odd_layout(), tiny};
  for (const ParamLayout& l : layouts) {
    const ParamLayout* layout = &l;
    for (int world = 1; world <= 5; ++world) {
      SCOPED_TRACE("world " + std::to_string(world) + ", " + std::to_string(layout->param_count()) +
                   " elements");
      const ShardPlan plan(*layout, world, kStates);
      ckpt::Manifest m;
      plan.describe(m);
      std::vector<std::vector<int>> covered(static_cast<size_t>(world));
      for (int r = 0; r < world; ++r) covered[static_cast<size_t>(r)].resize(plan.file_bytes(r));
      ASSERT_EQ(m.tensors_size(), static_cast<int>(layout->entries().size() * kStates.size()));
      for (const auto& t : m.tensors()) {
        const TensorEntry* e = layout->find(t.name());
        ASSERT_NE(e, nullptr) << t.name();
        uint64_t next = 0;
        for_each_extent(t, [&](const ExtentRef& x) {  // the runs' extents; files(r) is rank r's
          EXPECT_EQ(x.tensor_begin, next) << t.name();
          EXPECT_GT(x.count, 0u) << t.name();
          next += x.count;
          ASSERT_TRUE(x.file >= 0 && x.file < world) << x.file;
          auto& bytes = covered[static_cast<size_t>(x.file)];
          ASSERT_LE(x.file_offset + x.count * 4, bytes.size()) << t.name();
          for (uint64_t b = 0; b < x.count * 4; ++b) ++bytes[x.file_offset + b];
        });
        EXPECT_EQ(next, static_cast<uint64_t>(e->numel())) << t.name();
      }
      for (int r = 0; r < world; ++r) {
        for (size_t b = 0; b < covered[static_cast<size_t>(r)].size(); ++b) {
          ASSERT_EQ(covered[static_cast<size_t>(r)][b], 1) << plan.file_name(r) << " byte " << b;
        }
        // The pieces pack() takes lie inside flat_range, and reach both of its ends.
        const auto [lo, hi] = plan.flat_range(r);
        int64_t first = -1, last = -1;
        const std::vector<float> buf(static_cast<size_t>(layout->numel()));
        const float* base = buf.data();
        const std::vector<const float*> one(1, base);
        ShardPlan(*layout, world, {"s"}).pack(r, one, [&](const void* p, size_t size) {
          const int64_t at = static_cast<const float*>(p) - base;
          if (first < 0) first = at;
          last = at + static_cast<int64_t>(size / sizeof(float));
        });
        if (first < 0) {
          EXPECT_EQ(lo, hi);
        } else {
          EXPECT_EQ(lo, first);
          EXPECT_EQ(hi, last);
        }
      }
    }
  }
}

TEST_F(CheckpointOffline, MoveAsideNewerKeepsEverythingAndNeedsNoStep) {
  const ParamLayout layout = odd_layout();
  const auto states = random_states(layout, 5);
  for (uint64_t step : {2, 4, 6}) write_checkpoint(dir_, meta(step, 1), layout, named(states), 1);
  fs::create_directory(dir_ / step_dir_name(8));  // an unfinished save
  // Step 3 does not exist: roll_back refuses, move_aside_newer moves 4, 6 and 8.
  EXPECT_THROW(roll_back(dir_, 3), CheckpointError);
  const auto moved = move_aside_newer(dir_, 3);
  ASSERT_EQ(moved.size(), 3u);
  for (const fs::path& p : moved) EXPECT_TRUE(fs::is_directory(p)) << p;
  EXPECT_EQ(verify_files(moved[0], read_manifest(moved[0])), "");
  const auto left = list_checkpoints(dir_);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].step, 2u);
  EXPECT_TRUE(move_aside_newer(dir_, 2).empty());
}

}  // namespace
}  // namespace etr
