#include "checkpoint/offline.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>

#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_sink.h"
#include "runtime/state_names.h"
#include "runtime/error.h"

namespace etr {
namespace fs = std::filesystem;
namespace {

// ".step-NNNNNNNNN.partial": a save in flight, never taken for a checkpoint.
fs::path partial_dir(const fs::path& root, uint64_t step) {
  std::string name(".");  // (not "." + ...: GCC 12's -Wrestrict misfires on that)
  name.append(step_dir_name(step)).append(".partial");
  return root / name;
}

Shape shape_of(const ckpt::TensorRecord& t) {
  const auto& d = t.shape();
  switch (d.size()) {
    case 0:
      return Shape{};
    case 1:
      return Shape{d[0]};
    case 2:
      return Shape{d[0], d[1]};
    case 3:
      return Shape{d[0], d[1], d[2]};
    case 4:
      return Shape{d[0], d[1], d[2], d[3]};
    case 5:
      return Shape{d[0], d[1], d[2], d[3], d[4]};
    case 6:
      return Shape{d[0], d[1], d[2], d[3], d[4], d[5]};
    default:
      throw CheckpointError("tensor " + t.name() + " has " + std::to_string(d.size()) +
                            " dimensions, more than the " + std::to_string(Shape::kMaxDims) +
                            " a tensor may have");
  }
}

// A checkpoint being written: root/.step-N.partial, and whether root was made for it.
struct Partial {
  fs::path root, dir;
  bool made_root = false;
};

// Creates an empty root/.step-N.partial (removing a stale one) after checking that
// root/step-N does not exist.
Partial begin_checkpoint(const fs::path& root, uint64_t step) {
  const fs::path final_dir = root / step_dir_name(step);
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {
    throw CheckpointError(final_dir.string() +
                          " already exists; move it away or write the "
                          "checkpoint to another directory");
  }
  Partial p{root, partial_dir(root, step), !fs::exists(root, ec)};
  fs::create_directories(root, ec);
  if (ec) throw IoError("cannot create the directory " + root.string() + ": " + ec.message());
  fs::remove_all(p.dir, ec);
  fs::create_directory(p.dir, ec);
  if (ec) throw IoError("cannot create " + p.dir.string() + ": " + ec.message());
  return p;
}

// manifest.pb is in `partial`: rename it to root/step-N and make that durable.
fs::path finish_checkpoint(const fs::path& root, const fs::path& partial, uint64_t step) {
  const fs::path final_dir = root / step_dir_name(step);
  std::error_code ec;
  fs::rename(partial, final_dir, ec);
  if (ec) {
    throw IoError("cannot rename " + partial.string() + " to " + final_dir.string() + ": " +
                  ec.message());
  }
  fsync_directory(root);
  return final_dir;
}

// Runs `body` (which writes into p.dir); on failure removes what begin_checkpoint made
// (root only when it made it and it is empty) and rethrows.
template <typename Body>
fs::path with_cleanup(const Partial& p, Body body) {
  try {
    return body();
  } catch (...) {
    std::error_code ec;
    fs::remove_all(p.dir, ec);
    if (p.made_root) fs::remove(p.root, ec);  // fails, harmlessly, unless empty
    throw;
  }
}

// The rank's range of a state, as a pointer to a flat buffer whose range(rank) is valid.
using RangeSource = std::function<const float*(size_t state, int rank)>;

fs::path write_shards(const fs::path& root, ckpt::Manifest meta, const ParamLayout& layout,
                      const std::vector<std::string>& states, int world,
                      const RangeSource& source) {
  const ShardPlan plan(layout, world, states);
  const ShardPlan one(layout, world, {"state"});  // the same ranges, one state at a time
  const uint64_t step = meta.step();
  meta.clear_tensors();
  meta.clear_files();
  meta.clear_states();
  plan.describe(meta);
  const Partial p = begin_checkpoint(root, step);
  const fs::path& partial = p.dir;
  return with_cleanup(p, [&] {
    for (int r = 0; r < world; ++r) {
      ShardSink sink(partial / plan.file_name(r));
      for (size_t s = 0; s < states.size(); ++s) {
        const float* base = source(s, r);
        one.pack(r, std::span<const float* const>(&base, 1),
                 [&](const void* data, size_t size) { sink.append(data, size); });
        sink.drain();  // `source` may reuse its buffer for the next state
      }
      ckpt::ShardFile* f = meta.add_files();
      f->set_name(plan.file_name(r));
      f->set_bytes(sink.bytes());
      f->set_xxh3(sink.commit());
      f->set_writer_rank(r);
      if (f->bytes() != plan.file_bytes(r)) {
        throw CheckpointError("shard file " + f->name() + " came out with " +
                              std::to_string(f->bytes()) + " bytes instead of " +
                              std::to_string(plan.file_bytes(r)));
      }
    }
    write_manifest(partial, meta);
    return finish_checkpoint(root, partial, step);
  });
}

// Reads src/name into dst/name through DurableFile, checking size and XXH3 on the way.
void copy_checked(const fs::path& src, const fs::path& dst, const ckpt::ShardFile& f) {
  const fs::path from = src / f.name();
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) {
    throw CheckpointError("shard file " + from.string() +
                          " cannot be opened: " + std::strerror(errno));
  }
  DurableFile out(dst / f.name());
  Checksum sum;
  std::vector<char> buf(size_t{1} << 20);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(in.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IoError("cannot read " + from.string() + ": " + std::strerror(errno));
    if (n == 0) break;
    sum.update(buf.data(), static_cast<size_t>(n));
    out.write(buf.data(), static_cast<size_t>(n));
    total += static_cast<uint64_t>(n);
  }
  if (total != f.bytes()) {
    throw CheckpointError("shard file " + from.string() + " has " + std::to_string(total) +
                          " bytes where the manifest records " + std::to_string(f.bytes()) +
                          " (truncated or overwritten)");
  }
  if (sum.digest() != f.xxh3()) {
    throw CheckpointError("shard file " + from.string() + " fails its checksum (XXH3 " +
                          format_checksum(sum.digest()) + ", recorded " +
                          format_checksum(f.xxh3()) + "): its contents are corrupt");
  }
  out.commit();
}

}  // namespace

