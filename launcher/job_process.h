// Starting one launch of the job: mpirun with the job's environment, its stderr into a
// pipe that etr-run reads (and passes on) while it watches the job (elastic_driver.cc).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace etr::launcher {

// hwloc's discovery without PCI devices and the I/O objects behind them. Open MPI's
// mpirun and each host's daemon (orted) load the host's topology at every launch, and
// hwloc reads every PCI device's configuration space to find them: on a virtual machine,
// ~14 % of a bare MPI program's start-up CPU time, 55-65 ms of a relaunch on hosts held to
// 0.6 CPU. Open MPI places and binds ranks by cores, caches and NUMA nodes, which hwloc
// still finds; NCCL and etr find GPUs and NICs themselves.
inline constexpr const char* kHwlocComponents = "-linux:pci,-linux:io,-pci";

// `vars` (the launch's ETR_RUN_* variables), plus the spin limits etr-run's environment
// lacks (runtime/omp_env.h: missing_spin_limits) and HWLOC_COMPONENTS=kHwlocComponents
// where it has none (the launch shim passes HWLOC_COMPONENTS on to each remote daemon:
// launch_shim.h), and `forward`: the names mpirun must pass to every
// rank, `vars`' and every ETR_*, OMP_*, GOMP_SPINCOUNT, OPENBLAS_NUM_THREADS,
// OPENBLAS_THREAD_TIMEOUT and HWLOC_COMPONENTS variable of etr-run's own environment.
struct JobEnvironment {
  std::map<std::string, std::string> vars;
  std::vector<std::string> forward;
};
JobEnvironment job_environment(std::map<std::string, std::string> vars);

struct JobProcess {
  pid_t pid = -1;
  int stderr_fd = -1;  // the read end of the job's stderr (the caller closes it)
};

// Forks and executes argv[0] (PATH searched) with `vars` set, SIGINT and SIGTERM at their
// defaults, SIGTTOU ignored, in a process group of its own that etr-run's death ends
// (SIGTERM), stdin from /dev/null and its stderr into a pipe. IoError when the pipe or
// the fork fails; a program that cannot be executed writes one line to the pipe and
// exits 127.
JobProcess start_job(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& vars);

}  // namespace etr::launcher
