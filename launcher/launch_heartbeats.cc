// etr-run: what the ranks' heartbeats say during a launch (elastic_driver_impl.h): a
// silent rank on this machine is killed (mpirun then ends the job as after a kill -9); the
// silent ranks of other machines, gathered for kSilentGather (or until all of one host's
// are), end the launch at once and blame their host when every one of its ranks fell
// silent (a partition, a frozen machine), else the first of them; the progress watchdog
// (progress_watch.h) ends a launch whose ranks live but stand still.
#include <cstdlib>
#include <map>

#include "launcher/elastic_driver_impl.h"
#include "launcher/host_probe.h"

namespace etr::launcher {

namespace {

// The first host (in launch order) every one of whose ranks is among w.remote_silent.
const HostSlots* silent_host(const Watch& w, const std::vector<HostSlots>& assigned) {
  std::map<std::string, int> silent_on;  // host (as etr-run launched it) -> its silent ranks
  for (const auto& s : w.remote_silent) ++silent_on[host_of_rank(assigned, s.rank)];
  for (const HostSlots& h : assigned) {
    const auto it = silent_on.find(h.host);
    if (it != silent_on.end() && it->second >= h.slots) return &h;
  }
  return nullptr;
}

// The silent rank's event: which, where, and what every other rank said at its last beat
// ("others=0:compute:120,1:checkpoint:0": rank, stage, ms waited on its peers), so that a
// silence found at the full timeout rather than the stalled job's says why.
std::string silent_event(const HeartbeatWatch::Silent& s, const HeartbeatWatch& h) {
  std::string others;
  for (const HeartbeatWatch::Position& p : h.positions()) {
    if (p.rank == s.rank) continue;
    if (!others.empty()) others.push_back(',');
    others.append(std::to_string(p.rank)).append(":").append(stage_name(p.stage)).append(":");
    others.append(std::to_string(p.waited_ms));
  }
  return "rank-silent rank=" + std::to_string(s.rank) + " host=" + s.host + " stalled=" + (s.stalled ? "1" : "0") +
         " others=" + (others.empty() ? "-" : others);
}

}  // namespace

std::string timeout_words(const HeartbeatWatch& h) {
  const std::string s = seconds(static_cast<double>(h.timeout().count()) / 1000);
  return h.timeout_model().learning() ? "--heartbeat-timeout auto: " + s : "--heartbeat-timeout " + s;
}

std::string silence_words(const HeartbeatWatch::Silent& s, const HeartbeatWatch& h) {
  if (!s.stalled) return seconds(s.seconds) + " (" + timeout_words(h) + ")";
  return seconds(s.seconds) + " while every other rank waited on its peers (" + timeout_words(h) + "; " +
         seconds(static_cast<double>(h.timeout_model().stalled().count()) / 1000) + " for a stalled job)";
}

void Driver::say_heartbeat_timeout() {
  const HeartbeatTimeout& t = heartbeats_->timeout_model();
  if (!t.learning() || t.gaps_seen() < HeartbeatTimeoutOptions{}.min_gaps) return;
  const auto now = t.current();
  // Said when first learned, then when it moved by a quarter or more.
  if (said_timeout_.count() > 0 && 4 * std::abs((now - said_timeout_).count()) < said_timeout_.count()) return;
  said_timeout_ = now;
  say("heartbeat timeout ", t.describe());
  events_out_->event("heartbeat-timeout ms=" + std::to_string(now.count()));
}

void Driver::watch_heartbeats(Watch& w, LaunchResult& r, const std::vector<HostSlots>& assigned) {
  // Once the job has failed otherwise (an error, a lost daemon), its ranks end without a
  // goodbye: their silence is that failure's, not a new one.
  if (!heartbeats_ || w.reaped || r.first_error != Clock::time_point{}) return;
  const auto s = end_silent_rank(w, *heartbeats_);
  say_heartbeat_timeout();
  if (s) {
    events_out_->event(silent_event(*s, *heartbeats_));
    r.evidence.silent_rank = s->rank;
    say("rank ", s->rank, " (pid ", s->pid, " on ", s->host, ") sent no heartbeat for ",
        silence_words(*s, *heartbeats_), ": declared failed, ending the launch");
    r.first_error = Clock::now();
    return;
  }
  if (!w.remote_silent.empty()) {
    // A host all of whose ranks are silent cannot get more so: no need to wait.
    const HostSlots* host = silent_host(w, assigned);
    if (host || Clock::now() - w.remote_silent_at >= kSilentGather) {
      remote_silence(w, r, assigned, host);
    }
    return;
  }
  watch_progress(w, r);
}

void Driver::remote_silence(Watch& w, LaunchResult& r, const std::vector<HostSlots>& assigned,
                            const HostSlots* h) {
  for (const auto& s : w.remote_silent) {
    events_out_->event(silent_event(s, *heartbeats_));
  }
  const HeartbeatWatch::Silent& first = w.remote_silent.front();
  const std::string silence = silence_words(first, *heartbeats_);
  if (h) {
    r.evidence.silent_host = h->host;
    for (const auto& s : w.remote_silent) {  // blamed instead when the host still answers
      if (host_of_rank(assigned, s.rank) == h->host) {
        r.evidence.silent_rank = s.rank;
        break;
      }
    }
    // Asked while mpirun is ended: a partition or a lost machine does not answer, a host
    // whose rank froze (SIGSTOP, a hung driver) does, and is kept.
    r.silent_probe = std::async(std::launch::async, answering_hosts, probe_agent(),
                                std::vector<std::string>{h->host}, kSilentProbeDeadline)
                         .share();
    r.evidence.silent_for = silence;
    say("none of the ", h->slots, " rank(s) on ", h->host, " sent a heartbeat for ", silence,
        ": the host is cut off or frozen; ending the launch");
  } else {
    r.evidence.silent_rank = first.rank;
    say("rank ", first.rank, " (on ", first.host, ", another machine) sent no heartbeat for ", silence,
        ": declared failed, ending the launch");
  }
  r.first_error = w.end_at = Clock::now();
}

void Driver::watch_progress(Watch& w, LaunchResult& r) {
  if (!progress_) return;
  const auto stuck = progress_->observe(heartbeats_->positions());
  if (!stuck) return;
  r.evidence.stuck = stuck->describe();
  r.evidence.stuck_rank = stuck->rank;
  events_out_->event("stuck step=" + std::to_string(stuck->step) +
                     " rank=" + std::to_string(stuck->rank) + " seconds=" +
                     std::to_string(static_cast<int64_t>(stuck->stalled_seconds)));
  say(r.evidence.stuck, ": ending the launch");
  r.first_error = w.end_at = Clock::now();
}

}  // namespace etr::launcher
