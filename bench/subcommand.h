// How etr-bench's subcommands plug into its main(): each file registers its own CLI11
// subcommand and options on the app, and hands back the function that runs it once the
// command line has been parsed. main() only lists the files' registration functions.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

namespace etr::bench {

class BenchContext;

struct Subcommand {
  CLI::App* cli = nullptr;                 // owned by the main app
  std::function<void(BenchContext&)> run;  // throws etr::Error on failure
};

using SubcommandList = std::vector<Subcommand>;

}  // namespace etr::bench
