#include "runtime/env.h"

#include <cstdlib>

#include "runtime/error.h"
#include "runtime/error_text.h"

namespace etr {
namespace {

using K = EnvKind;

constexpr EnvVar kVars[] = {
    {"ETR_COMM_TIMEOUT_S", K::kSetting, "comm.timeout_s"},
    {"ETR_COMM_LEARNED_TIMEOUT_MULTIPLE", K::kSetting, "comm.learned_timeout_multiple"},
    {"ETR_COMM_LEARNED_TIMEOUT_FLOOR_S", K::kSetting, "comm.learned_timeout_floor_s"},
    {"ETR_ALLREDUCE_ALGO", K::kSetting, "comm.allreduce_algo"},
    {"ETR_ALLREDUCE_SMALL_BYTES", K::kSetting, "comm.allreduce_small_bytes"},
    {"ETR_RING_CHUNK_BYTES", K::kSetting, "comm.ring_chunk_bytes"},
    {"ETR_RING_DEPTH", K::kSetting, "comm.ring_depth"},
    {"ETR_INLINE_BYTES", K::kSetting, "comm.inline_bytes"},
    {"ETR_SPIN_POLLS", K::kSetting, "comm.spin_polls"},
    {"ETR_YIELD_POLLS", K::kSetting, "comm.yield_polls"},
    {"ETR_MAX_IDLE_SLEEP_US", K::kSetting, "comm.max_idle_sleep_us"},
    {"ETR_DEVICE_BACKEND", K::kSetting, "comm.device_backend"},
    {"ETR_HOST_MEMORY_BUDGET", K::kBudget, "byte budget of the host allocator"},
    {"ETR_CUDA_MEMORY_BUDGET", K::kBudget, "byte budget of the CUDA allocator"},
    {"ETR_FLASH_ATTENTION", K::kSetting, "0: the bf16 attention stores the probabilities"},
    {"ETR_LOG_LEVEL", K::kLog, "debug, info, warn, error, off"},
    {"ETR_MPI_IFACE", K::kLauncher, "the network for MPI's TCP traffic between hosts"},
    {EnvNames::kRunDir, K::kLauncher, "etr-run's directory of this run (events, blame)"},
    {EnvNames::kRunRestart, K::kLauncher, "the launch's number (0 first)"},
    {EnvNames::kRunReason, K::kLauncher, "why etr-run launched again"},
    {EnvNames::kRunPrevNp, K::kLauncher, "the previous launch's world size"},
    {EnvNames::kRunLastStep, K::kLauncher, "the step of the newest checkpoint"},
    {EnvNames::kRunEventMs, K::kLauncher, "when the event behind the launch happened"},
    {EnvNames::kRunHosts, K::kLauncher, "the launch's hosts and slots"},
    {EnvNames::kRunCheckpointDir, K::kLauncher, "etr-run's --checkpoint-dir"},
    {EnvNames::kRunMemoryHalvings, K::kLauncher, "times the micro-batch is halved after OOM kills"},
    {EnvNames::kRunHeartbeat, K::kLauncher, "where each rank sends its heartbeat (address:port)"},
    {"ETR_FAIL_AT_STEP", K::kTest, "S[:R]: rank R throws at step S"},
    {"ETR_TEST_HANG_AT_STEP", K::kTest, "S[:R]: rank R hangs at step S (a launch's first only)"},
    {"ETR_NONFINITE_AT_STEP", K::kTest, "S[:R]: a NaN in rank R's gradients at step S"},
    {"ETR_OOM_IN_BACKWARD_AT_STEP", K::kTest, "S[:R]: out of memory inside step S's backward"},
    {"ETR_TEST_FAIL_ALLOCATION", K::kTest, "S:N[:R]: the N-th allocation of step S fails"},
    {"ETR_TEST_BUDGET_CUT", K::kTest, "S:BYTES[:R]: the budget drops inside step S"},
    {"ETR_TEST_BUDGET_CUT_MODE", K::kTest, "boundary: the cut before step S's check"},
    {"ETR_TEST_HOST_DEVICE_ENGINE", K::kTest, "1: the GPU's paths on host memory"},
    {"ETR_TEST_RANKS_PER_NODE", K::kTest, "K: blocks of K ranks count as one host"},
    {"ETR_SLOW_RANK", K::kTest, "R:F: rank R runs F times slower"},
    {"ETR_TEST_STOP_AT", K::kTest, "WORD:R: rank R stops (SIGSTOP) at the control collective named WORD"},
    {"OPENBLAS_CORETYPE", K::kSystem, "OpenBLAS's kernels (set when it misdetects the CPU)"},
    {"GOMP_SPINCOUNT", K::kSystem, "libgomp's spinning before a thread sleeps"},
    {"OPENBLAS_THREAD_TIMEOUT", K::kSystem, "OpenBLAS's spinning before a thread sleeps (2^N cycles)"},
    {"HWLOC_COMPONENTS", K::kSystem, "hwloc's discovery (etr-run's launches: no PCI devices)"},
    {"OMP_WAIT_POLICY", K::kSystem, "OpenMP's waiting policy"},
    {"TMPDIR", K::kSystem, "where etr-run puts its run directory by default"},
    {"PATH", K::kSystem, "where etr-run finds mpirun"},
    {"SLURM_JOB_ID", K::kSystem, "inside a Slurm allocation: etr-run launches job steps (srun)"},
    {"SLURM_JOB_NODELIST", K::kSystem, "the Slurm allocation's nodes at its start"},
    {"SLURM_TASKS_PER_NODE", K::kSystem, "the ranks a Slurm allocation gives each node"},
    {"SLURM_JOB_CPUS_PER_NODE", K::kSystem, "a Slurm allocation's CPUs per node"},
};

}  // namespace

std::span<const EnvVar> env_vars() { return kVars; }

const EnvVar* find_env_var(std::string_view name) {
  for (const EnvVar& v : kVars) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

std::string_view env_kind_name(EnvKind kind) {
  switch (kind) {
    case K::kSetting: return "setting";
    case K::kBudget: return "budget";
    case K::kLauncher: return "launcher";
    case K::kLog: return "log";
    case K::kTest: return "test";
    case K::kSystem: return "system";
  }
  return "?";
}

const char* env_value(std::string_view name) {
  if (!find_env_var(name)) {
    throw InvalidArgument("the environment variable " + std::string(name) +
                          " is not in etr's registry (runtime/env.cc); register it before reading it");
  }
  return std::getenv(std::string(name).c_str());  // NOLINT: the one place etr reads the environment
}

std::string env_in_effect_line() {
  std::string line;
  for (const EnvVar& v : kVars) {
    if (v.kind == K::kSystem) continue;
    const char* value = std::getenv(std::string(v.name).c_str());
    if (!value) continue;
    line += (line.empty() ? "" : ", ") + std::string(v.name) + "=" + printable(value);
  }
  return "environment: " + (line.empty() ? std::string("no etr variables set") : line);
}

}  // namespace etr
