// The transports etr-mpirun passes to mpirun: the network decision of network.h for the
// hosts that mpirun's own arguments name (--host/-H, --hostfile/--machinefile; none: this
// machine), without the parameters the arguments set themselves. etr-mpirun (a shell
// script) asks etr-run for them:
//
//   etr-run --mpirun-flags MPIRUN_ARGS...   -> one word per line on stdout
//
// (the words never contain spaces: networks, interface names, component lists). A bad
// host list or network is one sentence on stderr and exit status 1.
#pragma once

#include <string>
#include <vector>

namespace etr::launcher {

inline constexpr const char* kMpirunFlagsFlag = "--mpirun-flags";

// The host names mpirun's arguments give (the hostfile read), in order; empty for none.
// All of `args` up to a "--" is searched: the program's own arguments are assumed not to
// hold mpirun's host options.
// Throws ConfigError or IoError.
std::vector<std::string> hosts_in_mpirun_args(const std::vector<std::string>& args);

// The "--mca NAME VALUE" words for mpirun with `args` (choose_network(), without_user_mca()).
std::vector<std::string> mpirun_flags(const std::vector<std::string>& args);

// argv after "--mpirun-flags"; returns the exit status.
int run_mpirun_flags(const std::vector<std::string>& args);

}  // namespace etr::launcher
