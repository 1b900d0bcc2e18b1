// CommOptions: every tunable of the collectives in one place (CONTRIBUTING.md, style 10):
// the `comm` section of the config (runtime/config/etr_config.proto, CommConfig), each field
// overridable by an environment variable through the settings registry
// (runtime/config/settings.h):
//
//   ETR_COMM_TIMEOUT_S          seconds before a stuck collective fails (default 300)
//   ETR_ALLREDUCE_ALGO          auto | ring | rd (recursive doubling) | hier (hierarchical:
//                               within each host, then across hosts; the ring when the
//                               hosts hold unequal numbers of ranks or there is one host)
//                               | mpi (default auto)
//   ETR_ALLREDUCE_SMALL_BYTES   auto uses recursive doubling below this size times (n-1),
//                               above it hier when the ranks span >= 2 hosts with the
//                               same number >= 2 on each, else the ring (default 16KiB;
//                               see choose_allreduce)
//   ETR_RING_CHUNK_BYTES        pipelining unit of the ring algorithms (default 256KiB)
//   ETR_RING_DEPTH              chunks in flight per direction (default 4)
//   ETR_INLINE_BYTES            ops up to this size run on the caller's thread when the
//                               engine is idle, saving two thread hand-offs (default 64KiB;
//                               0 turns it off)
//   ETR_SPIN_POLLS              polls a waiting rank spins before it yields the core
//                               (default: 4096, about 1 ms; 16 when this node runs more
//                               ranks than it has cores, where spinning starves the peer)
//   ETR_YIELD_POLLS             polls a waiting rank then spends yielding (sched_yield)
//                               before it sleeps 50 us between polls (default 8192, about
//                               10 ms). A communicator that runs beside compute on the same
//                               cores (the data-parallel gradient buckets) sets 0: yielding
//                               takes the core back at once, sleeping leaves it to compute
//   ETR_MAX_IDLE_SLEEP_US       the sleeps between polls double from 50 us up to this
//                               (default 50: no backoff)
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "runtime/config/etr_config.pb.h"

namespace etr {

enum class AllreduceAlgo { kAuto, kRing, kRecursiveDoubling, kHierarchical, kMpi };

AllreduceAlgo parse_allreduce_algo(const std::string& name);
const char* allreduce_algo_name(AllreduceAlgo algo);

struct CommOptions {
  std::chrono::milliseconds timeout{300'000};
  // Learned deadlines (learned_deadline.h): a multiple of each operation class's 99th
  // percentile (0: the fixed timeout only), never below the floor.
  double learned_timeout_multiple = 10;
  std::chrono::milliseconds learned_timeout_floor{30'000};
  AllreduceAlgo allreduce_algo = AllreduceAlgo::kAuto;
  size_t small_bytes = 16 << 10;
  size_t chunk_bytes = 256 << 10;
  int depth = 4;
  size_t inline_bytes = 64 << 10;
  int spin_polls = -1;  // -1: decided from ranks per core (HostCommunicator)
  int yield_polls = -1;  // -1: OpContext::kDefaultYieldPolls
  std::chrono::microseconds max_idle_sleep{-1};  // negative: IdlePolicy's default (50 us)
  // comm.device_backend: "auto", "nccl" or "staged" (ranks on GPUs; the engines decide).
  std::string device_backend = "auto";

  // From a resolved config's comm section (ConfigError on values resolve() would refuse).
  static CommOptions from_config(const config::CommConfig& comm);
  // The defaults overridden by the ETR_* variables above, through the settings registry
  // (programs without a config file); ConfigError naming the variable on a bad value.
  static CommOptions from_env();
  // One line listing the effective values, for the start-up log.
  std::string str() const;
};

}  // namespace etr
