#include "collectives/host_topology.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/env.h"

namespace etr {
namespace {

constexpr const char* kRanksPerNodeVar = "ETR_TEST_RANKS_PER_NODE";

// ETR_TEST_RANKS_PER_NODE, or 0 when unset.
int test_ranks_per_node() {
  const char* v = env_value(kRanksPerNodeVar);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long k = std::strtol(v, &end, 10);
  if (*end != '\0' || k < 1 || k > 1'000'000) {
    throw ConfigError(std::string(kRanksPerNodeVar) + "='" + v +
                      "' is not a positive whole number (ranks per simulated host; unset it "
                      "outside tests)");
  }
  return static_cast<int>(k);
}

// The lowest group rank on this rank's host. Collective over `group`.
int host_leader(const Group& group) {
  if (const int k = test_ranks_per_node()) return group.rank() / k * k;
  MPI_Comm shared = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(group.comm(), MPI_COMM_TYPE_SHARED, group.rank(), MPI_INFO_NULL,
                                &shared));
  const Group local(shared, group.name() + "/shared");
  int leader = group.rank();
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, local.comm()));
  return leader;
}

}  // namespace

int HostTopology::ranks_per_node() const {
  if (node_sizes.empty()) return 0;
  const int first = node_sizes.front();
  for (int s : node_sizes)
    if (s != first) return 0;
  return first;
}

std::string HostTopology::str() const {
  const std::string hosts = std::to_string(nodes) + (nodes == 1 ? " host" : " hosts");
  if (const int l = ranks_per_node()) {
    return hosts + " x " + std::to_string(l) + (l == 1 ? " rank" : " ranks");
  }
  std::string sizes;
  for (int s : node_sizes) sizes += (sizes.empty() ? "" : " + ") + std::to_string(s);
  return hosts + " (" + sizes + " ranks)";
}

HostTopology discover_host_topology(const Group& group) {
  // Every rank learns every rank's host leader, so all derive the same numbering.
  const int mine = host_leader(group);
  std::vector<int> leader(static_cast<size_t>(group.size()));
  MPI_CHECK(MPI_Allgather(&mine, 1, MPI_INT, leader.data(), 1, MPI_INT, group.comm()));
  std::vector<int> leaders = leader;
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());

  HostTopology t;
  t.nodes = static_cast<int>(leaders.size());
  t.node_sizes.assign(leaders.size(), 0);
  for (int r = 0; r < group.size(); ++r) {
    const auto host = std::lower_bound(leaders.begin(), leaders.end(), leader[r]) - leaders.begin();
    if (r == group.rank()) {
      t.node = static_cast<int>(host);
      t.local_rank = t.node_sizes[host];
    }
    ++t.node_sizes[host];
  }
  return t;
}

}  // namespace etr
