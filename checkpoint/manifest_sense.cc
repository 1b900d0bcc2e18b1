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
std::string check_files(const ckpt::Manifest& m, std::map<std::string, uint64_t>& file_bytes) {
  uint64_t total = 0;
  for (const auto& f : m.files()) {
    if (!is_plain_file_name(f.name())) {
      return "it names the shard file '" + f.name() +
             "', which is not a plain file name inside the checkpoint directory; refusing to "
             "read it";
    }
    if (!file_bytes.emplace(f.name(), f.bytes()).second) {
      return "it lists the shard file " + f.name() + " twice";
    }
    const auto sum = plus(total, f.bytes());
    if (f.bytes() > kMaxInt64 || !sum || *sum > kMaxInt64) {
      return "it gives the shard file " + f.name() + " a size of " + str(f.bytes()) +
             " bytes, more than a file offset can address";
    }
    total = *sum;
  }
  return "";
}

// One tensor record: a known dtype, a shape without overflow, extents in order inside
// listed files that cover the tensor exactly once.
std::string check_tensor(const ckpt::TensorRecord& t,
                         const std::map<std::string, uint64_t>& file_bytes) {
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
  uint64_t next = 0;
  for (const auto& e : t.extents()) {
    auto f = file_bytes.find(e.file());
    if (f == file_bytes.end()) {
      return name + " points into " + e.file() + ", which the manifest does not list";
    }
    // count <= numel <= 2^50 and esize <= 8: the byte count cannot overflow.
    if (e.tensor_begin() != next || e.count() > numel - next || e.file_offset() > f->second ||
        e.count() * esize > f->second - e.file_offset()) {
      return name + " has an extent outside its file or out of order (elements " +
             str(e.tensor_begin()) + " + " + str(e.count()) + " at byte " + str(e.file_offset()) +
             " of " + e.file() + ", " + str(f->second) + " bytes)";
    }
    next += e.count();
  }
  if (next != numel) {
    return "the extents of " + name + " hold " + str(next) + " of its " + str(numel) + " elements";
  }
  return "";
}

}  // namespace

std::string check_manifest_sense(const ckpt::Manifest& m) {
  if (std::string bad = check_position(m); !bad.empty()) return bad;
  std::map<std::string, uint64_t> file_bytes;
  if (std::string bad = check_files(m, file_bytes); !bad.empty()) return bad;
  std::set<std::string> attachments;
  for (const auto& a : m.attachments()) {
    if (!is_plain_file_name(a.name()))
      return "attachment name '" + a.name() + "' is not a plain file name";
    if (!attachments.insert(a.name()).second) return "it holds attachment " + a.name() + " twice";
  }
  const std::set<std::string> states(m.states().begin(), m.states().end());
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& t : m.tensors()) {
    if (!states.empty() && !states.contains(t.state())) {
      return "tensor " + t.name() + " belongs to the state '" + t.state() +
             "', which the manifest does not list";
    }
    if (!seen.emplace(t.state(), t.name()).second) {
      return "it holds tensor " + t.name() + " (" + t.state() + ") twice";
    }
    if (std::string bad = check_tensor(t, file_bytes); !bad.empty()) return bad;
  }
  return "";
}

}  // namespace etr
