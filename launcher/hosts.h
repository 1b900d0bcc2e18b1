// Where etr-run may start workers: host lists, hostfiles and host discovery scripts
// (the three ways horovodrun takes them), and which of those hosts are healthy.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launcher/discovery_script.h"
#include "launcher/host_names.h"

namespace etr::launcher {

// True for names of this machine: localhost, 127.x.y.z, ::1, this host's name, the
// addresses of its interfaces and names resolving to one of them (network.h).
bool is_local_host(const std::string& host);

// One discovery under way: a list or a hostfile is read at once, a script runs until
// poll() says it is over (etr-run polls it between its other work).
class Discovery {
 public:
  // True when the hosts (or the error) are known; waits for up to `wait` for that.
  bool poll(std::chrono::milliseconds wait);
  // The hosts; throws the discovery's error. Only after poll() returned true.
  std::vector<HostSlots> result() const;

 private:
  friend class HostSource;
  std::vector<HostSlots> hosts_;
  std::exception_ptr error_;
  std::unique_ptr<DiscoveryScript> script_;
};

inline constexpr std::chrono::milliseconds kDefaultDiscoveryTimeout{10'000};

// The source of the current host list.
class HostSource {
 public:
  // kSlurm: the nodes of this Slurm allocation; the value is etr-run's own path, run as
  // "etr-run --slurm-nodes" like a discovery script (srun_launch.h).
  enum class Kind { kList, kFile, kScript, kSlurm };
  HostSource(Kind kind, std::string value) : kind_(kind), value_(std::move(value)) {}
  // Starts a discovery: a list is fixed; a hostfile is re-read; a script is run (for up
  // to `script_timeout`, DiscoveryScript) and its standard output parsed.
  Discovery start(std::chrono::milliseconds script_timeout = kDefaultDiscoveryTimeout) const;
  // The hosts now (start() and its end). A script is ended early, with an IoError, once
  // `cancelled` returns true. Throws ConfigError or IoError with a sentence on a file that
  // cannot be read or a script that fails.
  std::vector<HostSlots> discover(std::chrono::milliseconds script_timeout = kDefaultDiscoveryTimeout,
                                  const std::function<bool()>& cancelled = {}) const;
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
  // Excludes `host` for the cool-down at once (it was lost, or is unreachable:
  // `unreachable`, then unreachable_excluded() names it until it is admitted again).
  void exclude_now(const std::string& host, Clock::time_point now = Clock::now(),
                   bool unreachable = false);
  // The hosts excluded because etr-run could not reach them, still within their cool-down.
  std::vector<std::string> unreachable_excluded(Clock::time_point now = Clock::now()) const;
  // `host` answers again (a partition healed): admitted with its failure count reset.
  void readmit(const std::string& host);
  bool excluded(const std::string& host, Clock::time_point now = Clock::now()) const;
  int failures(const std::string& host) const;
  // `hosts` without the excluded ones. A host whose cool-down is over, or that was
  // missing from a discovery while excluded and is listed again, is admitted again with
  // its failure count reset.
  std::vector<HostSlots> usable(const std::vector<HostSlots>& hosts,
                                Clock::time_point now = Clock::now());

 private:
  struct State {
    int failures = 0;
    Clock::time_point excluded_until{};
    bool excluded = false;
    bool absent = false;  // missing from a discovery since it was excluded
    bool unreachable = false;  // excluded because etr-run could not reach it
  };
  int blacklist_after_;
  std::chrono::milliseconds cooldown_;
  std::map<std::string, State> state_;
};

// The first `np` slots of `hosts` (mpirun fills a host's slots before the next host's, so
// rank r runs on the host whose slots cover r): the hosts of `previous` (the last launch's)
// first, in its order, then the others in the order of `hosts`. So a relaunch keeps each
// surviving host's ranks where they were (their memory tier's copies, their page cache),
// and a spare host (more usable slots than --max-np) is taken only for a host lost.
std::vector<HostSlots> take_slots(const std::vector<HostSlots>& hosts, int np,
                                  const std::vector<HostSlots>& previous = {});

// Why a job on `np` ranks on `hosts` should resize now that discovery reports
// `now_hosts`: more usable slots (up to max_np; with `pp` pipeline stages, enough for
// another whole pipeline), or fewer than it uses; "" when neither.
std::string resize_reason(const std::vector<HostSlots>& hosts, int np,
                          const std::vector<HostSlots>& now_hosts, int max_np, int pp = 1);

}  // namespace etr::launcher
