#include "checkpoint/manifest.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <system_error>

#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/extent_runs.h"
#include "runtime/error.h"

namespace etr {
namespace fs = std::filesystem;

std::string step_dir_name(uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%09llu", static_cast<unsigned long long>(step));
  return name;
}

std::optional<uint64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view prefix = "step-";
  if (name.size() < prefix.size() + 9 || name.substr(0, prefix.size()) != prefix) return {};
  const std::string_view digits = name.substr(prefix.size());
  uint64_t step = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return {};
  if (step_dir_name(step) != name) return {};  // exactly the canonical spelling
  return step;
}

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name.size() <= 255 && name != "." && name != ".." &&
         name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

size_t dtype_name_size(std::string_view dtype) {
  if (dtype == "f32") return 4;
  if (dtype == "f64") return 8;
  if (dtype == "bf16" || dtype == "f16") return 2;
  return 0;
}

uint64_t shard_bytes(const ckpt::Manifest& manifest) {
  uint64_t total = 0;
  for (const auto& f : manifest.files()) total += f.bytes();
  return total;
}

void write_manifest(const fs::path& dir, const ckpt::Manifest& manifest) {
  ckpt::ManifestFile envelope;
  envelope.set_format_version(ckpt_format::kFormatVersion);
  if (!manifest.SerializeToString(envelope.mutable_manifest())) {
    throw CheckpointError("cannot serialize the manifest of " + dir.string());
  }
  envelope.set_manifest_xxh3(Checksum::of(envelope.manifest().data(), envelope.manifest().size()));
  const std::string bytes = envelope.SerializeAsString();
  write_file_durably(dir / ckpt_format::kManifestName, bytes.data(), bytes.size());
}

ckpt::Manifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / ckpt_format::kManifestName;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw CheckpointError(dir.string() + " has no " + ckpt_format::kManifestName +
                          ": it is not a checkpoint, or its save did not finish");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) throw CheckpointError("cannot read " + path.string());
  return parse_manifest(text.str(), path.string());
}

ckpt::Manifest parse_manifest(const std::string& bytes, const std::string& where) {
  ckpt::ManifestFile envelope;
  if (!envelope.ParseFromString(bytes)) {
    throw CheckpointError(where + " is not a manifest (it does not parse): the file is "
                          "corrupt or truncated");
  }
  if (envelope.format_version() > ckpt_format::kFormatVersion) {
    throw CheckpointError(where + " has format version " +
                          std::to_string(envelope.format_version()) + ", newer than the " +
                          std::to_string(ckpt_format::kFormatVersion) +
                          " this etr reads; use a newer etr");
  }
  if (envelope.format_version() == 0) {
    throw CheckpointError(where + " has no format version: the file is corrupt");
  }
  const std::string& body = envelope.manifest();
  const uint64_t sum = Checksum::of(body.data(), body.size());
  if (sum != envelope.manifest_xxh3()) {
    throw CheckpointError(where + " fails its checksum (XXH3 " + format_checksum(sum) +
                          ", recorded " + format_checksum(envelope.manifest_xxh3()) +
                          "): the manifest is corrupt");
  }
  ckpt::Manifest m;
  if (!m.ParseFromString(body)) {
    throw CheckpointError(where + " passes its checksum but its body does not parse");
  }
  std::string bad;
  if (envelope.format_version() == 1) bad = runs_from_extents(m);  // a record per extent
  if (bad.empty()) bad = check_manifest_sense(m);
  if (!bad.empty()) {
    throw CheckpointError(where + " passes its checksum but does not make sense: " + bad);
  }
  return m;
}

std::string verify_files(const fs::path& dir, const ckpt::Manifest& manifest, int part,
                         int parts) {
  for (int i = part; i < manifest.files_size(); i += parts) {
    const auto& f = manifest.files(i);
    const fs::path path = dir / f.name();
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) return "shard file " + path.string() + " is missing";
    if (size != f.bytes()) {
      return "shard file " + path.string() + " has " + std::to_string(size) +
             " bytes where the manifest records " + std::to_string(f.bytes()) +
             " (truncated or overwritten)";
    }
    uint64_t sum = 0;
    try {
      sum = Checksum::of_file(path);
    } catch (const Error& e) {
      return e.what();
    }
    if (sum != f.xxh3()) {
      return "shard file " + path.string() + " fails its checksum (XXH3 " + format_checksum(sum) +
             ", recorded " + format_checksum(f.xxh3()) + "): its contents are corrupt";
    }
  }
  return "";
}

}  // namespace etr
