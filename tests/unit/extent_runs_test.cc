// The manifest's extents as runs (checkpoint/extent_runs.h): appended extents come back
// exactly, in order, from the runs; a range visits exactly the extents that overlap it
// (against a filter over the whole list); format version 1's records convert both ways
// without a change, and a checkpoint whose manifest is version 1 reads as the same one in
// version 2 does; and a ZeRO plan's manifest has a number of runs that does not grow with
// the world, where its extents grow with it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_plan.h"
#include "parallel/zero_plan.h"

namespace etr {
namespace {

std::vector<ExtentRef> all_of(const ckpt::TensorRecord& rec) {
  std::vector<ExtentRef> out;
  for_each_extent(rec, [&](const ExtentRef& x) { out.push_back(x); });
  return out;
}

// Extents one after another in a tensor, in stretches that follow a progression (the
// same count, file and offset steps: what ZeRO's blocks make) and stretches that do not.
std::vector<ExtentRef> random_extents(std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<ExtentRef> out;
  uint64_t at = 0;
  for (int stretch = 0; stretch < 12; ++stretch) {
    const uint64_t count = 1 + static_cast<uint64_t>(pick(rng));
    const int file0 = 40 + pick(rng), file_step = pick(rng) - 4;
    const int64_t offset_step = (pick(rng) - 3) * 4;
    const uint64_t offset0 = 400 + static_cast<uint64_t>(pick(rng)) * 8;
    const int n = pick(rng) < 3 ? 1 : pick(rng) + 1;
    for (int k = 0; k < n; ++k) {
      out.push_back({file0 + k * file_step, offset0 + static_cast<uint64_t>(k * offset_step), at,
                     pick(rng) < 1 ? count + 1 : count});  // now and then one breaks the run
      at += out.back().count;
    }
  }
  return out;
}

TEST(ExtentRuns, AppendedExtentsComeBackAsAppended) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<ExtentRef> in = random_extents(rng);
    ckpt::TensorRecord rec;
    for (const ExtentRef& x : in) append_extent(rec, x);
    EXPECT_EQ(all_of(rec), in) << "trial " << trial;
    EXPECT_EQ(extent_count(rec), in.size());
    EXPECT_LE(rec.runs_size(), static_cast<int>(in.size()));
  }
  // A progression is one run, however long.
  ckpt::TensorRecord rec;
  for (int k = 0; k < 1000; ++k) append_extent(rec, {k, 64, static_cast<uint64_t>(k) * 5, 5});
  EXPECT_EQ(rec.runs_size(), 1);
  EXPECT_EQ(extent_count(rec), 1000u);
}

TEST(ExtentRuns, ARangeVisitsExactlyTheExtentsThatOverlapIt) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<ExtentRef> in = random_extents(rng);
    ckpt::TensorRecord rec;
    for (const ExtentRef& x : in) append_extent(rec, x);
    const uint64_t total = in.back().tensor_begin + in.back().count;
    std::uniform_int_distribution<uint64_t> at(0, total);
    for (int q = 0; q < 100; ++q) {
      uint64_t lo = at(rng), hi = at(rng);
      if (lo > hi) std::swap(lo, hi);
      std::vector<ExtentRef> want;
      for (const ExtentRef& x : in) {
        if (x.tensor_begin < hi && x.tensor_begin + x.count > lo) want.push_back(x);
      }
      std::vector<ExtentRef> got;
      for_each_extent(rec, lo, hi, [&](const ExtentRef& x) { got.push_back(x); });
      EXPECT_EQ(got, want) << "[" << lo << ", " << hi << ") of " << total;
    }
  }
}

// A layout of `tensors` tensors: matrices and vectors of sizes that are multiples of 16
// (as GPT-2's are) or, `padded`, of odd sizes, which the layout pads to 16 elements.
ParamLayout block_layout(int tensors, bool padded = true) {
  ParamLayout l;
  for (int i = 0; i < tensors; ++i) {
    const int64_t rows = padded ? 97 + 31 * (i % 5) : 96 + 32 * (i % 5);
    const int64_t cols = i % 3 == 0 ? 1 : (padded ? 211 + 17 * (i % 4) : 208 + 16 * (i % 4));
    l.add("t" + std::to_string(i), Shape{rows, cols}, i, cols > 1);
  }
  return l;
}

