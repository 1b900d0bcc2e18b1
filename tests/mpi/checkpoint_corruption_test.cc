// A corrupt newest checkpoint is detected and the job falls back to the previous one
// (checkpoint/manifest.h, checkpoint/checkpoint_reader.h: find_resumable), at np 1-4.
//
// The suite saves checkpoints after 2 and 4 steps and keeps a pristine copy of step 4.
// Each test corrupts step 4 one way (truncation, flipped bytes, a missing or future
// manifest, a shard file name that escapes the directory, a missing shard, manifests
// crafted with valid checksums that make no sense: step 2^63, a data position that
// disagrees with the step, an extent past its file, a file size past int64) and checks:
//   1. read_manifest / verify_files refuse it with their sentence, naming the file
//   2. find_resumable logs "is not usable ... falling back to" and returns step 2
//   3. a Trainer with checkpoint.resume = the directory resumes at step 2 and, trained
//      on to step 4, has the parameters the checkpoint of step 4 held, bitwise
// Nothing crashes. Step 4 is put back from the pristine copy before every case.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/manifest.h"
#include "examples/train/trainer.h"
#include "mpi/checkpoint_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr::testing {
namespace {
namespace fs = std::filesystem;
using train::Trainer;

// The sentences of read_manifest for a manifest.pb whose bytes were damaged: which one
// depends on where the damage is (the envelope's framing, its version, the body).
const std::vector<std::string> kDamagedManifest = {"does not parse", "fails its checksum",
                                                   "format version", "passes its checksum"};

class CheckpointCorruption : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new SharedTempDir(world().group(), "ckpt_corruption");
    root_ = tmp_->path() / "checkpoints";
    step2_ = root_ / step_dir_name(2);
    step4_ = root_ / step_dir_name(4);
    pristine_ = tmp_->path() / "pristine-step-4";
    guarded([] {
      Trainer t(tiny_config({"checkpoint.dir=" + root_.string(), "checkpoint.async=false",
                             "checkpoint.keep=0"}),
                world().group(), test_log(LogLevel::kError));
      t.train_step();
      t.train_step();
      EXPECT_TRUE(t.save_checkpoint("durable"));
      t.train_step();
      t.train_step();
      EXPECT_TRUE(t.save_checkpoint("durable"));
      params_at_4_ = snapshot(t).params;
    });
    if (world().rank() == 0) fs::copy(step4_, pristine_, fs::copy_options::recursive);
    idle_barrier(world().group());
  }
  static void TearDownTestSuite() {
    delete tmp_;
    tmp_ = nullptr;
  }

  // Step 4 as it was saved, and nothing else beside the checkpoints.
  void SetUp() override { restore_pristine(); }
  static void restore_pristine() {
    if (world().rank() == 0) {
      fs::remove_all(step4_);
      fs::copy(pristine_, step4_, fs::copy_options::recursive);
      fs::remove(root_ / "escape.bin");
    }
    idle_barrier(world().group());
  }

  // The shard files of step 4, by name.
  static std::vector<std::string> shard_names() {
    const ckpt::Manifest m = read_manifest(pristine_);
    std::vector<std::string> out;
    for (const auto& f : m.files()) out.push_back(f.name());
    return out;
  }

  // Rank 0 applies `corrupt` to step 4; then every rank checks 1-3 of the file comment.
  // `sentences`: read_manifest's or verify_files's message contains one of them, and
  // `named`. `what` describes the corruption in failure messages.
  static void expect_detected(const std::string& what,
                              const std::function<void(const fs::path& dir)>& corrupt,
                              const std::vector<std::string>& sentences, const std::string& named) {
    SCOPED_TRACE(what);
    restore_pristine();
    if (world().rank() == 0) corrupt(step4_);
    idle_barrier(world().group());
    // 1. The checks of one directory.
    std::string error;
    try {
      error = verify_files(step4_, read_manifest(step4_));
    } catch (const CheckpointError& e) {
      error = e.what();
    }
    EXPECT_FALSE(error.empty()) << "the corrupt checkpoint passed read_manifest and verify_files";
    EXPECT_TRUE(std::any_of(sentences.begin(), sentences.end(), [&](const std::string& s) {
      return error.find(s) != std::string::npos;
    })) << error;
    EXPECT_NE(error.find(named), std::string::npos)
        << "the message does not name " << named << ": " << error;
    // 2. The search for a checkpoint to resume from.
    CapturedLog log(LogLevel::kWarn);
    const fs::path roots[] = {root_};
    const auto found = find_resumable(roots, world().group(), log.log());
    EXPECT_EQ(found.value_or("nothing"), step2_);
    if (world().rank() == 0) {
      const std::string text = log.text();
      EXPECT_NE(text.find("checkpoint " + step4_.string() + " is not usable"), std::string::npos)
          << text;
      EXPECT_NE(text.find("falling back to " + step2_.string()), std::string::npos) << text;
    }
    // 3. A trainer resuming from the directory.
    Trainer t(tiny_config({"checkpoint.resume=" + root_.string()}), world().group(), test_log(LogLevel::kError));
    ASSERT_TRUE(t.resumed_from().has_value());
    EXPECT_EQ(*t.resumed_from(), step2_);
    EXPECT_EQ(t.position().step, 2u);
    t.train_step();
    t.train_step();
    EXPECT_TRUE(bitwise_equal(snapshot(t).params, params_at_4_))
        << "max |resumed - saved at step 4| = " << max_abs_diff(snapshot(t).params, params_at_4_);
  }

  static SharedTempDir* tmp_;
  static fs::path root_, step2_, step4_, pristine_;
  static std::vector<float> params_at_4_;
};

