// etr-run: what a finished launch means (elastic_driver_impl.h): done, resized, stopped,
// out of memory, or failed (whom to blame, which host to exclude, whether to give up).
#include <cstdlib>

#include "launcher/elastic_driver_impl.h"
#include "launcher/host_probe.h"
#include "launcher/launch_shim.h"

namespace etr::launcher {

std::vector<std::string> Driver::probe_agent() const {
  // A job step's agent: srun runs `true` on the node (in a step of its own).
  return o_.use_srun() ? std::vector<std::string>{o_.srun, "--overlap", "--quiet", "--nodes=1",
                                                  "--ntasks=1", "--nodelist"}
                       : launch_agent_words(o_.launch_agent);
}

void Driver::reprobe_unreachable() {
  using namespace std::chrono_literals;
  if (reprobe_.valid() && reprobe_.wait_for(0s) == std::future_status::ready) {
    for (const std::string& host : reprobe_.get()) {
      health_.readmit(host);
      say("host ", host, " answers the launch agent again: no longer excluded");
      events_out_->event("readmit host=" + host);
    }
    reprobe_ = {};
  }
  if (reprobe_.valid() || Clock::now() < next_reprobe_) return;
  next_reprobe_ = Clock::now() + kReprobeInterval;
  const std::vector<std::string> excluded = health_.unreachable_excluded();
  if (excluded.empty()) return;
  reprobe_ = std::async(std::launch::async, answering_hosts, probe_agent(), excluded,
                        kSilentProbeDeadline)
                 .share();
}

void Driver::probe_hosts(FailureEvidence& e, const LaunchResult& r,
                         const std::vector<HostSlots>& assigned) const {
  if (!e.silent_host.empty() && r.silent_probe.valid()) {
    e.silent_host_answers = !r.silent_probe.get().empty();
    if (e.silent_host_answers) {
      say("host ", e.silent_host, " still answers the launch agent: its rank froze, the host is kept");
    }
    return;
  }
  const std::vector<std::string> remote = remote_hosts(assigned);
  if (!e.nothing_named()) return;
  if (network_.local || remote.empty()) {  // one machine: a wait says nothing of a host
    e.probed = true;
    return;
  }
  say("no rank or host is named as the cause: checking that the launch agent reaches ",
      remote.size(), " host(s) (", seconds(kProbeDeadline.count() / 1000.0), " at most)");
  e.unreachable = unreachable_hosts(probe_agent(), remote, kProbeDeadline);
  e.probed = true;
}

std::optional<int> Driver::after_launch(const LaunchResult& r,
                                        const std::vector<HostSlots>& assigned,
                                        int64_t last_step, LaunchEnv& env) {
  if (g_stop_signal && r.status != 0) {
    if (r.saved_step >= 0) {  // (a resize that was under way saved it as well)
      say("stopped by signal ", g_stop_signal, ": the job saved step ", r.saved_step,
          " and stopped; run the same command with the job's --resume latest to continue");
    } else {
      say("stopped by signal ", g_stop_signal, "; the job was ended (last step ", last_step, ")");
    }
    return 128 + g_stop_signal;
  }
  if (r.status == 0) {
    const std::string ooms = ", " + std::to_string(oom_kills_) + " out-of-memory kill(s) (the " +
                             "micro-batch halved " + std::to_string(env.memory_halvings) + " time(s))";
    say("the job completed after ", launches_, " launch(es): ", failures_, " failure(s), ",
        resizes_, " resize(s)", oom_kills_ > 0 ? ooms : std::string());
    return 0;
  }
  env.last_step = last_step;
  ++env.restart;
  if (r.status == kResizeExitCode) {
    ++resizes_;
    env.reason = "resize";
    say("the job stopped at step ", last_step, " to resize; relaunching");
    return std::nullopt;
  }
  if (!r.program_error.empty()) {  // mpirun could not start it on a host
    say("error: ", r.program_error, "; give the job as an executable's path or a program on PATH");
    return 1;
  }
  if (const auto oom = oom_kill_in(r.oom)) return after_oom(*oom, r, env);
  if (const std::string note = unexplained_oom_note(r.oom); !note.empty()) say(note);
  if (r.final_error) {
    say("error: the job stopped with an error that a relaunch would repeat (exit status ",
        r.status, ", after step ", last_step, "); not relaunching: see its error above");
    return r.status;
  }
  if (launches_ == 1 && !r.ready_seen) {
    // A bad configuration, a missing file, a program that is not an etr job: relaunching
    // would fail the same way.
    say("error: the job failed (exit status ", r.status, ") on its first launch before it "
        "was ready to train; not relaunching: see its error above");
    return r.status;
  }
  env.reason = "failure";
  if (after_failure(r, assigned, last_step)) return r.status;
  return std::nullopt;
}

std::optional<int> Driver::after_oom(const OomKill& k, const LaunchResult& r, LaunchEnv& env) {
  ++oom_kills_;
  const OomDecision d = decide_after_oom(k, env.memory_halvings, r.micro_batch);
  events_out_->event(
      "oom-kill rank=" + std::to_string(k.rank) + " kills=" + std::to_string(k.kills) +
      " halvings=" + std::to_string(d.halvings) + " relaunch=" + (d.relaunch ? "1" : "0"));
  say(d.message);
  if (!d.relaunch) return r.status;
  env.memory_halvings = d.halvings;
  env.reason = "failure";
  return std::nullopt;
}

bool Driver::after_failure(const LaunchResult& r, const std::vector<HostSlots>& assigned,
                           int64_t last_step) {
  ++failures_;
  FailureEvidence evidence = r.evidence;
  probe_hosts(evidence, r, assigned);
  const Blame b = blame(evidence, assigned);
  const std::string& who = b.why;
  if (b.whole_host()) {
    health_.exclude_now(b.host, HostHealth::Clock::now(), b.kind == Blame::Kind::kUnreachableHost);
    say(b.why, ": excluded until discovery drops and lists it again, or for ",
        seconds(static_cast<double>(o_.blacklist_cooldown.count()) / 1000));
    events_out_->event("exclude host=" + b.host + " reason=" +
                       (b.kind == Blame::Kind::kLostHost ? "lost" : "unreachable"));
  } else if (!b.host.empty() && health_.record_failure(b.host)) {
    say("host ", b.host, " failed ", health_.failures(b.host), " time(s) (--blacklist-after ",
        o_.blacklist_after, "): excluded for ",
        seconds(static_cast<double>(o_.blacklist_cooldown.count()) / 1000));
    events_out_->event("exclude host=" + b.host);
  }
  say("the job failed (exit status ", r.status, "; ", who, ") after step ", last_step,
      "; failure ", failures_, " of at most ", o_.max_restarts + 1);
  if (failures_ > o_.max_restarts) {
    say("error: giving up: the job failed ", failures_, " time(s) and --max-restarts is ",
        o_.max_restarts);
    return true;
  }
  return false;
}

}  // namespace etr::launcher
