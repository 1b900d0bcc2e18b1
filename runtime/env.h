// The environment registry: every variable etr reads, in one table, read only through
// env_value() (a test fails the build's tests when getenv appears anywhere else, and
// another holds the README's tables equal to the table here).
//
// Kinds:
//   setting    overrides a config field (the comm section: runtime/config/settings.h has
//              the field each one sets)
//   budget     a memory budget (the host's, a GPU's)
//   launcher   written by etr-run for its job (EnvNames::kRun*: one spelling for the
//              writer and the reader), or read by etr-run and etr-mpirun
//   log        how much a program says
//   test       a test hook: a fault injected on purpose (parallel/fault_injection.h)
//   system     another library's or the system's, read for a default
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace etr {

enum class EnvKind { kSetting, kBudget, kLauncher, kLog, kTest, kSystem };

struct EnvVar {
  std::string_view name;
  EnvKind kind;
  std::string_view doc;  // one line: what a value means
};

// The registry, by kind.
std::span<const EnvVar> env_vars();
const EnvVar* find_env_var(std::string_view name);
std::string_view env_kind_name(EnvKind kind);

// The value of registered variable `name` (null when unset); InvalidArgument naming the
// variable when it is not in the registry (a bug in etr: register it first).
const char* env_value(std::string_view name);

// "environment: ETR_LOG_LEVEL=debug, ETR_SLOW_RANK=1:2" (every registered variable set,
// in the registry's order, values printable), or "environment: no etr variables set",
// for a program's start-up log. System variables are left out.
std::string env_in_effect_line();

// The launcher's protocol: what etr-run sets for each launch and the job reads
// (runtime/elastic.h, parallel/session_memory.cc: ETR_RUN_MEMORY_HALVINGS).
struct EnvNames {
  static constexpr const char* kRunDir = "ETR_RUN_DIR";
  static constexpr const char* kRunRestart = "ETR_RUN_RESTART";
  static constexpr const char* kRunReason = "ETR_RUN_REASON";
  static constexpr const char* kRunPrevNp = "ETR_RUN_PREV_NP";
  static constexpr const char* kRunLastStep = "ETR_RUN_LAST_STEP";
  static constexpr const char* kRunEventMs = "ETR_RUN_EVENT_MS";
  static constexpr const char* kRunHosts = "ETR_RUN_HOSTS";
  static constexpr const char* kRunCheckpointDir = "ETR_RUN_CHECKPOINT_DIR";
  static constexpr const char* kRunMemoryHalvings = "ETR_RUN_MEMORY_HALVINGS";
  static constexpr const char* kRunHeartbeat = "ETR_RUN_HEARTBEAT";
};

}  // namespace etr
