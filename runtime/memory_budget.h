// The host memory a process may really use, and the memory cgroup that bounds it.
//
// A job under a container or a batch system is limited by its memory cgroup, not by the
// machine's free memory: past the cgroup's limit the kernel's OOM killer ends a rank
// (SIGKILL, no message). MemoryBudget turns the cgroup's limit into a budget for the
// process's allocator, and takes the smallest of that, runtime.memory_budget and
// ETR_HOST_MEMORY_BUDGET:
//
//   MemoryBudget budget(config.runtime().memory_budget(), ranks_on_this_node);
//   MemoryBudget::Reading r = budget.read(allocator.stats().reserved);  // every step
//   allocator.set_budget(r.bytes);   // r.describe(): which source bound it, and how
//
// Both cgroup versions are read: v2 (the "0::/path" line of /proc/self/cgroup; memory.max,
// memory.current, memory.events) and v1 (the "N:memory:/path" line; memory.limit_in_bytes,
// memory.usage_in_bytes, memory.oom_control). v2 is used when the process's v2 directory
// has memory.max, else v1's memory controller (a hybrid machine mounts v2 without it).
// A v2 process in the root cgroup (no memory.max there) counts as having none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace etr {

// Where a process's memory cgroup keeps its files: found once, read as often as needed.
struct CgroupPaths {
  int version = 0;  // 1 or 2
  std::string dir;  // the process's cgroup, e.g. /sys/fs/cgroup/memory/a/b
  // The limit files of dir and of each ancestor up to the mount point, hard (memory.max,
  // memory.limit_in_bytes) then soft (memory.high, memory.soft_limit_in_bytes): the
  // smallest limit among them bounds the process.
  std::vector<std::string> limit_files;
  std::string usage_file;  // memory.current (v2), memory.usage_in_bytes (v1)
  std::string oom_file;    // memory.events (v2), memory.oom_control (v1): "oom_kill N"
};

// One reading of a memory cgroup.
struct CgroupMemory {
  int version = 0;
  std::string dir;
  std::optional<size_t> limit;  // nullopt: no limit ("max" in v2, a huge value in v1)
  size_t usage = 0;             // bytes charged to the cgroup now
  uint64_t oom_kills = 0;       // processes of the cgroup the OOM killer has ended
};

// The memory cgroup of a process described by the texts of /proc/self/cgroup and
// /proc/self/mountinfo, its mount points taken as under `root` ("" for the real files, a
// temporary directory in tests); nullopt when no memory cgroup is mounted or found.
std::optional<CgroupPaths> find_memory_cgroup(std::string_view proc_self_cgroup,
                                              std::string_view mountinfo,
                                              const std::string& root = "");
// This process's memory cgroup (nullopt: none).
std::optional<CgroupPaths> find_memory_cgroup();

// The positive byte count `value` of the setting `name` (runtime.memory_budget,
// ETR_HOST_MEMORY_BUDGET, ETR_CUDA_MEMORY_BUDGET), or nullopt for ""; ConfigError naming
// the setting for anything else, 0 included.
std::optional<size_t> budget_setting(const std::string& value, const char* name);

// The files of `paths` now: a few small reads, no throw (a file that cannot be read counts
// as no limit, no usage, no kill).
CgroupMemory read_cgroup_memory(const CgroupPaths& paths);
// find_memory_cgroup(...) and its reading.
std::optional<CgroupMemory> read_cgroup_memory(std::string_view proc_self_cgroup,
                                               std::string_view mountinfo, const std::string& root);
// This process's memory cgroup now; nullopt when it has none.
std::optional<CgroupMemory> read_cgroup_memory();

// Bytes this process has resident (/proc/self/statm's second field times the page size);
// 0 when it cannot be read.
size_t resident_bytes(const std::string& statm = "/proc/self/statm");
// The most bytes this process has had resident since it started or since the last
// reset_peak_resident() (the kernel's VmHWM, /proc/self/status); 0 when it cannot be read.
size_t peak_resident_bytes(const std::string& status = "/proc/self/status");
// Sets the kernel's peak resident count to what is resident now (writes 5 to
// /proc/self/clear_refs); false where the kernel does not allow it.
bool reset_peak_resident();

// The budget of one process's host allocator (class comment at the top of the file).
class MemoryBudget {
 public:
  enum class Source { kConfig, kEnvironment, kCgroup, kAvailable };

  struct Reading {
    size_t bytes = 0;  // may be 0: the cgroup's share is used up outside the allocator
    Source source = Source::kAvailable;
    // How the cgroup's share was made (source kCgroup).
    int cgroup_version = 0;
    // The file that bound it: memory.max or memory.high (v2), memory.limit_in_bytes or
    // memory.soft_limit_in_bytes (v1). The soft ones are how a scheduler asks a job to
    // shrink without the kernel's OOM killer: etr re-plans under them at the next step.
    std::string cgroup_file;
    size_t cgroup_limit = 0;
    int local_ranks = 1;
    size_t outside = 0;  // resident bytes not reserved by the allocator
    // "cgroup v1 memory.limit_in_bytes 3 GiB / 2 ranks, less 120 MiB outside the
    // allocator", "runtime.memory_budget 8 GiB", ...
    std::string describe() const;
  };

  // What the budget is made of; the constructor below fills it from this machine.
  struct Inputs {
    std::string config;                 // runtime.memory_budget ("": none)
    std::string environment;            // ETR_HOST_MEMORY_BUDGET ("": none)
    std::optional<CgroupPaths> cgroup;  // its limit is re-read by every read()
    size_t available = 0;               // the machine's available memory, when nothing else
    int local_ranks = 1;                // ranks of this node that share the cgroup
    std::string statm = "/proc/self/statm";
  };

  // From the config's runtime.memory_budget, ETR_HOST_MEMORY_BUDGET, this process's
  // memory cgroup and host_available_memory(). Throws ConfigError naming a setting that is
  // not a positive byte count, or local_ranks below 1.
  MemoryBudget(const std::string& config_value, int local_ranks);
  explicit MemoryBudget(Inputs inputs);

  // The budget now for an allocator holding `allocator_reserved` bytes: the smallest of
  // the config's, the environment's and the cgroup's share (limit / local_ranks, less the
  // resident memory the allocator does not hold: the binary, MPI, libraries, data); the
  // available memory at construction when none of them is set. A few small file reads.
  Reading read(size_t allocator_reserved) const;

  const std::optional<CgroupPaths>& cgroup() const { return inputs_.cgroup; }

 private:
  Inputs inputs_;
  std::optional<size_t> config_bytes_, env_bytes_;
};

const char* to_string(MemoryBudget::Source source);

}  // namespace etr
