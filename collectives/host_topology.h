// HostTopology: how a group's ranks sit on hosts (nodes), for the hierarchical
// allreduce (collectives/hierarchical.h).
//
// Hosts are found with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) on the group. They are
// numbered by their lowest group rank; a rank's local index is its position among its
// host's ranks in group order.
//
// Test hook: ETR_TEST_RANKS_PER_NODE=K treats consecutive blocks of K group ranks as
// hosts instead (the last block may be shorter), so that one machine can exercise the
// hierarchical algorithm (np 4, K 2: 2 hosts x 2 ranks). Not a setting: never set it
// in a real job.
#pragma once

#include <string>
#include <vector>

#include "runtime/group.h"

namespace etr {

struct HostTopology {
  int nodes = 1;                // hosts the group spans
  int node = 0;                 // this rank's host, 0..nodes-1
  int local_rank = 0;           // this rank's index among its host's ranks
  std::vector<int> node_sizes;  // [nodes]: ranks on each host

  // Ranks on every host when all hosts hold the same number, else 0.
  int ranks_per_node() const;
  // The hierarchical allreduce needs >= 2 hosts with the same number of ranks each.
  bool hierarchical_possible() const { return nodes > 1 && ranks_per_node() > 0; }
  // "2 hosts x 2 ranks", "2 hosts (3 + 1 ranks)", "1 host x 4 ranks".
  std::string str() const;
};

// Collective over `group`. Throws ConfigError when ETR_TEST_RANKS_PER_NODE is set but is
// not a positive whole number.
HostTopology discover_host_topology(const Group& group);

}  // namespace etr
