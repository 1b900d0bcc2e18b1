#include "checkpoint/checkpoint_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "checkpoint/agreement.h"
#include "checkpoint/catalog.h"
#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.h"
#include "runtime/error.h"

namespace etr {
namespace fs = std::filesystem;

CheckpointReader::CheckpointReader(fs::path dir) : CheckpointReader(dir, read_manifest(dir)) {}

CheckpointReader::CheckpointReader(fs::path dir, ckpt::Manifest manifest)
    : dir_(std::move(dir)), manifest_(std::move(manifest)) {
  for (const auto& t : manifest_.tensors()) index_[{t.state(), t.name()}] = &t;
}

CheckpointReader::~CheckpointReader() {
  for (auto& [name, fd] : fds_) ::close(fd);
}

bool CheckpointReader::has_state(const std::string& state) const {
  return std::find(manifest_.states().begin(), manifest_.states().end(), state) !=
         manifest_.states().end();
}

int CheckpointReader::fd(const std::string& file) {
  auto it = fds_.find(file);
  if (it != fds_.end()) return it->second;
  const fs::path path = dir_ / file;  // a plain name: read_manifest checked it
  const int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f < 0) {
    throw IoError("cannot open the shard file " + path.string() + ": " + std::strerror(errno));
  }
  fds_[file] = f;
  return f;
}

void CheckpointReader::read_state(const std::string& state, const ParamLayout& layout,
                                  float* flat, int64_t begin, int64_t end) {
  read_range(state, layout, flat + begin, begin, end);
}

void CheckpointReader::read_range(const std::string& state, const ParamLayout& layout,
                                  float* dest, int64_t begin, int64_t end) {
  read(plan_range(state, layout, dest, begin, end));
}

std::vector<ShardRead> CheckpointReader::plan_range(const std::string& state,
                                                    const ParamLayout& layout, float* dest,
                                                    int64_t begin, int64_t end) const {
  if (!has_state(state)) {
    throw CheckpointError(dir_.string() + " holds no '" + state + "' state");
  }
  std::vector<ShardRead> reads;
  for (const TensorEntry& e : layout.entries()) {
    const int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel());
    if (lo >= hi) continue;
    auto it = index_.find({state, e.name});
    if (it == index_.end()) {
      throw CheckpointError(dir_.string() + " has no tensor " + e.name + " (" + state +
                            "): it was saved from another model");
    }
    const ckpt::TensorRecord& rec = *it->second;
    bool same = rec.shape_size() == e.shape.ndim() && rec.dtype() == "f32";
    for (int d = 0; same && d < e.shape.ndim(); ++d) same = rec.shape(d) == e.shape[d];
    if (!same) {
      std::string saved = "[";
      for (int d = 0; d < rec.shape_size(); ++d) saved += (d ? ", " : "") + std::to_string(rec.shape(d));
      throw CheckpointError("tensor " + e.name + " in " + dir_.string() + " is " + rec.dtype() +
                            " " + saved + "] but the model's is f32 " + e.shape.str() +
                            ": the checkpoint was saved from another model size");
    }
    // Tensor elements [lo - offset, hi - offset) from the extents that overlap them.
    const uint64_t need_lo = static_cast<uint64_t>(lo - e.offset);
    const uint64_t need_hi = static_cast<uint64_t>(hi - e.offset);
    for_each_extent(rec, need_lo, need_hi, [&](const ExtentRef& x) {
      if (x.file < 0 || x.file >= manifest_.files_size()) {  // parse_manifest refuses these
        throw CheckpointError("tensor " + e.name + " in " + dir_.string() + " is in file number " +
                              std::to_string(x.file) + ", which the manifest does not list");
      }
      const uint64_t a = std::max(need_lo, x.tensor_begin);
      const uint64_t b = std::min(need_hi, x.tensor_begin + x.count);
      reads.push_back(ShardRead{
          x.file, x.file_offset + (a - x.tensor_begin) * sizeof(float), (b - a) * sizeof(float),
          reinterpret_cast<char*>(dest + (e.offset + static_cast<int64_t>(a) - begin))});
    });
  }
  return reads;
}

void CheckpointReader::read(std::span<const ShardRead> reads) {
  for (const ShardRead& r : reads) {
    const std::string& name = manifest_.files(r.file).name();
    const int f = fd(name);
    char* dst = r.dest;
    size_t left = r.bytes;
    off_t at = static_cast<off_t>(r.offset);
    while (left > 0) {
      // At most 64 MiB a call, so that a progress line can come between two.
      const ssize_t n = ::pread(f, dst, std::min<size_t>(left, size_t{64} << 20), at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw IoError("cannot read " + std::to_string(left) + " bytes at offset " +
                      std::to_string(at) + " of " + (dir_ / name).string() + ": " +
                      (n == 0 ? std::string("the file is too short") : std::strerror(errno)));
      }
      dst += n;
      at += n;
      left -= static_cast<size_t>(n);
      bytes_read_ += static_cast<uint64_t>(n);
      if (progress_) progress_->add(static_cast<uint64_t>(n));
    }
  }
}

std::optional<fs::path> find_resumable(std::span<const fs::path> paths, const Group& group,
                                       Logger& log) {
  // Every rank lists the same directories; rank 0's list decides, so that a file system
  // that shows the ranks different views cannot split them.
  std::vector<fs::path> candidates = resume_candidates(paths);
  const uint64_t count = broadcast<uint64_t>(group, candidates.size(), 0);
  if (!all_true(group, candidates.size() == count)) {
    throw CheckpointError("the ranks see different checkpoints in the same directories; the "
                          "checkpoint directory must be one file system shared by every rank");
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    std::string local;
    try {
      const ckpt::Manifest m = read_manifest(candidates[i]);
      local = verify_files(candidates[i], m, group.rank(), group.size());
    } catch (const std::exception& e) {
      local = e.what();
    }
    const std::string err = first_error(group, local);
    if (err.empty()) return candidates[i];
    if (group.rank() == 0) {
      log.warn("checkpoint ", candidates[i].string(), " is not usable: ", err,
               i + 1 < candidates.size() ? "; falling back to " + candidates[i + 1].string()
                                         : std::string("; no older checkpoint to fall back to"));
    }
  }
  return std::nullopt;
}

}  // namespace etr