ParamLayout layout_from_manifest(const ckpt::Manifest& manifest) {
  std::string name(state::kParam);
  bool has_param = false;
  for (const auto& s : manifest.states()) has_param = has_param || s == state::kParam;
  if (!has_param && manifest.states_size() > 0) name = manifest.states(0);
  ParamLayout layout;
  for (const auto& t : manifest.tensors()) {
    if (t.state() != name) continue;
    if (t.dtype() != "f32") {
      throw CheckpointError("tensor " + t.name() + " is " + t.dtype() +
                            "; only f32 checkpoints can be read into a layout");
    }
    layout.add(t.name(), shape_of(t), 0, false);
  }
  if (layout.entries().empty()) {
    throw CheckpointError("the checkpoint of step " + std::to_string(manifest.step()) +
                          " holds no tensors of a '" + name + "' state");
  }
  return layout;
}

fs::path write_checkpoint(const fs::path& root, ckpt::Manifest meta, const ParamLayout& layout,
                          const std::vector<std::string>& states, int world,
                          const StateFiller& fill) {
  // One flat buffer, filled range by range; its pages are touched only as ranges are read.
  std::unique_ptr<float[]> flat(
      new float[static_cast<size_t>(std::max<int64_t>(layout.numel(), 1))]);
  const ShardPlan plan(layout, world, {"state"});
  return write_shards(root, std::move(meta), layout, states, world, [&](size_t s, int rank) {
    const auto [begin, end] = plan.flat_range(rank);
    if (begin < end) fill(states[s], flat.get(), begin, end);
    return static_cast<const float*>(flat.get());
  });
}

fs::path write_checkpoint(const fs::path& root, ckpt::Manifest meta, const ParamLayout& layout,
                          std::span<const NamedState> states, int world) {
  std::vector<std::string> names;
  for (const NamedState& s : states) {
    if (s.begin != 0) throw InvalidArgument("write_checkpoint takes whole flat buffers");
    names.push_back(s.name);
  }
  return write_shards(root, std::move(meta), layout, names, world,
                      [&](size_t s, int) { return states[s].data; });
}

fs::path copy_checkpoint(const fs::path& src, const fs::path& root) {
  const ckpt::Manifest m = read_manifest(src);
  const Partial p = begin_checkpoint(root, m.step());
  const fs::path& partial = p.dir;
  return with_cleanup(p, [&] {
    for (const auto& f : m.files()) copy_checked(src, partial, f);
    // The manifest as it is (read_manifest checked it): the same bytes, the same checksum.
    const fs::path manifest = src / ckpt_format::kManifestName;
    std::error_code ec;
    ckpt::ShardFile manifest_file;
    manifest_file.set_name(ckpt_format::kManifestName);
    manifest_file.set_bytes(fs::file_size(manifest, ec));
    if (ec) throw IoError("cannot read " + manifest.string() + ": " + ec.message());
    manifest_file.set_xxh3(Checksum::of_file(manifest));
    copy_checked(src, partial, manifest_file);
    return finish_checkpoint(root, partial, m.step());
  });
}

}  // namespace etr
