// One run of a host discovery script (etr-run --host-discovery-script).
//
// The script runs in a process group of its own, its standard input /dev/null and its
// standard output read through a pipe (at most kMaxScriptOutput bytes). Whatever of the
// group is left when the run ends - the script past its deadline, a background child it
// left behind, everything when the run is abandoned (destructor: etr-run stopping for any
// reason) - gets SIGTERM and, kKillGrace later, SIGKILL. The script itself also gets
// SIGKILL if etr-run dies without unwinding (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "launcher/host_names.h"

namespace etr::launcher {

inline constexpr size_t kMaxScriptOutput = size_t{1} << 20;
inline constexpr std::chrono::milliseconds kKillGrace{500};

class DiscoveryScript {
 public:
  // Starts `path` (with `args`); it has `timeout` to finish. Throws IoError when it cannot
  // be started.
  DiscoveryScript(std::string path, std::chrono::milliseconds timeout,
                  std::vector<std::string> args = {});
  ~DiscoveryScript();
  DiscoveryScript(const DiscoveryScript&) = delete;
  DiscoveryScript& operator=(const DiscoveryScript&) = delete;

  // Reads the script's output for up to `wait`; true once the run is over (the script
  // exited, or printed too much, or its deadline passed: its group is ended then).
  bool poll(std::chrono::milliseconds wait);
  // The hosts the script printed, once poll() returned true. Throws IoError (it failed,
  // timed out or printed more than kMaxScriptOutput) or ConfigError (a line that is not
  // a host).
  std::vector<HostSlots> result() const;
  // The script's pid, which is also its process group's id.
  pid_t pid() const { return pid_; }

 private:
  void read_available();
  // SIGTERM to what is left of the group, SIGKILL after kKillGrace; reaps the script.
  void end_group();

  std::string path_;
  std::vector<std::string> args_;
  std::chrono::milliseconds timeout_;
  std::chrono::steady_clock::time_point deadline_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string output_;
  bool over_ = false;
  bool reaped_ = false;
  bool timed_out_ = false;
  bool too_much_ = false;
  int status_ = 0;
};

}  // namespace etr::launcher
