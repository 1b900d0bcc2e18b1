// find_memory_resumable: the newest complete checkpoint of the memory tier that the
// ranks of this launch can read from their hosts' memory (docs/architecture.md,
// "Checkpoints"; the tier is written by CheckpointWriter with CheckpointTier::per_host).
//
// Protocol, collective over the group (world W now; hosts as checkpoint/buddy_link.h):
//   1. Every rank lists its host's tier directory: the newest kMaxListed step-N/ whose
//      manifest reads (checksum, version, sense); the lists are all-gathered.
//   2. For each listed step, newest first: each host's leader checks the shard files of
//      the step its host holds (size and XXH3 against the manifest) and offers each intact
//      one as (buddy copy ? 1 : 0) x W + rank; the MIN over the ranks picks, for every
//      file, a holder that wrote it itself when there is one. A step some file of which
//      has no intact copy on any host of this launch is skipped, its reason logged.
//   3. For the chosen step, every rank learns which files its host holds intact (the
//      leaders' offers, all-gathered) and the holder of each; the manifest is read on
//      each host that has it and sent from the holder of file 0 to the others (checked
//      like a file's: parse_manifest). Nothing is copied between hosts here: the restore
//      reads its own host's files and receives only the byte ranges it needs of the
//      others from their holders (read_with_peers, checkpoint/peer_read.h), so no host's
//      tier ever holds more than its ranks' and their buddies' files.
// The tier it restores from is "memory-local" when every file was its writer's own copy,
// "memory-buddy" when one came from a buddy copy (its host lost, or its copy corrupt).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.pb.h"
#include "checkpoint/peer_read.h"
#include "runtime/group.h"
#include "runtime/log.h"

namespace etr {

struct MemoryResume {
  std::filesystem::path dir;  // root/step-N: on this host, the files `files.here` marks
  uint64_t step = 0;
  std::string tier;  // "memory-local" or "memory-buddy"
  PeerFiles files;   // where this rank reads each file from (read_with_peers)
  ckpt::Manifest manifest;
};

// Collective over `group`. Nothing when no step is complete on the hosts of the group,
// with `why_not` the reason (one sentence). A manifest that cannot be sent or does not
// check out throws CheckpointError on every rank.
std::optional<MemoryResume> find_memory_resumable(const std::filesystem::path& root,
                                                  const Group& group, Logger& log,
                                                  std::string& why_not);

// Deletes the checkpoints (complete or partial) of the memory tier's directory `root` on
// this host, and its recycled files: a fresh start must never resume from an earlier
// run's copy.
void clear_memory_tier(const std::filesystem::path& root);

// Retention of the memory tier on this host (prune_checkpoints, checkpoint/catalog.h),
// except that the shard files of the newest checkpoint it drops are kept in
// root/.recycle/ (the previous ones there deleted): the next save writes over their tmpfs
// pages (recycled_shard) instead of faulting in fresh ones. Returns what it deleted.
std::vector<std::filesystem::path> prune_memory_tier(const std::filesystem::path& root, int keep);
// The recycled file to write a shard file of that name over: the one of that name, else
// (the world size changed, and the names with it) the largest one there, else the path
// one of that name would have (which does not exist). Another rank of the host may take
// the same file first: its rename fails and a fresh file is made (DurableFile).
std::filesystem::path recycled_shard(const std::filesystem::path& root, const std::string& name);

}  // namespace etr
