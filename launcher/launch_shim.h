// The launch shim: etr-run puts itself between mpirun and its remote launch agent (ssh,
// or the simulated cluster's rsh), so that a host whose MPI daemon dies is known by name.
// mpirun runs, per remote host,
//
//   etr-run --launch-shim RUN_DIR N AGENT_WORD_1 .. AGENT_WORD_N [AGENT_OPTIONS] HOST COMMAND
//
// and the shim runs the agent with the rest, passes on SIGTERM, SIGINT and SIGHUP (and
// sends SIGTERM when mpirun itself dies), and when the agent ends abnormally unasked (a signal, or
// a non-zero status: ssh says 255 when the connection is lost) appends
// "daemon-lost host=HOST status=S" to RUN_DIR/events before it exits with the agent's
// status. mpirun then only says that "one or more daemons" failed.
//
// The remote daemon gets HWLOC_COMPONENTS from the shim's environment (etr-run's job
// environment sets it: job_process.h), which ssh would not carry: the command's daemon
// word (".../orted") is run as `env HWLOC_COMPONENTS='...' orted`.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace etr::launcher {

inline constexpr const char* kLaunchShimFlag = "--launch-shim";

// --launch-agent's words ("" -> ssh).
std::vector<std::string> launch_agent_words(const std::string& launch_agent);

// The plm_rsh_agent value that runs `agent` (its words) through the shim of `self`
// (etr-run's own path).
std::string launch_shim_agent(const std::string& self, const std::string& run_dir,
                              const std::vector<std::string>& agent);

// `command` (the words after HOST) with `env NAME='VALUE'` put before the daemon (the
// first word whose last token is orted or ends in /orted) for each pair; unchanged when
// no word names the daemon or a value holds a quote.
std::vector<std::string> with_daemon_env(
    std::vector<std::string> command,
    const std::vector<std::pair<std::string, std::string>>& env);

// argv after "--launch-shim"; returns the exit status (127 when the agent cannot run).
int run_launch_shim(const std::vector<std::string>& args);

}  // namespace etr::launcher
