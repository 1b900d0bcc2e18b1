// etr-run's side of the ranks' heartbeats (runtime/heartbeat.h): one UDP socket for the
// whole run and, for the launch in flight, each rank's last beat. A rank is silent once
// it has beaten in this launch and then not for the timeout; a rank that said goodbye
// (it left normally) is not waited for. Beats of earlier launches are ignored. The timeout
// is fixed or learned from the gaps between each rank's beats (heartbeat_timeout.h), over
// every launch of the run. A learned timeout has a shorter form for a stalled job
// (HeartbeatTimeout::stalled): a rank silent for that long is declared failed when every
// other rank of the launch beats and says it has been waiting on its peers for at least
// kPeersWaitAtLeast (runtime/peer_wait.h). A silence alone may be a rank's hiccup while the
// job trains on; a silence while all the others wait is the job stalled on that rank.
#pragma once

#include <netinet/in.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "launcher/heartbeat_timeout.h"
#include "launcher/host_names.h"
#include "runtime/heartbeat.h"

namespace etr::launcher {

class HeartbeatWatch {
 public:
  using Clock = std::chrono::steady_clock;
  struct Silent {
    int rank = -1;
    pid_t pid = 0;
    std::string host;     // the name the rank gave (its gethostname)
    bool local = false;   // it beat from one of this machine's addresses: its pid is ours to end
    double seconds = 0;   // since its last beat
    bool stalled = false; // declared at the stalled timeout: every other rank waited on its peers
  };
  // How long every other rank must have waited on its peers (at its last beat) for a silent
  // rank to be declared at the stalled timeout: more than a ring step's usual wait.
  static constexpr std::chrono::milliseconds kPeersWaitAtLeast{100};
  // Binds a UDP socket on every IPv4 address, on a port the kernel picks. Throws IoError.
  explicit HeartbeatWatch(HeartbeatTimeoutOptions timeout);
  ~HeartbeatWatch();
  HeartbeatWatch(const HeartbeatWatch&) = delete;
  HeartbeatWatch& operator=(const HeartbeatWatch&) = delete;

  std::chrono::milliseconds timeout() const { return timeout_.current(); }
  const HeartbeatTimeout& timeout_model() const { return timeout_; }
  // "address:port" for the ranks on `hosts`: loopback when every host is this machine,
  // else the address this machine sends to the first remote host from.
  std::string target(const std::vector<HostSlots>& hosts) const;
  // A new launch of `ranks` ranks (0: unknown, and no stalled-job timeout): only its beats
  // count from here.
  void begin_launch(int launch, int ranks = 0);
  // Reads what arrived; the ranks that fell silent since the last call, each once.
  std::vector<Silent> poll(Clock::time_point now = Clock::now());
  // The socket, readable when a beat has arrived (for etr-run's wait, launch_watch.h).
  int fd() const { return fd_; }
  // When the next rank falls silent unless it beats first (the time_point's max: none
  // watched), so that etr-run's wait ends then and not a polling interval later.
  Clock::time_point next_silence() const;
  int ranks_heard() const { return static_cast<int>(ranks_.size()); }
  // What each rank of the launch last said of its training (runtime/heartbeat.h), for the
  // progress watchdog (progress_watch.h); ranks that said goodbye are left out.
  struct Position {
    int rank = -1;
    int64_t step = 0;
    RankStage stage = RankStage::kStart;
    int64_t waited_ms = 0;  // on its peers, at its last beat
  };
  std::vector<Position> positions() const;
  // The pids of the launch's ranks on this machine that have not said goodbye: what is
  // left to end when mpirun was killed before it could end them.
  std::vector<pid_t> local_pids() const;
  // How many beats of earlier launches were answered "etr-end <launch>" (runtime/heartbeat.h):
  // ranks cut off from an ended launch, told to end their process.
  int64_t stale_told() const { return stale_told_; }

 private:
  struct Rank {
    Clock::time_point last;
    double arrived = -1;  // the kernel's arrival time of the last beat (s, CLOCK_REALTIME)
    pid_t pid = 0;
    std::string host;
    bool local = false;
    int64_t step = 0;
    RankStage stage = RankStage::kStart;
    int64_t waited_ms = 0;  // how long it had waited on its peers at its last beat
    bool gone = false;      // said goodbye
    bool reported = false;  // already returned as silent
  };
  void receive(Clock::time_point now);
  void end_stale(int launch, const sockaddr_in& from);
  // All the launch's ranks but one beat (within the stalled timeout) and waited on their
  // peers at their last beat: the job is stalled, on that one when it falls silent. One
  // pass over the ranks, whatever their number (a poll is due every 100 ms at most).
  bool all_but_one_wait(Clock::time_point now) const;

  HeartbeatTimeout timeout_;
  int fd_ = -1;
  int port_ = 0;
  int launch_ = -1;
  int launch_ranks_ = 0;
  int64_t stale_told_ = 0;
  std::map<int, Rank> ranks_;
};

}  // namespace etr::launcher
