// Where etr-run may start workers: host lists, hostfiles and host discovery scripts
// (the three ways horovodrun takes them), and which of those hosts are healthy.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace etr::launcher {

struct HostSlots {
  std::string host;
  int slots = 1;
  bool operator==(const HostSlots&) const = default;
};

// "h1:2,h2" (--hosts) -> {{"h1", 2}, {"h2", 1}}. Throws ConfigError.
std::vector<HostSlots> parse_host_list(const std::string& text);
// A hostfile or a discovery script's output: one host per line, as "host", "host:N" or
// "host slots=N" (Open MPI's hostfile syntax); '#' starts a comment; blank lines are
// skipped. A host named twice has its slots added. Throws ConfigError naming `source`
// and the line.
std::vector<HostSlots> parse_host_lines(const std::string& text, const std::string& source);
// "h1:2,h2:1", the form mpirun's --host takes.
std::string format_hosts(const std::vector<HostSlots>& hosts);
int total_slots(const std::vector<HostSlots>& hosts);
// True for names of this machine: localhost, 127.x.y.z, ::1 and this host's name.
bool is_local_host(const std::string& host);

// The source of the current host list.
class HostSource {
 public:
  enum class Kind { kList, kFile, kScript };
  HostSource(Kind kind, std::string value) : kind_(kind), value_(std::move(value)) {}
  // The hosts now. A list is fixed; a hostfile is re-read; a script is run (up to
  // `script_timeout`) and its standard output parsed. Throws ConfigError or IoError with
  // a sentence on a file that cannot be read or a script that fails.
  std::vector<HostSlots> discover(std::chrono::milliseconds script_timeout =
                                      std::chrono::seconds(30)) const;
  bool dynamic() const { return kind_ != Kind::kList; }
  Kind kind() const { return kind_; }
  std::string describe() const;

 private:
  Kind kind_;
  std::string value_;
};

// Failures per host and the hosts excluded for a cool-down after `blacklist_after`
// failures (0: never exclude).
class HostHealth {
 public:
  using Clock = std::chrono::steady_clock;
  HostHealth(int blacklist_after, std::chrono::milliseconds cooldown)
      : blacklist_after_(blacklist_after), cooldown_(cooldown) {}
  // Counts a failure of `host`; true when it is now excluded.
  bool record_failure(const std::string& host, Clock::time_point now = Clock::now());
  bool excluded(const std::string& host, Clock::time_point now = Clock::now()) const;
  int failures(const std::string& host) const;
  // `hosts` without the excluded ones. A host whose cool-down is over is admitted again
  // with its failure count reset.
  std::vector<HostSlots> usable(const std::vector<HostSlots>& hosts,
                                Clock::time_point now = Clock::now());

 private:
  struct State {
    int failures = 0;
    Clock::time_point excluded_until{};
    bool excluded = false;
  };
  int blacklist_after_;
  std::chrono::milliseconds cooldown_;
  std::map<std::string, State> state_;
};

// The first `np` slots of `hosts`, in order (mpirun fills a host's slots before the next
// host's, so rank r runs on the host whose slots cover r).
std::vector<HostSlots> take_slots(const std::vector<HostSlots>& hosts, int np);

}  // namespace etr::launcher
