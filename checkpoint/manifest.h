// The manifest of a checkpoint directory: reading, writing and checking it
// (checkpoint/manifest.proto is the schema; docs/checkpoint_format.md the whole format).
//
//   ckpt::Manifest m = ...;                      // filled by CheckpointWriter
//   write_manifest(dir, m);                      // manifest.pb, durably (last file)
//   ckpt::Manifest back = read_manifest(dir);    // envelope checksum, version, sanity
//   std::string bad = verify_files(dir, back);   // "" or a sentence naming the file
//
// read_manifest trusts nothing in the file: the envelope's checksum is checked before
// the body is parsed, a newer format version is refused, and a body that passes its
// checksum must still make sense (check_manifest_sense): every shard file name a plain
// name inside the directory (no '/', no ".."), every tensor's extents inside the listed
// files covering the tensor exactly once, sizes and offsets within int64, and a step and
// data position that a schedule can reach and that agree with each other.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "checkpoint/manifest.pb.h"

namespace etr {

namespace ckpt_format {
// The format version this build writes and the newest it reads: 2, the extents as runs
// (checkpoint/extent_runs.h). Version 1 (a record per extent) is read too; its extents
// become runs as it is parsed, so a manifest in memory always holds runs.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr const char* kManifestName = "manifest.pb";
}  // namespace ckpt_format

// "step-000000120": the directory name of the checkpoint after `step` steps.
std::string step_dir_name(uint64_t step);
// The step of a directory name step_dir_name made, or nothing for any other name.
std::optional<uint64_t> parse_step_dir_name(std::string_view name);

// True for a name that stays inside a directory: not empty, no '/', not "." or "..",
// no NUL, at most 255 bytes.
bool is_plain_file_name(std::string_view name);

// Writes `dir`/manifest.pb durably (write, fsync, rename, fsync dir). IoError on failure.
void write_manifest(const std::filesystem::path& dir, const ckpt::Manifest& manifest);

// Reads and checks `dir`/manifest.pb. Throws CheckpointError with a sentence naming the
// file for: no manifest (an unfinished save), a checksum mismatch, a newer format
// version, a body that does not parse, and whatever check_manifest_sense finds.
ckpt::Manifest read_manifest(const std::filesystem::path& dir);

// The same checks on the bytes of a manifest file that came another way (a memory-tier
// restore sends it to the hosts that lack it); `where` names it in the errors.
ckpt::Manifest parse_manifest(const std::string& bytes, const std::string& where);

// The largest step a manifest may record: the trainer computes in int64 and its optimizer
// counts step + 1.
inline constexpr uint64_t kMaxManifestStep = (uint64_t{1} << 63) - 2;

// "" when the decoded manifest makes sense, else one sentence (without the directory)
// naming its first inconsistency: a step past kMaxManifestStep; a schedule step that is
// not the step; a negative batch or layout size; a global batch that disagrees with the
// config's; a data position that is not
//   batch_origin_samples + (step - batch_origin_step) * global_batch
// (checked when the batch policy is recorded) or tokens_seen != samples_seen * seq_len
// (when the config is); a shard file name that is not plain, listed twice, or a size past
// int64 (alone or summed); a tensor of an unlisted state or listed twice, of an unknown
// dtype, of a shape that overflows (> 2^50 elements), or whose extents are out of order,
// outside their file (offset + bytes past its recorded size) or do not cover it once; an
// attachment whose name is not plain or is listed twice.
// A pure function of `manifest` (the shard files' real sizes are verify_files's business).
std::string check_manifest_sense(const ckpt::Manifest& manifest);

// Checks the size and XXH3 checksum of the shard files i with i % parts == part (all by
// default). Returns "" when they match, else one sentence naming the first bad file.
std::string verify_files(const std::filesystem::path& dir, const ckpt::Manifest& manifest,
                         int part = 0, int parts = 1);

// Bytes of the shard files listed in the manifest.
uint64_t shard_bytes(const ckpt::Manifest& manifest);

// Bytes per element of a manifest dtype name ("f32" -> 4); 0 for an unknown name.
size_t dtype_name_size(std::string_view dtype);

}  // namespace etr