SharedTempDir* CheckpointCorruption::tmp_ = nullptr;
fs::path CheckpointCorruption::root_, CheckpointCorruption::step2_, CheckpointCorruption::step4_,
    CheckpointCorruption::pristine_;
std::vector<float> CheckpointCorruption::params_at_4_;

void truncate_to_half(const fs::path& file) {
  fs::resize_file(file, fs::file_size(file) / 2);
}

// `count` bytes at offsets drawn from `rng`, each XORed with a non-zero value from it.
void flip_bytes(const fs::path& file, std::mt19937_64& rng, int count) {
  std::string bytes = read_bytes(file);
  ASSERT_FALSE(bytes.empty()) << file;
  for (int i = 0; i < count; ++i) {
    const size_t at = std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng);
    bytes[at] = static_cast<char>(bytes[at] ^ std::uniform_int_distribution<int>(1, 255)(rng));
  }
  write_bytes(file, bytes);
}

// manifest.pb re-written by hand: `edit` changes the manifest, the envelope gets
// `version` and a valid checksum (so only the change itself can be refused).
void rewrite_manifest(const fs::path& dir, uint32_t version,
                      const std::function<void(ckpt::Manifest&)>& edit) {
  ckpt::Manifest m = read_manifest(dir);
  edit(m);
  ckpt::ManifestFile envelope;
  envelope.set_format_version(version);
  m.SerializeToString(envelope.mutable_manifest());
  envelope.set_manifest_xxh3(Checksum::of(envelope.manifest().data(), envelope.manifest().size()));
  write_bytes(dir / ckpt_format::kManifestName, envelope.SerializeAsString());
}

TEST_F(CheckpointCorruption, TheCheckpointsArePristineBeforeEachCase) {
  const fs::path roots[] = {root_};
  CapturedLog log;
  EXPECT_EQ(find_resumable(roots, world().group(), log.log()).value_or("nothing"), step4_);
  EXPECT_EQ(verify_files(step2_, read_manifest(step2_)), "");
  EXPECT_EQ(static_cast<int>(shard_names().size()), world().size());
}

TEST_F(CheckpointCorruption, TruncatedShardFile) {
  for (const std::string& shard : shard_names()) {
    expect_detected(
        "truncated " + shard, [&](const fs::path& dir) { truncate_to_half(dir / shard); },
        {"bytes where the manifest records"}, shard);
  }
}

