// BuddyLink: which host each rank of a group runs on, and the buddy that keeps a copy of
// a rank's memory-tier shard on another host (docs/architecture.md, "Checkpoints").
//
// Protocol:
//   - Made collectively: every rank's host name (gethostname: a simulated host's UTS
//     name) is all-gathered; hosts are numbered by their lowest rank, a rank's local index
//     is its position among its host's ranks, and a host's leader is its lowest rank.
//   - The buddy of rank r (host h, local index i) is the rank at local index i mod n on
//     host h + 1 mod H (n: that host's ranks). With one host there is none: a copy on the
//     same host dies with it.
//   - exchange() runs on the writer thread of an async save (MPI_THREAD_MULTIPLE), on a
//     communicator of its own: r sends its shard to buddy(r) and receives the shards of
//     the ranks whose buddy it is (nonblocking point-to-point, 64 MiB a message, tag =
//     the piece's number), each wait bounded by the communicator timeout; it writes each
//     received shard into its host's partial checkpoint directory under the sender's file
//     name, beside an empty "<name>.buddy" marker (a restore prefers a host's own copy,
//     and names the tier it restored from by the marker).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/durable_file.h"
#include "checkpoint/mapping_cache.h"
#include "checkpoint/shard_plan.h"
#include "runtime/group.h"

namespace etr {

// The suffix of a buddy copy's marker file.
inline constexpr const char* kBuddyMarkerSuffix = ".buddy";

// Collective over `group`: every rank's host, numbered by the host's lowest rank, and
// (when `names` is given) each host's name.
std::vector<int> gather_hosts(const Group& group, std::vector<std::string>* names = nullptr);
// Every rank's buddy, given every rank's host (gather_hosts); all -1 with one host.
std::vector<int> buddy_ranks(const std::vector<int>& host_of);

class BuddyLink {
 public:
  // Collective over `group`; duplicates its communicator for the shards' messages.
  explicit BuddyLink(const Group& group);
  ~BuddyLink();

  int hosts() const { return static_cast<int>(host_names_.size()); }
  // Rank r's host, 0..hosts()-1.
  int host_of(int rank) const { return host_of_[static_cast<size_t>(rank)]; }
  const std::string& host_name(int host) const { return host_names_[static_cast<size_t>(host)]; }
  // The lowest rank of this rank's host writes the host's directories and manifests.
  bool host_leader() const { return leader_; }
  // This rank's buddy (-1: one host, no buddy) and the ranks whose buddy it is.
  int buddy() const { return buddy_; }
  const std::vector<int>& senders() const { return senders_; }

  // The writer thread: `mine` (this rank's shard of `plan`) to buddy(), the senders'
  // shards into `dir` (this host's partial directory). "" or why not.
  std::string exchange(std::span<const char> mine, const ShardPlan& plan,
                       const std::filesystem::path& dir);

 private:
  Group comm_;
  std::vector<std::string> host_names_;  // [hosts]
  std::vector<int> host_of_;             // [group size]
  bool leader_ = false;
  int buddy_ = -1;
  std::vector<int> senders_;
  // [senders]: the files being received into (mapped), kept until the next exchange; a
  // sender whose file cannot be made is received into received_ (and dropped).
  std::vector<std::unique_ptr<DurableFile>> incoming_;
  std::vector<std::vector<char>> received_;
  MappingCache mappings_;  // the received files, mapped between saves
};

}  // namespace etr
