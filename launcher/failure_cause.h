// Whom a failed launch blames (elastic_driver.cc): a rank, or a whole host that was lost
// (its launch daemon died, launch_shim.h) or that the other hosts could not reach (their
// collectives timed out waiting on its ranks).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launcher/host_names.h"

namespace etr::launcher {

// What a launch left behind about its end.
struct FailureEvidence {
  int own_error_rank = -1;  // the first rank that raised its own error ("error ... own=1")
  int killed_rank = -1;     // the first rank mpirun reported killed by a signal
  int silent_rank = -1;     // a rank whose heartbeat fell silent (etr-run ended it)
  // A host every rank of which fell silent at once (a partition, a frozen machine): etr-run
  // ended the launch; "sent no heartbeat for 5.1 s" says how long.
  std::string silent_host, silent_for;
  // The launch agent still reached that host after its ranks fell silent (host_probe.h):
  // its processes froze (SIGSTOP, a hung driver), not the machine or its link, so the
  // first silent rank (silent_rank) is blamed and the host is kept.
  bool silent_host_answers = false;
  // The progress watchdog ended the launch (progress_watch.h): its sentence, and the one
  // rank behind all others (-1: none).
  std::string stuck;
  int stuck_rank = -1;
  std::vector<std::string> lost_hosts;     // "daemon-lost host=H" events, in order
  std::vector<std::pair<int, int>> waits;  // (rank, peer) of "error rank=R own=0 peer=P"
  std::vector<std::string> unreachable;    // hosts etr-run could not reach (host_probe.h)
  // The hosts were probed (unreachable is its answer), or all are this machine (none can
  // be unreachable): either way the ranks' waits blame no host.
  bool probed = false;

  // Nothing names a culprit (timeouts, with or without a peer): worth probing the hosts.
  bool nothing_named() const {
    return lost_hosts.empty() && own_error_rank < 0 && killed_rank < 0 && silent_rank < 0 &&
           silent_host.empty() && stuck.empty();
  }
};

struct Blame {
  enum class Kind { kNone, kRank, kLostHost, kUnreachableHost };
  Kind kind = Kind::kNone;
  int rank = -1;     // kRank
  std::string host;  // the rank's host, or the host lost or unreachable
  std::string why;   // for the log: "rank 3 on h2", "host h2 was lost: ..."
  // A lost or unreachable host is excluded at once, not after --blacklist-after failures.
  bool whole_host() const { return kind == Kind::kLostHost || kind == Kind::kUnreachableHost; }
};

// The host of `rank` when mpirun filled `assigned` host by host ("" past the end).
std::string host_of_rank(const std::vector<HostSlots>& assigned, int rank);

// The cause, in this order: what made etr-run end the launch itself (it acts only before
// any other failure is heard of, so what follows is its consequence): a host whose every
// rank fell silent (the first of them when the host still answers the launch agent), a
// rank whose heartbeat fell silent (etr-run killed it, so it is named before mpirun's
// killed rank), the progress watchdog's stall (its one rank behind all others, else
// nobody); then a lost host; a rank's own error; a rank killed by a signal; a
// host etr-run could not reach; unless a probe reached every host, a host that ranks on
// other hosts timed out waiting on (the one named from the most other
// hosts; on a tie, the one named from etr-run's own host, the side of the partition that
// keeps the job); else none. Waits between ranks of one host blame nobody (a stuck rank
// says nothing of its host).
Blame blame(const FailureEvidence& e, const std::vector<HostSlots>& assigned);

}  // namespace etr::launcher
