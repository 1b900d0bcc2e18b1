// How etr-bench's subcommands plug into its main(): each file registers its own CLI11
// subcommand and options on the app, and hands back the function that runs it once the
// command line has been parsed. main() only lists the files' registration functions.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace etr::bench {

class BenchContext;

struct Subcommand {
  CLI::App* cli = nullptr;                 // owned by the main app
  std::function<void(BenchContext&)> run;  // throws etr::Error on failure
};

using SubcommandList = std::vector<Subcommand>;

// --config, --set and --json, as the training benchmarks (train, dp, ckpt) take them.
inline void add_training_config_options(CLI::App* cmd, std::string& config,
                                        std::vector<std::string>& overrides, std::string& json) {
  cmd->add_option("--config", config, "A training config instead of the built-in benchmark config");
  cmd->add_option("--set", overrides, "Override a config field (repeatable)");
  cmd->add_option("--json", json, "Also write the figures to this JSON file");
}

}  // namespace etr::bench
