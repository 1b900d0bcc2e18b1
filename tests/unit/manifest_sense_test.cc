// check_manifest_sense (checkpoint/manifest.h) on crafted manifests whose checksum holds:
// each is named by one sentence, by the check itself and by read_manifest; the sane one,
// and a valid run of many extents, pass.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/shard_plan.h"
#include "runtime/error.h"
#include "unit/odd_layout.h"

namespace etr {
namespace {

namespace fs = std::filesystem;
using testing::kStates;
using testing::meta;
using testing::odd_layout;

// A manifest as etr-train writes it: odd_layout over 2 files, step 6 at a global batch of
// 8 (so sample 48), seq_len 64 (so token 3072).
ckpt::Manifest sane_manifest() {
  const ParamLayout layout = odd_layout();
  const ShardPlan plan(layout, 2, kStates);
  ckpt::Manifest m = meta(6, 2);
  m.mutable_data()->set_tokens_seen(48 * 64);
  m.mutable_batch()->set_global_batch(8);
  m.mutable_batch()->set_micro_batch(2);
  m.mutable_schedule()->set_step(6);
  m.mutable_schedule()->set_next_lr(1e-3);
  m.mutable_config()->mutable_model()->set_seq_len(64);
  m.mutable_config()->mutable_batch()->set_global_batch(8);
  plan.describe(m);
  for (int r = 0; r < 2; ++r) {
    ckpt::ShardFile* f = m.add_files();
    f->set_name(plan.file_name(r));
    f->set_bytes(plan.file_bytes(r));
  }
  return m;
}

struct SenseCase {
  std::string what;
  std::function<void(ckpt::Manifest&)> edit;
  std::string sentence;  // "" = still makes sense
};

constexpr uint64_t k2To63 = uint64_t{1} << 63;

// b.weight's param (13 x 17) as one run of 17 rows in file 0 (valid: the sense checks do
// not look at which bytes a file's tensors share); the cases below break it.
ckpt::ExtentRun* one_run(ckpt::Manifest& m) {
  ckpt::TensorRecord* t = m.mutable_tensors(1);
  t->clear_runs();
  ckpt::ExtentRun* r = t->add_runs();
  r->set_count(13);
  r->set_more(16);
  r->set_offset_step(52);
  return r;
}

std::vector<SenseCase> sense_cases() {
  const auto set_step = [](uint64_t step) {
    return [step](ckpt::Manifest& m) {
      m.set_step(step);
      m.mutable_schedule()->set_step(step);
    };
  };
  return {
      {"step 2^63", set_step(k2To63),
       "records step 9223372036854775808, more than the "
       "9223372036854775806 steps"},
      {"step 2^64 - 1", set_step(~uint64_t{0}), "more than the 9223372036854775806 steps"},
      {"the largest step, no batch policy",
       [&](ckpt::Manifest& m) {
         set_step(kMaxManifestStep)(m);
         m.mutable_batch()->set_global_batch(0);
         m.mutable_config()->mutable_batch()->clear_global_batch();
       },
       ""},
      {"the largest step at a global batch of 8", set_step(kMaxManifestStep),
       "step 9223372036854775806 at a global batch of 8 needs more samples than a 64-bit "
       "position counts"},
      {"step 2^61 at 8: 2^64 samples wrap to 0",
       [&](ckpt::Manifest& m) {
         set_step(uint64_t{1} << 61)(m);
         m.mutable_data()->set_samples_seen(0);
         m.mutable_data()->set_tokens_seen(0);
       },
       "needs more samples than a 64-bit position counts"},
      {"schedule behind the step", [](ckpt::Manifest& m) { m.mutable_schedule()->set_step(7); },
       "its schedule is at step 7 but it records step 6"},
      {"position one sample short",
       [](ckpt::Manifest& m) { m.mutable_data()->set_samples_seen(47); },
       "its data position is sample 47 but step 6 at a global batch of 8 ends at sample 48"},
      {"a resume changed the batch at step 4, sample 20 (20 + 2 x 8 = 36)",
       [](ckpt::Manifest& m) {
         m.mutable_data()->set_batch_origin_step(4);
         m.mutable_data()->set_batch_origin_samples(20);
         m.mutable_data()->set_samples_seen(36);
         m.mutable_data()->set_tokens_seen(36 * 64);
       },
       ""},
      {"batch origin after the step",
       [](ckpt::Manifest& m) {
         m.mutable_data()->set_batch_origin_step(7);
         m.mutable_data()->set_batch_origin_samples(40);
       },
       "its global batch took effect at step 7, sample 40"},
      {"tokens disagree", [](ckpt::Manifest& m) { m.mutable_data()->set_tokens_seen(48 * 65); },
       "it records 3120 tokens seen for 48 samples of 64 tokens"},
      {"config's batch disagrees",
       [](ckpt::Manifest& m) { m.mutable_config()->mutable_batch()->set_global_batch(16); },
       "global batch of 8 but its config 16"},
      {"negative global batch", [](ckpt::Manifest& m) { m.mutable_batch()->set_global_batch(-8); },
       "negative batch"},
      {"next rate NaN", [](ckpt::Manifest& m) { m.mutable_schedule()->set_next_lr(std::nan("")); },
       "its next learning rate is not finite"},
      {"negative world", [](ckpt::Manifest& m) { m.mutable_layout()->set_world_size(-2); },
       "its layout has a negative size"},
      {"file size 2^63", [](ckpt::Manifest& m) { m.mutable_files(1)->set_bytes(k2To63); },
       "gives the shard file shard-00001-of-00002.bin a size of 9223372036854775808 bytes, more "
       "than a file offset can address"},
      {"file sizes summing past int64",
       [](ckpt::Manifest& m) {
         m.mutable_files(0)->set_bytes(k2To63 - 1);
         m.mutable_files(1)->set_bytes(k2To63 - 1);
       },
       "more than a file offset can address"},
      {"extent offset at the end of its file",
       [](ckpt::Manifest& m) {
         ckpt::ExtentRun* r = m.mutable_tensors(1)->mutable_runs(0);
         r->set_file_offset(m.files(r->file()).bytes());
       },
       "tensor b.weight (param) has an extent outside its file (elements 0 + "},
      {"extent offset near 2^64 (offset + bytes wraps)",
       [](ckpt::Manifest& m) {
         m.mutable_tensors(1)->mutable_runs(0)->set_file_offset(~uint64_t{0} - 3);
       },
       "has an extent outside its file"},
      {"extent one element too long for its file",
       [](ckpt::Manifest& m) {
         // The last tensor of adam.v ends its file; one more element runs past it.
         ckpt::TensorRecord* t = m.mutable_tensors(m.tensors_size() - 1);
         ckpt::ExtentRun* r = t->mutable_runs(t->runs_size() - 1);
         r->set_file_offset(r->file_offset() + 4);
       },
       "has an extent outside its file"},
      {"a run of 17 extents, all inside file 0", [](ckpt::Manifest& m) { one_run(m); }, ""},
      {"a run whose later extents leave their file (offset step)",
       [](ckpt::Manifest& m) { one_run(m)->set_offset_step(100); },
       "tensor b.weight (param) has an extent outside its file (elements 208 + 13 at byte 1600 "
       "of shard-00000-of-00002.bin, 1632 bytes)"},
      {"a run stepping before the start of its file",
       [](ckpt::Manifest& m) {
         ckpt::ExtentRun* r = one_run(m);
         r->set_file_offset(64);
         r->set_offset_step(-8);
       },
       "(elements 208 + 13 at byte -64 of shard-00000-of-00002.bin"},
      {"a run into a file the manifest does not list",
       [](ckpt::Manifest& m) { one_run(m)->set_file_step(1); },
       "tensor b.weight (param) points into file number 16, which the manifest does not list "
       "(it lists 2)"},
      {"a run whose file step wraps int64",
       [](ckpt::Manifest& m) { one_run(m)->set_file_step(std::numeric_limits<int64_t>::min()); },
       "points into file number -147573952589676412928, which the manifest does not list"},
      {"a run past the end of its tensor",
       [](ckpt::Manifest& m) {
         ckpt::ExtentRun* r = m.mutable_tensors(1)->mutable_runs(0);
         r->set_more(r->more() + 1);
       },
       "tensor b.weight (param) has extents out of order or past its end"},
      {"a run of 2^26 + 1 extents, each inside its file",
       [](ckpt::Manifest& m) {
         m.mutable_tensors(1)->set_shape(0, int64_t{1} << 27);
         m.mutable_tensors(1)->set_shape(1, 1);
         m.mutable_files(0)->set_bytes(uint64_t{1} << 40);
         ckpt::ExtentRun* r = one_run(m);
         r->set_count(1);
         r->set_more(uint64_t{1} << 26);
         r->set_offset_step(4);
       },
       "it holds more than 67108864 extents, more than etr writes"},
      {"a run of 2^63 extents",
       [](ckpt::Manifest& m) { m.mutable_tensors(1)->mutable_runs(0)->set_more(k2To63); },
       "has extents out of order or past its end"},
      {"a run of empty extents",
       [](ckpt::Manifest& m) { m.mutable_tensors(1)->mutable_runs(0)->set_count(0); },
       "has extents out of order or past its end"},
      {"a run that leaves a gap",
       [](ckpt::Manifest& m) {
         ckpt::TensorRecord* t = m.mutable_tensors(1);
         *t->add_runs() = t->runs(0);
       },
       "has extents out of order or past its end"},
      {"version 1 extents in a version 2 manifest",
       [](ckpt::Manifest& m) { m.mutable_tensors(1)->add_extents()->set_count(1); },
       "tensor b.weight (param) has format version 1 extents in a version 2 manifest"},
      {"shape overflowing int64",
       [](ckpt::Manifest& m) {
         m.mutable_tensors(1)->set_shape(0, int64_t{1} << 40);
         m.mutable_tensors(1)->set_shape(1, int64_t{1} << 40);
       },
       "tensor b.weight (param) has an impossible shape"},
      {"negative dimension", [](ckpt::Manifest& m) { m.mutable_tensors(0)->set_shape(0, -7); },
       "has an impossible shape"},
      {"a tensor twice", [](ckpt::Manifest& m) { *m.add_tensors() = m.tensors(0); },
       "it holds tensor a.bias (param) twice"},
      {"a state the manifest does not list",
       [](ckpt::Manifest& m) { m.mutable_tensors(0)->set_state("adam.x"); },
       "belongs to the state 'adam.x', which the manifest does not list"},
  };
}

TEST(ManifestSense, TheSaneManifestPassesAndEachCraftedOneIsNamed) {
  EXPECT_EQ(check_manifest_sense(sane_manifest()), "");
  for (const SenseCase& c : sense_cases()) {
    SCOPED_TRACE(c.what);
    ckpt::Manifest m = sane_manifest();
    c.edit(m);
    const std::string bad = check_manifest_sense(m);
    if (c.sentence.empty()) {
      EXPECT_EQ(bad, "");
    } else {
      EXPECT_NE(bad.find(c.sentence), std::string::npos) << bad;
    }
  }
}

TEST(ManifestSense, ReadManifestRefusesACraftedManifestWithAValidChecksum) {
  std::string tmpl = (fs::temp_directory_path() / "etr-manifest-sense-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
  const fs::path dir = tmpl;
  for (const SenseCase& c : sense_cases()) {
    if (c.sentence.empty()) continue;
    SCOPED_TRACE(c.what);
    ckpt::Manifest m = sane_manifest();
    c.edit(m);
    write_manifest(dir, m);  // a valid checksum of the crafted body
    try {
      read_manifest(dir);
      ADD_FAILURE() << "read_manifest accepted it";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find((dir / "manifest.pb").string() +
                          " passes its checksum but does not make sense: "),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(c.sentence), std::string::npos) << what;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace etr
