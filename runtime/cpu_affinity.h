// Where helper threads run: the CPUs of a node that none of a job's ranks is bound to.
//
//   const CpuList spare = spare_node_cpus(group);   // collective over `group`
//   std::thread([&] { bind_this_thread(spare); ... });
//
// A background thread that shares its rank's core (mpirun --bind-to core) takes CPU from
// that rank's training; on a node with cores that no rank of the job is bound to (a GPU
// node has many; so has a CPU node running fewer ranks than cores) it can run there
// instead. Ranks that are not bound (their affinity is every CPU of the node) leave no
// spare CPU: the scheduler places such threads itself.
#pragma once

#include <string>
#include <vector>

#include "runtime/group.h"

namespace etr {

using CpuList = std::vector<int>;  // CPU numbers, ascending

// The calling thread's affinity (for a thread that has not changed its own: the
// process's, which is what mpirun's binding sets).
CpuList this_thread_cpus();
// The node's CPUs this process may use: the online ones its cgroup allows (whatever
// the calling thread's own affinity).
CpuList node_cpus();
// Collective over `group`: the CPUs of this rank's node that no rank of `group` on the
// node may run on (the node's CPUs minus the union of the ranks' affinities). Empty when
// every CPU is taken, or when a rank on the node is not bound.
CpuList spare_node_cpus(const Group& group);
// Collective over `group`: how many of its ranks run on this rank's node. Here and above,
// a node is a running kernel (its boot id) and cgroup namespace (a container's limits):
// ranks in network namespaces of one machine (simulated hosts, tests/cluster) share its
// CPUs and memory, so they count as one node, although MPI_COMM_TYPE_SHARED (World's
// local group) and the hierarchical allreduce see hosts of their own.
int ranks_on_this_node(const Group& group);
// Collective over `group`: this rank's place among them (0 .. ranks_on_this_node - 1),
// what picks its GPU (runtime.device).
int rank_on_this_node(const Group& group);
// Restricts the calling thread to `cpus`; false (the affinity unchanged) when `cpus` is
// empty or the system refuses it (a CPU outside this process's cgroup, say).
bool bind_this_thread(const CpuList& cpus);
// "0-3,6" for a log line; "none" when empty.
std::string format_cpus(const CpuList& cpus);

}  // namespace etr
