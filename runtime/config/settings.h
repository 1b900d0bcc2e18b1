// The settings registry: the one table of the settings an environment variable may set,
// each with the config field it overrides (docs/design.md, "Settings"; CONTRIBUTING.md, style 10).
//
//   ETR_COMM_TIMEOUT_S     comm.timeout_s        ETR_RING_DEPTH        comm.ring_depth
//   ETR_ALLREDUCE_ALGO     comm.allreduce_algo   ETR_INLINE_BYTES      comm.inline_bytes
//   ETR_ALLREDUCE_SMALL_BYTES  comm.allreduce_small_bytes                ...
//
// A program reads them once, at start: a training program applies them to its config
// between the config file and the command line's --set (configure() in
// parallel/program.cc), so the effective values are in the config it prints; a program
// without a config (etr-bench, etr-ckpt) takes comm_config_from_env(). A set variable
// overrides the config file, as the variables did before the config had these fields.
// An empty variable counts as unset. A bad value is a ConfigError naming the variable.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/config/etr_config.pb.h"

namespace etr {

struct EnvSetting {
  std::string_view env;     // "ETR_COMM_TIMEOUT_S"
  std::string_view path;    // "comm.timeout_s": the field of TrainConfig it sets
  std::string_view expect;  // "a positive number of seconds": what a value must be
};

// The registry, in the order of the fields.
std::span<const EnvSetting> env_settings();
const EnvSetting* find_env_setting(std::string_view env);

// Sets each field of the registry whose variable is set (and, with `prefix`, whose path
// starts with it) from the variable. Returns "ETR_X=value" for each one applied.
std::vector<std::string> apply_env_settings(config::TrainConfig& config,
                                            std::string_view prefix = "");

// Checks every field of the registry in `config` (ConfigError: "comm.ring_depth = 0 is
// not a positive whole number").
void validate_env_settings(const config::TrainConfig& config);

// The comm section from its defaults and the environment (programs without a config).
config::CommConfig comm_config_from_env();

// "settings from the environment: ETR_RING_DEPTH=8 (comm.ring_depth)", or "...: none",
// for a program's start-up log (the variables as set, unchecked).
std::string env_settings_line();

}  // namespace etr