TEST_F(CheckpointCorruption, TruncatedShardFileFailsARestoreWithoutTheChecks) {
  // Trainer::restore reads what it is given (find_resumable does the checking): a
  // shard cut short is an error, not a crash or a partial read.
  const std::string shard = shard_names().back();
  if (world().rank() == 0) truncate_to_half(step4_ / shard);
  idle_barrier(world().group());
  Trainer t(tiny_config({}), world().group(), test_log(LogLevel::kError));
  try {
    t.restore(step4_);
    ADD_FAILURE() << "restored from a truncated shard";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("too short"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(shard), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointCorruption, TruncatedManifest) {
  expect_detected(
      "truncated manifest.pb",
      [](const fs::path& dir) { truncate_to_half(dir / ckpt_format::kManifestName); },
      kDamagedManifest, ckpt_format::kManifestName);
}

TEST_F(CheckpointCorruption, FlippedBytesInShardFiles) {
  std::mt19937_64 rng(20240611);
  for (const std::string& shard : shard_names()) {
    for (int trial = 0; trial < 3; ++trial) {
      expect_detected(
          "flipped a byte of " + shard + ", trial " + std::to_string(trial),
          [&](const fs::path& dir) { flip_bytes(dir / shard, rng, 1); }, {"fails its checksum"},
          shard);
    }
  }
}

TEST_F(CheckpointCorruption, FlippedBytesInManifest) {
  std::mt19937_64 rng(20240612);
  for (int trial = 0; trial < 8; ++trial) {
    expect_detected(
        "flipped bytes of manifest.pb, trial " + std::to_string(trial),
        [&](const fs::path& dir) {
          flip_bytes(dir / ckpt_format::kManifestName, rng, 1 + trial % 3);
        },
        kDamagedManifest, ckpt_format::kManifestName);
  }
}

TEST_F(CheckpointCorruption, MissingManifest) {
  expect_detected(
      "deleted manifest.pb",
      [](const fs::path& dir) { fs::remove(dir / ckpt_format::kManifestName); },
      {"has no manifest.pb"}, step4_.string());
}

TEST_F(CheckpointCorruption, ManifestOfAFutureFormatVersion) {
  const uint32_t future = ckpt_format::kFormatVersion + 1;
  expect_detected(
      "format version " + std::to_string(future),
      [&](const fs::path& dir) { rewrite_manifest(dir, future, [](auto&) {}); },
      {"has format version " + std::to_string(future) + ", newer than the " +
       std::to_string(ckpt_format::kFormatVersion)},
      ckpt_format::kManifestName);
}

TEST_F(CheckpointCorruption, ShardFileNameOutsideTheDirectory) {
  for (const std::string bad : {"../escape.bin", "/etc/passwd"}) {
    expect_detected(
        "shard file named " + bad,
        [&](const fs::path& dir) {
          const std::string first = shard_names().front();
          // What an unchecked reader would find there: shard 0's bytes (for ../escape.bin).
          fs::copy_file(dir / first, dir.parent_path() / "escape.bin");
          rewrite_manifest(dir, ckpt_format::kFormatVersion,
                           [&](ckpt::Manifest& m) { m.mutable_files(0)->set_name(bad); });
        },
        {"which is not a plain file name inside the checkpoint directory"}, "'" + bad + "'");
  }
}

// Crafted manifests: the checksum holds, the numbers do not (check_manifest_sense).
TEST_F(CheckpointCorruption, ManifestsThatPassTheirChecksumButMakeNoSense) {
  const std::string why = "passes its checksum but does not make sense";
  const auto crafted = [&](const std::function<void(ckpt::Manifest&)>& edit) {
    return
        [edit](const fs::path& dir) { rewrite_manifest(dir, ckpt_format::kFormatVersion, edit); };
  };
  expect_detected("step 2^63", crafted([](ckpt::Manifest& m) {
                    m.set_step(uint64_t{1} << 63);
                    m.mutable_schedule()->set_step(uint64_t{1} << 63);
                  }),
                  {why + ": it records step 9223372036854775808"}, ckpt_format::kManifestName);
  expect_detected("a data position one step ahead", crafted([](ckpt::Manifest& m) {
                    m.mutable_data()->set_samples_seen(
                        m.data().samples_seen() + static_cast<uint64_t>(m.batch().global_batch()));
                  }),
                  {why + ": its data position is sample 50 but step 4 at a global batch of 10 "
                         "ends at sample 40"},
                  ckpt_format::kManifestName);
  expect_detected("an extent past the end of its file", crafted([](ckpt::Manifest& m) {
                    ckpt::ExtentRun* r = m.mutable_tensors(0)->mutable_runs(0);
                    r->set_file_offset(m.files(static_cast<int>(r->file())).bytes());
                  }),
                  {why + ": tensor "}, "has an extent outside its file");
  expect_detected("a shard file size past int64",
                  crafted([](ckpt::Manifest& m) { m.mutable_files(0)->set_bytes(~uint64_t{0}); }),
                  {why + ": it gives the shard file"}, "more than a file offset can address");
}

TEST_F(CheckpointCorruption, ListedShardFileMissing) {
  const std::string shard = shard_names().back();
  expect_detected(
      "deleted " + shard, [&](const fs::path& dir) { fs::remove(dir / shard); }, {"is missing"},
      shard);
}

// checkpoint.resume = the corrupt checkpoint itself (catalog.h: "it and the older
// checkpoints beside it"), spelled as a shell's tab completion writes it too.
TEST_F(CheckpointCorruption, ExplicitCheckpointPathFallsBackWithOrWithoutTrailingSlash) {
  std::mt19937_64 rng(20240613);
  const std::string shard = shard_names().front();
  if (world().rank() == 0) flip_bytes(step4_ / shard, rng, 1);
  idle_barrier(world().group());
  for (const fs::path& p : {step4_, step4_ / ""}) {
    SCOPED_TRACE("resume from " + p.string());
    const fs::path paths[] = {p};
    CapturedLog log;
    EXPECT_EQ(find_resumable(paths, world().group(), log.log()).value_or("nothing"), step2_);
    try {
      Trainer t(tiny_config({"checkpoint.resume=" + p.string()}), world().group(), test_log(LogLevel::kError));
      EXPECT_EQ(t.position().step, 2u);
    } catch (const CheckpointError& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

}  // namespace
}  // namespace etr::testing
