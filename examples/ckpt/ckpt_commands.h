// The subcommands of etr-ckpt, one function each (etr_ckpt.cc parses the command line).
// Each prints what it found or did on stdout and returns the exit status; every failure
// is an etr::Error with one sentence, which main() prints and turns into status 1.
//
//   ckpt_inspect.cc   list, show, verify           read only
//   ckpt_manage.cc    restore, rollback, prune     move, copy and delete checkpoints
//   ckpt_convert.cc   reshard, export              write new files from a checkpoint
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/manifest.pb.h"

namespace etr::ckpt_tool {

struct ListOptions {
  std::vector<std::string> dirs;  // directories of checkpoints (tiers)
  bool quick = false;             // no checksum verification
};
int run_list(const ListOptions& o);

int run_show(const std::string& checkpoint);
int run_verify(const std::string& checkpoint);

struct RestoreOptions {
  std::string checkpoint;
  std::string to;  // a directory of checkpoints
};
int run_restore(const RestoreOptions& o);

struct RollbackOptions {
  std::vector<std::string> dirs;
  uint64_t step = 0;
};
int run_rollback(const RollbackOptions& o);

struct PruneOptions {
  std::string dir;
  int keep = 0;
};
int run_prune(const PruneOptions& o);

struct ReshardOptions {
  std::string checkpoint;
  int world = 0;
  int zero = 0;
  int pp = 1;
  std::string out;  // a directory of checkpoints
};
int run_reshard(const ReshardOptions& o);

struct ExportOptions {
  std::string checkpoint;
  std::string out;  // a .safetensors file, or a directory (model.safetensors + config.json)
};
int run_export(const ExportOptions& o);

// Shared by the subcommands.

// `path` must name an existing checkpoint directory: throws IoError when it does not
// exist, CheckpointError for a directory of checkpoints (naming what to pass instead).
// Returns its manifest (read_manifest: checksum, version, extents checked).
ckpt::Manifest open_checkpoint(const std::filesystem::path& path);
// `path` must be an existing directory (IoError); `what` names its role in the message.
void require_directory(const std::filesystem::path& path, const std::string& what);
// read_manifest + verify_files: "" when the checkpoint verifies, else the reason.
std::string verify_checkpoint(const std::filesystem::path& dir);
// "world 3 (dp 3, pp 1, zero 0)".
std::string describe_layout(const ckpt::Layout& layout);

}  // namespace etr::ckpt_tool
