// read_with_peers: a memory-tier restore's reads, each rank reading what its host holds
// and receiving only the byte ranges it needs of the files its host lacks, straight from
// the tmpfs pages of a host that holds them (docs/architecture.md, "The memory tier").
//
// Protocol, collective over the group:
//   1. Each rank splits its reads (CheckpointReader::plan_range) into those of files its
//      host holds and those of files it lacks; the latter go, as (file, offset, bytes)
//      requests, to the file's holder (MPI_Ialltoall of the counts, MPI_Ialltoallv of the
//      requests).
//   2. Each holder maps the files it was asked for (read-only, the whole file) and checks
//      every request against the file's size; one agreement on the errors before any
//      message, so a failure is one sentence on every rank and no message is left posted.
//   3. Every request is sent from the mapping and received into its destination (point-
//      to-point, 64 MiB a message, posted in the same order on both sides); meanwhile
//      each rank reads its own host's files (pread). Then every message is waited for
//      with the communicator timeout.
// Nothing is written to any host's tier: a host holds the files of its ranks and their
// buddies only, as the memory model counts them. The bytes received are not checked
// against the manifest's XXH3 again (only whole files carry one): the holder verified its
// copy when it offered it (checkpoint/memory_restore.h, step 2), and MPI's transport
// carries them intact. Sends come from a read-only mapping of the tmpfs file (shared
// memory and TCP take any pages; an RDMA transport may have to copy them first).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "runtime/group.h"

namespace etr {

// Where each shard file of a memory-tier checkpoint comes from, for one rank.
struct PeerFiles {
  std::vector<int> holder;     // [file]: the rank whose host's intact copy serves others
  std::vector<uint8_t> here;   // [file]: 1 when this rank's host holds an intact copy
};

// What read_with_peers did on this rank.
struct PeerReadResult {
  uint64_t local_bytes = 0;     // read from this host's files
  uint64_t received_bytes = 0;  // received from other hosts
  uint64_t sent_bytes = 0;      // sent to other hosts' ranks
};

// Collective over `group`: makes this rank's `reads` of `reader`'s checkpoint. Returns
// this rank's error sentence ("" when none; the caller agrees on it) and fills `result`.
// Throws CommError when a message does not complete within the communicator timeout
// (its buffers are then left alone: a late peer may still write into `reads`' dests).
std::string read_with_peers(CheckpointReader& reader, const PeerFiles& files,
                            std::span<const ShardRead> reads, const Group& group,
                            PeerReadResult& result);

}  // namespace etr
