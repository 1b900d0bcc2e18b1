// BenchContext: what every etr-bench subcommand runs in: the World, rank-0 output, the
// description of the machine, and small collective helpers (max over ranks, agreeing on
// an error so that every rank leaves together instead of some hanging in a collective).
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/premise.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/median.h"
#include "runtime/world.h"

namespace etr::bench {

// Thrown by every rank at once, after the ranks agreed on it (BenchContext::agree): main()
// prints it on rank 0 only and every rank exits with 1, without MPI_Abort.
class AgreedError : public Error {
 public:
  using Error::Error;
};

// The machine as the job sees it; gathered collectively once.
struct MachineInfo {
  std::vector<std::string> hostnames;  // [world size], rank order
  std::vector<std::string> cpus;       // [world size], each rank's allowed CPUs ("0", "0-1")
  std::string cpu_model;               // /proc/cpuinfo "model name" of rank 0
  int cpus_online = 0;                 // on rank 0's host
  std::string mpi_library;             // first line of MPI_Get_library_version

  // "2 ranks on 1 host (h: ranks 0-1)"
  std::string placement() const;
  nlohmann::json to_json() const;
};

class BenchContext {
 public:
  explicit BenchContext(World& world);

  World& world() const { return world_; }
  int rank() const { return world_.rank(); }
  int size() const { return world_.size(); }
  bool is_root() const { return world_.rank() == 0; }
  const MachineInfo& machine() const { return machine_; }

  // Writes `text` to stdout on rank 0 (flushed at once); other ranks do nothing.
  void print(const std::string& text) const;
  void barrier() const { world_.barrier(); }
  // A barrier that waits without spinning (MPI_Ibarrier, polled every millisecond): a
  // rank that waits must leave the cores to the ranks, or the threads, still working.
  void sleeping_barrier() const;
  // Element-wise maximum over ranks, in place.
  void max_over_ranks(double* values, int n) const;
  double max_over_ranks(double value) const;

  // Collective: every rank's measurement of a row, in rank order, on every rank.
  std::vector<CpuUse> gather_cpu_use(const CpuUse& mine) const;
  // Collective: the verdict on a row every rank ran (ranks_premise_failure over every
  // rank's `mine`); the same on every rank.
  std::string premise_failure_of_ranks(const Premise& p, const CpuUse& mine) const;
  // Collective, before a benchmark runs: throws AgreedError naming `what` when a rank's
  // affinity cannot bear out `p` or the ranks of a host share CPUs they claim each.
  void require_own_cores(const std::string& what, const Premise& p) const;

  // Collective. Every rank passes its own error ("" when fine). When any rank has one,
  // every rank throws AgreedError with the message of the lowest such rank.
  void agree(const std::string& local_error) const;

  // Collective. Rank 0 writes `doc` to `path` (through path.tmp and a rename); when that
  // fails every rank throws AgreedError.
  void write_json(const std::string& path, const nlohmann::json& doc) const;

 private:
  World& world_;
  MachineInfo machine_;
};

// Thrown by every rank at the end of a benchmark that refused `rows` of its figures
// (premise.h): etr-bench prints why and exits 1.
[[noreturn]] void throw_refused(int rows);

// Median of `values` (mean of the middle two for an even count); 0 for none.
using ::etr::median;  // runtime/median.h

// Wall seconds since `t0` (std::chrono::steady_clock).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// User + system CPU time of this process so far, all its threads, in seconds.
double process_cpu_seconds();

// The training config of a benchmark: the user's --config file when `config_path` is set,
// else `model_and_batch` (text format: the model and batch sections) plus what every
// training benchmark shares: a schedule that never ends within the run, the synthetic
// corpus, quiet logs, `threads` compute threads per rank (0: the default). Then
// `overrides`. Unresolved; `source` names the built-in text in errors.
TrainConfig bench_train_config(std::string_view model_and_batch, int threads,
                               std::string_view source, const std::string& config_path,
                               const std::vector<std::string>& overrides);

}  // namespace etr::bench
