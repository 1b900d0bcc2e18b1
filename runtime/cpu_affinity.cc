#include "runtime/cpu_affinity.h"

#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/mpi_check.h"
#include "runtime/control_ops.h"

namespace etr {
namespace {

CpuList from_set(const cpu_set_t& set) {
  CpuList out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

// What identifies the CPUs and memory this rank shares with others: the running kernel
// (its boot id; the hostname where /proc does not have it) and its cgroup namespace (a
// container of its own, e.g. a Kubernetes pod or a Docker container with cgroup v2, has
// its own limits even on a shared kernel), hashed.
uint64_t machine_id() {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  if (!(boot >> id) || id.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    id = std::string("host:") + host;
  }
  struct stat ns;
  if (stat("/proc/self/ns/cgroup", &ns) == 0) id += ":cgroupns:" + std::to_string(ns.st_ino);
  return XXH3_64bits(id.data(), id.size());
}

// The ranks of `group` on this rank's node (the caller frees it). Collective. A node is
// a kernel and cgroup namespace, whose CPUs and memory its ranks share: ranks in network
// namespaces of one machine (tests/cluster's simulated hosts), which MPI counts as nodes
// of their own (MPI_COMM_TYPE_SHARED), are on one node here.
MPI_Comm node_communicator(const Group& group) {
  const uint64_t mine = machine_id();
  std::vector<uint64_t> all(static_cast<size_t>(group.size()));
  control::allgather(&mine, 1, MPI_UINT64_T, all.data(), group.comm(), "the ranks' machines (cpu_affinity)");
  const int color = static_cast<int>(std::find(all.begin(), all.end(), mine) - all.begin());
  return control::split(group.comm(), color, group.rank(), "the ranks of this machine (cpu_affinity)");
}

}  // namespace

CpuList this_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return node_cpus();
  return from_set(set);
}

CpuList node_cpus() {
  // A thread asking for every online CPU gets the ones its cgroup allows (the kernel
  // drops the rest); a short-lived one, so that the caller's affinity is untouched.
  const int online = std::clamp(get_nprocs(), 1, CPU_SETSIZE);
  CpuList out;
  std::thread([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c = 0; c < online; ++c) CPU_SET(c, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0 &&
        pthread_getaffinity_np(pthread_self(), sizeof set, &set) == 0) {
      out = from_set(set);
    }
  }).join();
  if (out.empty()) {
    for (int c = 0; c < online; ++c) out.push_back(c);
  }
  return out;
}

int ranks_on_this_node(const Group& group) {
  MPI_Comm local = node_communicator(group);
  int size = 1;
  MPI_CHECK(MPI_Comm_size(local, &size));
  MPI_CHECK(MPI_Comm_free(&local));
  return size;
}

int rank_on_this_node(const Group& group) {
  MPI_Comm local = node_communicator(group);
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(local, &rank));
  MPI_CHECK(MPI_Comm_free(&local));
  return rank;
}

CpuList spare_node_cpus(const Group& group) {
  MPI_Comm local = node_communicator(group);
  int local_size = 1;
  MPI_CHECK(MPI_Comm_size(local, &local_size));
  // Each rank's affinity as a cpu_set_t's bytes; the union is what the ranks may use.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int c : this_thread_cpus()) CPU_SET(c, &mine);
  std::vector<cpu_set_t> all(static_cast<size_t>(local_size));
  control::allgather(&mine, sizeof mine, MPI_BYTE, all.data(), local, "the ranks' CPUs (cpu_affinity)");
  MPI_CHECK(MPI_Comm_free(&local));
  cpu_set_t used;
  CPU_ZERO(&used);
  for (cpu_set_t& s : all) CPU_OR(&used, &used, &s);
  CpuList spare;
  for (int c : node_cpus()) {
    if (!CPU_ISSET(c, &used)) spare.push_back(c);
  }
  return spare;
}

bool bind_this_thread(const CpuList& cpus) {
  if (cpus.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

std::string format_cpus(const CpuList& cpus) {
  if (cpus.empty()) return "none";
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out.append("-").append(std::to_string(cpus[j]));
    i = j + 1;
  }
  return out;
}

}  // namespace etr