ckpt::Manifest zero_manifest(const ParamLayout& layout, int world, const BucketOptions& opt) {
  const ZeroPlan plan(layout, world, opt);
  ShardOwners owners(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    for (const HeldRange& h : plan.norm_ranges(r)) owners[static_cast<size_t>(r)].push_back({h.begin, h.end});
  }
  const ShardPlan shards(layout, world, {"param", "adam.m", "adam.v"}, &owners);
  ckpt::Manifest m;
  shards.describe(m);
  for (int r = 0; r < world; ++r) {
    ckpt::ShardFile* f = m.add_files();
    f->set_name(shards.file_name(r));
    f->set_bytes(shards.file_bytes(r));
  }
  return m;
}

TEST(ExtentRuns, Version1RecordsConvertBothWaysUnchanged) {
  BucketOptions opt;
  opt.first_bucket_bytes = opt.bucket_cap_bytes = 64 << 10;
  const ckpt::Manifest m = zero_manifest(block_layout(20), 6, opt);
  ckpt::Manifest v1 = m;
  extents_from_runs(v1);
  size_t extents = 0;
  for (const auto& t : v1.tensors()) {
    EXPECT_EQ(t.runs_size(), 0);
    extents += static_cast<size_t>(t.extents_size());
  }
  EXPECT_GT(extents, static_cast<size_t>(m.tensors_size()) * 2);
  EXPECT_EQ(runs_from_extents(v1), "");
  EXPECT_EQ(v1.SerializeAsString(), m.SerializeAsString());

  extents_from_runs(v1);
  ckpt::TensorRecord* t = v1.mutable_tensors(4);  // t4 (param): 150 x 279, over 3 files
  ASSERT_GE(t->extents_size(), 2);
  t->mutable_extents(1)->set_file("shard-00009-of-00006.bin");
  EXPECT_EQ(runs_from_extents(v1),
            "tensor t4 (param) points into shard-00009-of-00006.bin, which the manifest does "
            "not list");
}

// A ZeRO checkpoint of world 5 (each rank's file packed from the blocks it owns), read
// back through its version 2 manifest and then through the same manifest rewritten as
// version 1 (a record per extent, as etr wrote until format version 2): both read
// manifests are the same, and every state reads back bitwise.
TEST(ExtentRuns, AVersion1CheckpointReadsAsItsVersion2Twin) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "etr-extent-runs-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
  const fs::path dir = tmpl;
  const ParamLayout layout = block_layout(9);
  BucketOptions opt;
  opt.first_bucket_bytes = opt.bucket_cap_bytes = 16 << 10;
  const int world = 5;
  const std::vector<std::string> names = {"param", "adam.m", "adam.v"};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> states(names.size());
  for (auto& v : states) {
    v.assign(static_cast<size_t>(layout.numel()), std::nanf(""));
    for (const TensorEntry& e : layout.entries()) {
      for (int64_t i = 0; i < e.numel(); ++i) v[static_cast<size_t>(e.offset + i)] = u(rng);
    }
  }
  const ZeroPlan zero(layout, world, opt);
  ShardOwners owners(world);
  for (int r = 0; r < world; ++r) {
    for (const HeldRange& h : zero.norm_ranges(r)) owners[static_cast<size_t>(r)].push_back({h.begin, h.end});
  }
  const ShardPlan plan(layout, world, names, &owners);
  ckpt::Manifest m;
  m.set_step(3);
  plan.describe(m);
  for (int r = 0; r < world; ++r) {
    std::ofstream out(dir / plan.file_name(r), std::ios::binary);
    Checksum sum;
    const float* bufs[] = {states[0].data(), states[1].data(), states[2].data()};
    plan.pack(r, bufs, [&](const void* p, size_t n) {
      out.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
      sum.update(p, n);
    });
    ckpt::ShardFile* f = m.add_files();
    f->set_name(plan.file_name(r));
    f->set_bytes(plan.file_bytes(r));
    f->set_xxh3(sum.digest());
  }
  const auto reads_back = [&] {
    CheckpointReader reader(dir);
    for (size_t s = 0; s < names.size(); ++s) {
      std::vector<float> back(static_cast<size_t>(layout.numel()), 0.f);
      reader.read_state(names[s], layout, back.data(), 0, layout.numel());
      for (const TensorEntry& e : layout.entries()) {
        for (int64_t i = 0; i < e.numel(); ++i) {
          const size_t at = static_cast<size_t>(e.offset + i);
          ASSERT_EQ(back[at], states[s][at]) << names[s] << " " << e.name << "[" << i << "]";
        }
      }
    }
  };
  write_manifest(dir, m);
  const ckpt::Manifest v2 = read_manifest(dir);
  EXPECT_EQ(verify_files(dir, v2), "");
  reads_back();

  ckpt::Manifest old = m;
  extents_from_runs(old);
  ckpt::ManifestFile envelope;
  envelope.set_format_version(1);
  old.SerializeToString(envelope.mutable_manifest());
  envelope.set_manifest_xxh3(Checksum::of(envelope.manifest().data(), envelope.manifest().size()));
  std::ofstream(dir / ckpt_format::kManifestName, std::ios::binary | std::ios::trunc)
      << envelope.SerializeAsString();
  const ckpt::Manifest v1 = read_manifest(dir);
  EXPECT_EQ(v1.SerializeAsString(), v2.SerializeAsString());
  reads_back();
  fs::remove_all(dir);
}

