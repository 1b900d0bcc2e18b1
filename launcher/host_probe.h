// Whether etr-run can still reach the hosts of a launch the way mpirun reaches them: the
// launch agent (ssh, or --launch-agent) runs `true` on each host, all at once, each
// within a deadline. A host whose probe fails or does not finish in time is unreachable.
// etr-run asks after a launch that ended in collectives' timeouts across hosts, where the
// ranks' own reports cannot tell which side of a partition was cut off (a rank waits on
// the peer that waits on the cut one).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "launcher/host_names.h"

namespace etr::launcher {

// How long the launch agent may take to run `true` on a host.
inline constexpr std::chrono::milliseconds kProbeDeadline{10'000};
// ... when a host fell silent and the launch is ended anyway: whether it still answers at
// all (a frozen rank) or not (a partition, a lost machine); a slow answer counts as none.
inline constexpr std::chrono::milliseconds kSilentProbeDeadline{1'500};
// How often hosts excluded as unreachable are asked again (with kSilentProbeDeadline).
inline constexpr std::chrono::seconds kReprobeInterval{5};

// The hosts of `assigned` that are not this machine (is_local_host), in order.
std::vector<std::string> remote_hosts(const std::vector<HostSlots>& assigned);

// The hosts of `hosts` (names as given to mpirun) on which `agent` (its words) could not
// run `true` within `deadline`, in the order given (a probe that could not be started
// names no host: it says nothing of it).
std::vector<std::string> unreachable_hosts(const std::vector<std::string>& agent,
                                           const std::vector<std::string>& hosts,
                                           std::chrono::milliseconds deadline);
// ... and those on which it did run `true` within `deadline` (a probe that could not be
// started names no host: no answer is no proof).
std::vector<std::string> answering_hosts(const std::vector<std::string>& agent,
                                         const std::vector<std::string>& hosts,
                                         std::chrono::milliseconds deadline);

}  // namespace etr::launcher
