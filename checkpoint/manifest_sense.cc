// check_manifest_sense (checkpoint/manifest.h): a manifest whose checksum holds may still
// be impossible (crafted, or damaged before its checksum was taken). Every number a
// reader or a resuming trainer turns into a position, a size, an offset or a loop bound is
// checked here against what the format can address and against the other numbers it
// must agree with. A pure function of the decoded manifest: the fuzz target of the
// manifest decoder calls it too.
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "checkpoint/manifest.h"

namespace etr {
namespace {

constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// A tensor's elements: 2^50 (4 PiB of f32) is more than any host holds.
constexpr uint64_t kMaxNumel = uint64_t{1} << 50;
// The extents a manifest's runs stand for, which bounds what a reader plans from a few
// bytes of runs (a read each): about what format version 1's records could express within
// protobuf's size limit. GPT-2 1.5B in 1 MiB ZeRO buckets at 1024 ranks makes 2^24.
constexpr uint64_t kMaxExtents = uint64_t{1} << 26;

std::optional<uint64_t> times(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<uint64_t> plus(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::string str(uint64_t x) {
  return std::to_string(x);
}

// A 128-bit sum of a manifest's numbers, in decimal (it may lie outside int64).
std::string str128(__int128 x) {
  char digits[48];
  char* p = digits + sizeof digits;
  const bool negative = x < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(x) : static_cast<unsigned __int128>(x);
  do {
    *--p = static_cast<char>('0' + static_cast<int>(u % 10));
    u /= 10;
  } while (u > 0);
  if (negative) *--p = '-';
  return std::string(p, digits + sizeof digits);
}

// Step, schedule, batch policy and data position agree with each other.
std::string check_position(const ckpt::Manifest& m) {
  const uint64_t step = m.step();
  if (step > kMaxManifestStep) {
    return "it records step " + str(step) + ", more than the " + str(kMaxManifestStep) +
           " steps a training schedule can count";
  }
  if (m.has_schedule()) {
    if (m.schedule().step() != step) {
      return "its schedule is at step " + str(m.schedule().step()) + " but it records step " +
             str(step);
    }
    if (!std::isfinite(m.schedule().next_lr())) return "its next learning rate is not finite";
  }
  const int64_t gb = m.batch().global_batch();
  if (gb < 0 || m.batch().micro_batch() < 0) {
    return "its batch policy has a negative batch (global " + std::to_string(gb) + ", micro " +
           std::to_string(m.batch().micro_batch()) + ")";
  }
  const ckpt::DataState& d = m.data();
  // (an automatic global batch, `auto` = 0 in the config, records the one it chose)
  const bool automatic = m.batch().auto_global_batch() && m.config().batch().global_batch() == 0;
  if (m.has_config() && m.config().batch().has_global_batch() && gb > 0 && !automatic &&
      m.config().batch().global_batch() != gb) {
    return "its batch policy has a global batch of " + std::to_string(gb) + " but its config " +
           std::to_string(m.config().batch().global_batch());
  }
  if (gb > 0) {  // 0: a writer without a batch policy (tools, tests)
    const uint64_t o_step = d.batch_origin_step(), o_samples = d.batch_origin_samples();
    if (o_step > step || o_samples > d.samples_seen() || o_samples < o_step ||
        (o_step == 0 && o_samples != 0)) {
      return "its global batch took effect at step " + str(o_step) + ", sample " + str(o_samples) +
             ", which step " + str(step) + " at sample " + str(d.samples_seen()) + " cannot follow";
    }
    const auto expect = [&]() -> std::optional<uint64_t> {
      const auto more = times(step - o_step, static_cast<uint64_t>(gb));
      return more ? plus(o_samples, *more) : std::nullopt;
    }();
    if (!expect) {
      return "step " + str(step) + " at a global batch of " + std::to_string(gb) +
             " needs more samples than a 64-bit position counts";
    }
    if (*expect != d.samples_seen()) {
      return "its data position is sample " + str(d.samples_seen()) + " but step " + str(step) +
             " at a global batch of " + std::to_string(gb) + " ends at sample " + str(*expect);
    }
  }
  if (m.has_config() && m.config().model().seq_len() > 0) {
    const auto tokens =
        times(d.samples_seen(), static_cast<uint64_t>(m.config().model().seq_len()));
    if (!tokens || *tokens != d.tokens_seen()) {
      return "it records " + str(d.tokens_seen()) + " tokens seen for " + str(d.samples_seen()) +
             " samples of " + std::to_string(m.config().model().seq_len()) + " tokens";
    }
  }
  const ckpt::Layout& l = m.layout();
  if (l.world_size() < 0 || l.dp_size() < 0 || l.pp_size() < 0 || l.zero_stage() < 0) {
    return "its layout has a negative size (" + std::to_string(l.world_size()) + " ranks, dp " +
           std::to_string(l.dp_size()) + ", pp " + std::to_string(l.pp_size()) + ", zero " +
           std::to_string(l.zero_stage()) + ")";
  }
  return "";
}

// Shard file names stay inside the directory, appear once, and have sizes a file offset
// (off_t) can address, also all together.
std::string check_files(const ckpt::Manifest& m) {
  uint64_t total = 0;
  std::set<std::string> names;
  for (const auto& f : m.files()) {
    if (!is_plain_file_name(f.name())) {
      return "it names the shard file '" + f.name() +
             "', which is not a plain file name inside the checkpoint directory; refusing to "
             "read it";
    }
    if (!names.insert(f.name()).second) return "it lists the shard file " + f.name() + " twice";
    const auto sum = plus(total, f.bytes());
    if (f.bytes() > kMaxInt64 || !sum || *sum > kMaxInt64) {
      return "it gives the shard file " + f.name() + " a size of " + str(f.bytes()) +
             " bytes, more than a file offset can address";
    }
    total = *sum;
  }
  return "";
}

// The extents of one run, each inside a listed file (sizes and offsets fit an int64, so
// the 128-bit sums below cannot overflow). File index and offset are linear in k, so the
// first and the last extent bound them; a run in one file needs no more, and a run over
// files visits at most one extent per listed file.
std::string check_run(const std::string& name, const ckpt::Manifest& m, const ckpt::ExtentRun& r,
                      size_t esize) {
  const uint64_t ends[2] = {0, r.more()};
  const bool one_file = r.file_step() == 0 || r.more() == 0;
  for (uint64_t i = 0; i < 2; ++i) {
    const __int128 file = static_cast<__int128>(r.file()) + static_cast<__int128>(ends[i]) * r.file_step();
    if (file < 0 || file >= m.files_size()) {
      return name + " points into file number " + str128(file) +
             ", which the manifest does not list (it lists " + std::to_string(m.files_size()) + ")";
    }
  }
  for (uint64_t k = 0; k <= r.more(); k = one_file && k < r.more() ? r.more() : k + 1) {
    const __int128 file = static_cast<__int128>(r.file()) + static_cast<__int128>(k) * r.file_step();
    const __int128 at = static_cast<__int128>(r.file_offset()) + static_cast<__int128>(k) * r.offset_step();
    const ckpt::ShardFile& f = m.files(static_cast<int>(file));
    // count <= numel <= 2^50 and esize <= 8: the byte count cannot overflow.
    if (at < 0 || at + static_cast<__int128>(r.count() * esize) > f.bytes()) {
      return name + " has an extent outside its file (elements " +
             str(r.tensor_begin() + k * r.count()) + " + " + str(r.count()) + " at byte " +
             str128(at) + " of " + f.name() + ", " +
             str(f.bytes()) + " bytes)";
    }
  }
  return "";
}

// One tensor record: a known dtype, a shape without overflow, runs in order whose extents
// lie inside listed files and cover the tensor exactly once. `extents` counts the
// extents of the whole manifest, which kMaxExtents bounds (and with it this check's work).
std::string check_tensor(const ckpt::TensorRecord& t, const ckpt::Manifest& m, uint64_t& extents) {
  const std::string name = "tensor " + t.name() + " (" + t.state() + ")";
  const size_t esize = dtype_name_size(t.dtype());
  if (esize == 0) return name + " has the unknown dtype '" + t.dtype() + "'";
  uint64_t numel = 1;
  for (int64_t d : t.shape()) {
    if (d < 0 || (d > 0 && numel > kMaxNumel / static_cast<uint64_t>(d))) {
      return name + " has an impossible shape (a negative dimension or more than 2^50 elements)";
    }
    numel *= static_cast<uint64_t>(d);
  }
  if (t.extents_size() > 0) {
    return name + " has format version 1 extents in a version " +
           std::to_string(ckpt_format::kFormatVersion) + " manifest";
  }
  uint64_t next = 0;
  for (const auto& r : t.runs()) {
    // (more + 1) count <= numel - next, without overflow.
    if (r.count() == 0 || r.tensor_begin() != next || r.more() >= (numel - next) / r.count()) {
      return name + " has extents out of order or past its end (" + str(r.more()) +
             " + 1 of " + str(r.count()) + " elements from element " + str(r.tensor_begin()) +
             ", of " + str(numel) + ")";
    }
    extents += r.more() + 1;
    if (extents > kMaxExtents) {
      return "it holds more than " + str(kMaxExtents) +
             " extents, more than etr writes (larger ZeRO buckets make fewer)";
    }
    if (std::string bad = check_run(name, m, r, esize); !bad.empty()) return bad;
    next += (r.more() + 1) * r.count();
  }
  if (next != numel) {
    return "the extents of " + name + " hold " + str(next) + " of its " + str(numel) + " elements";
  }
  return "";
}

}  // namespace

std::string check_manifest_sense(const ckpt::Manifest& m) {
  if (std::string bad = check_position(m); !bad.empty()) return bad;
  if (std::string bad = check_files(m); !bad.empty()) return bad;
  std::set<std::string> attachments;
  for (const auto& a : m.attachments()) {
    if (!is_plain_file_name(a.name()))
      return "attachment name '" + a.name() + "' is not a plain file name";
    if (!attachments.insert(a.name()).second) return "it holds attachment " + a.name() + " twice";
  }
  const std::set<std::string> states(m.states().begin(), m.states().end());
  std::set<std::pair<std::string, std::string>> seen;
  uint64_t extents = 0;
  for (const auto& t : m.tensors()) {
    if (!states.empty() && !states.contains(t.state())) {
      return "tensor " + t.name() + " belongs to the state '" + t.state() +
             "', which the manifest does not list";
    }
    if (!seen.emplace(t.state(), t.name()).second) {
      return "it holds tensor " + t.name() + " (" + t.state() + ") twice";
    }
    if (std::string bad = check_tensor(t, m, extents); !bad.empty()) return bad;
  }
  return "";
}

}  // namespace etr