// Per (tensor, bucket) a ZeRO manifest has a run of the blocks at one offset and the
// partial blocks at either end. A rank's offsets move against the others' only where a
// block of its held a tensor's padding (packed files have none), so the runs are bounded
// by the layout, not the world: at most 4 per piece when no tensor is padded (GPT-2's
// sizes), 3 + the padded tensors per piece otherwise. The extents grow with the world.
TEST(ExtentRuns, AZeroManifestsRunsDoNotGrowWithTheWorld) {
  for (bool padded : {false, true}) {
    const ParamLayout layout = block_layout(24, padded);
    int64_t gaps = 0;
    for (const TensorEntry& e : layout.entries()) gaps += e.numel() % ParamLayout::kAlignElements != 0;
    EXPECT_EQ(gaps > 0, padded);
    BucketOptions opt;
    opt.first_bucket_bytes = opt.bucket_cap_bytes = 256 << 10;
    uint64_t extents_at_4 = 0;
    for (int world : {4, 16, 64, 256, 1024, 4096}) {
      SCOPED_TRACE("world " + std::to_string(world) + (padded ? ", padded tensors" : ""));
      const ckpt::Manifest m = zero_manifest(layout, world, opt);
      const ZeroPlan plan(layout, world, opt);
      uint64_t runs = 0, extents = 0, pieces = 0;  // pieces: (tensor, bucket) intersections
      for (const auto& t : m.tensors()) {
        runs += static_cast<uint64_t>(t.runs_size());
        extents += extent_count(t);
      }
      for (const TensorEntry& e : layout.entries()) {
        pieces += plan.buckets_touching(e.offset, e.offset + e.numel()).size();
      }
      pieces *= 3;  // states
      EXPECT_LE(runs, (padded ? 3 + static_cast<uint64_t>(gaps) : 4) * pieces) << extents << " extents";
      if (world == 4) extents_at_4 = extents;
      if (world == 4096) {
        EXPECT_GT(extents, 300 * extents_at_4);
      }
      std::printf("%s world %4d: %7llu extents in %5llu runs (%llu tensor-bucket pieces)\n",
                  padded ? "padded " : "aligned", world, static_cast<unsigned long long>(extents),
                  static_cast<unsigned long long>(runs), static_cast<unsigned long long>(pieces));
    }
  }
}

}  // namespace
}  // namespace etr
