// Fuzz target: the checkpoint manifest decoder and its sense checks (checkpoint/manifest.h).
//
// Input: a mode byte, then bytes. Mode even: the bytes are a Manifest body, which the
// target wraps in a valid envelope (the body's XXH3; format version 1 when the mode is a
// multiple of 4, a record per extent, else the current version, extent runs) so that the
// fuzzer reaches the decoder and check_manifest_sense past the checksum; mode odd: the
// bytes are a whole manifest.pb, envelope and all. read_manifest reads it from a
// directory in /dev/shm and must either return a manifest or throw CheckpointError; any
// other exception, a crash or a sanitizer report is a finding. A manifest it returns
// must pass check_manifest_sense again, its files' sizes must sum without overflow, and
// every extent its runs stand for must lie inside a listed file.
#include <google/protobuf/stubs/logging.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checksum.h"
#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.h"
#include "runtime/error.h"

namespace {

namespace fs = std::filesystem;

// A directory of this process's own in /dev/shm, removed at exit.
struct ScratchDir {
  fs::path path = fs::path("/dev/shm") / ("etr-fuzz-manifest-" + std::to_string(::getpid()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

// protobuf logs every string field that is not UTF-8 to stderr: under the fuzzer that was
// most of the run's output (59 MB in 10 minutes) and time. The decoder's verdict is what
// is checked, not the log.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ScratchDir dir;
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string file = bytes;
  if (data[0] % 2 == 0) {
    etr::ckpt::ManifestFile envelope;
    envelope.set_format_version(data[0] % 4 == 0 ? 1 : etr::ckpt_format::kFormatVersion);
    envelope.set_manifest(bytes);
    envelope.set_manifest_xxh3(etr::Checksum::of(bytes.data(), bytes.size()));
    file = envelope.SerializeAsString();
  }
  std::ofstream(dir.path / etr::ckpt_format::kManifestName, std::ios::binary | std::ios::trunc)
      << file;
  etr::ckpt::Manifest manifest;
  try {
    manifest = etr::read_manifest(dir.path);
  } catch (const etr::CheckpointError&) {
    return 0;
  }
  if (!etr::check_manifest_sense(manifest).empty()) std::abort();
  uint64_t sum = 0;
  for (const auto& f : manifest.files()) {
    if (__builtin_add_overflow(sum, f.bytes(), &sum)) std::abort();
  }
  if (etr::shard_bytes(manifest) != sum) std::abort();
  // Every extent (each run's first and last when a manifest stands for many: a few bytes
  // of runs may stand for 2^26) inside a listed file.
  uint64_t extents = 0;
  for (const auto& t : manifest.tensors()) extents += etr::extent_count(t);
  const auto inside = [&](const etr::ExtentRef& x, uint64_t esize) {
    if (x.file < 0 || x.file >= manifest.files_size()) std::abort();
    const uint64_t size = manifest.files(x.file).bytes();
    if (x.file_offset > size || x.count * esize > size - x.file_offset) std::abort();
  };
  for (const auto& t : manifest.tensors()) {
    const uint64_t esize = etr::dtype_name_size(t.dtype());
    if (extents <= (uint64_t{1} << 16)) {
      etr::for_each_extent(t, [&](const etr::ExtentRef& x) { inside(x, esize); });
      continue;
    }
    for (const auto& r : t.runs()) {
      inside(etr::extent_of(r, 0), esize);
      inside(etr::extent_of(r, r.more()), esize);
    }
  }
  return 0;
}
