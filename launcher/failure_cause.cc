#include "launcher/failure_cause.h"

#include <map>
#include <set>

#include "launcher/hosts.h"

namespace etr::launcher {

std::string host_of_rank(const std::vector<HostSlots>& assigned, int rank) {
  int first = 0;
  for (const auto& h : assigned) {
    if (rank >= first && rank < first + h.slots) return h.host;
    first += h.slots;
  }
  return "";
}

namespace {

// The host the most other hosts' ranks waited on, or "".
Blame unreachable_host(const FailureEvidence& e, const std::vector<HostSlots>& assigned) {
  std::map<std::string, std::set<std::string>> named_from;  // peer host -> reporters' hosts
  for (const auto& [rank, peer] : e.waits) {
    const std::string from = host_of_rank(assigned, rank), to = host_of_rank(assigned, peer);
    if (!from.empty() && !to.empty() && from != to) named_from[to].insert(from);
  }
  Blame b;
  size_t best = 0;
  bool best_from_here = false;
  for (const auto& [host, from] : named_from) {
    bool from_here = false;
    for (const auto& f : from) from_here = from_here || is_local_host(f);
    if (from.size() > best || (from.size() == best && from_here && !best_from_here)) {
      best = from.size();
      best_from_here = from_here;
      b.host = host;
    }
  }
  if (b.host.empty()) return b;
  b.kind = Blame::Kind::kUnreachableHost;
  b.why = "host " + b.host + " is unreachable: ranks on " + std::to_string(best) +
          " other host(s) timed out waiting on its ranks";
  return b;
}

// What made etr-run end the launch itself (heartbeats, the progress watchdog), if anything.
Blame etr_run_decision(const FailureEvidence& e, const std::vector<HostSlots>& assigned) {
  Blame b;
  if (!e.silent_host.empty() && e.silent_host_answers) {
    b.kind = Blame::Kind::kRank;
    b.rank = e.silent_rank;
    b.host = e.silent_host;
    b.why = "rank " + std::to_string(b.rank) + " on " + b.host + " sent no heartbeat for " +
            e.silent_for + ", but its host answers (a frozen process, not a lost machine)";
  } else if (!e.silent_host.empty()) {
    b.kind = Blame::Kind::kUnreachableHost;
    b.host = e.silent_host;
    b.why = "host " + b.host + " is unreachable: none of its ranks sent a heartbeat for " + e.silent_for;
  } else if (e.silent_rank >= 0 || e.stuck_rank >= 0) {
    b.kind = Blame::Kind::kRank;
    b.rank = e.silent_rank >= 0 ? e.silent_rank : e.stuck_rank;
    b.host = host_of_rank(assigned, b.rank);
    b.why = "rank " + std::to_string(b.rank) + " on " + b.host;
    if (e.silent_rank < 0) b.why += ", " + e.stuck;
  } else if (!e.stuck.empty()) {
    b.why = "the job was stuck: " + e.stuck;
  }
  return b;
}

}  // namespace

Blame blame(const FailureEvidence& e, const std::vector<HostSlots>& assigned) {
  Blame b = etr_run_decision(e, assigned);
  if (!b.why.empty()) return b;
  if (!e.lost_hosts.empty()) {
    b.kind = Blame::Kind::kLostHost;
    b.host = e.lost_hosts.front();
    b.why = "host " + b.host + " was lost (its MPI daemon ended abnormally)";
    return b;
  }
  const int rank = e.own_error_rank >= 0 ? e.own_error_rank : e.killed_rank;
  if (rank >= 0) {
    b.kind = Blame::Kind::kRank;
    b.rank = rank;
    b.host = host_of_rank(assigned, rank);
    b.why = "rank " + std::to_string(rank) + " on " + b.host;
    return b;
  }
  if (!e.unreachable.empty()) {
    b.kind = Blame::Kind::kUnreachableHost;
    b.host = e.unreachable.front();
    b.why = "host " + b.host + " is unreachable: the launch agent cannot reach it, and no "
            "rank or host was named as the cause";
    return b;
  }
  if (!e.probed) b = unreachable_host(e, assigned);
  if (b.kind == Blame::Kind::kNone) b.why = "no rank is named as the cause";
  return b;
}

}  // namespace etr::launcher
