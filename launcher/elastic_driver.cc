#include "launcher/elastic_driver.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "runtime/elastic.h"
#include "runtime/error.h"
#include "launcher/job_events.h"
#include "launcher/failure_cause.h"
#include "launcher/host_probe.h"
#include "launcher/job_process.h"
#include "launcher/launch_shim.h"
#include "launcher/launch_watch.h"
#include "launcher/mpirun_output.h"
#include "launcher/oom_watch.h"
#include "runtime/env.h"

namespace etr::launcher {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

volatile sig_atomic_t g_stop_signal = 0;  // passed to pump() (launch_watch.h)
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

template <typename... Args>
void say(const Args&... args) {
  std::ostringstream s;
  s << "etr-run: ";
  (s << ... << args);
  s << '\n';
  const std::string text = s.str();
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, text.data(), text.size());
}

std::string seconds(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// What one launch of the job did.
struct LaunchResult {
  int status = 0;          // exit status (128 + signal when mpirun was killed)
  FailureEvidence evidence;  // whom to blame (failure_cause.h)
  Clock::time_point first_error{};  // the first error or lost daemon heard of (else epoch)
  bool final_error = false;  // the job's "error ... final=1": a relaunch would fail alike
  bool resize_requested = false;
  bool first_step_seen = false;
  bool ready_seen = false;  // rank 0 got through its setup (config, model, restore)
  std::string program_error;  // mpirun could not start the program (MpirunOutput)
  int micro_batch = 0;  // the job's micro_batch=B event field (oom_watch.h), 0: none
  OomEvidence oom;      // the OOM kill count around the launch, mpirun's SIGKILL reports
};

// A job's "error rank=R own=0|1 [peer=P] [final=1]" event: the first rank that named
// itself the cause (own=1), the peers ranks timed out waiting on, and whether a relaunch
// would fail the same way (final=1); the launch shim's "daemon-lost host=H". Any event's
// micro_batch=B: the micro-batch the job runs at (oom_watch.h).
void note_error(const Event& e, LaunchResult& r) {
  if (const auto b = e.fields.find("micro_batch"); b != e.fields.end()) {
    r.micro_batch = std::atoi(b->second.c_str());
  }
  auto field = [&e](const char* k) { return e.fields.count(k) ? e.fields.at(k) : std::string(); };
  if (e.name == "daemon-lost" && !field("host").empty()) r.evidence.lost_hosts.push_back(field("host"));
  if (e.name != "error" && e.name != "daemon-lost") return;
  if (r.first_error == Clock::time_point{}) r.first_error = Clock::now();
  if (e.name != "error") return;
  const int rank = std::atoi(field("rank").c_str());
  if (field("own") == "1" && r.evidence.own_error_rank < 0) r.evidence.own_error_rank = rank;
  if (field("own") != "1" && !field("peer").empty()) {
    r.evidence.waits.emplace_back(rank, std::atoi(field("peer").c_str()));
  }
  if (field("final") == "1") r.final_error = true;
}

// The job's environment on top of etr-run's: the ETR_RUN_* variables of runtime/elastic.h.
struct LaunchEnv {
  int restart = 0;
  std::string reason = "start";
  int prev_np = 0;
  int64_t last_step = -1;
  int64_t event_ms = 0;
  int memory_halvings = 0;  // relaunches after an OOM kill (oom_watch.h)
};

class Driver {
 public:
  explicit Driver(const RunOptions& o)
      : o_(o), health_(o.blacklist_after, o.blacklist_cooldown) {
    if (o.heartbeat_timeout.count() > 0) heartbeats_.emplace(o.heartbeat_timeout);
  }

  int run();

 private:
  // The discovered hosts without the excluded ones; nullopt (warned once in a row, after
  // a first discovery that worked) when discovery fails. A script has `timeout` and is
  // ended when etr-run is stopped.
  std::optional<std::vector<HostSlots>> discover_usable(std::chrono::milliseconds timeout);
  std::optional<std::vector<HostSlots>> accept_discovery(const std::vector<HostSlots>& hosts);
  std::optional<std::vector<HostSlots>> discovery_failed(const Error& e);
  // The end of a discovery started while the job runs (as discover_usable()).
  std::optional<std::vector<HostSlots>> finish_discovery(const Discovery& d);
  // Waits until at least min_np slots are usable; nullopt when it gave up (or was
  // stopped). A first discovery that fails is an error at once: nothing was ever usable.
  std::optional<std::vector<HostSlots>> wait_for_slots();
  LaunchResult launch(const std::vector<HostSlots>& hosts, int np, const LaunchEnv& env);
  // The pieces of launch()'s loop: the job's events, discovery while it runs.
  void read_events(Watch& w, LaunchResult& r, const LaunchEnv& env, int np);
  void watch_discovery(Watch& w, const std::vector<HostSlots>& hosts, int np, LaunchResult& r);
  void watch_heartbeats(Watch& w, LaunchResult& r);
  // After a launch that did not complete: the exit status to end with, or nullopt to
  // relaunch (env, counts updated).
  std::optional<int> after_launch(const LaunchResult& r, const std::vector<HostSlots>& assigned,
                                  int64_t last_step, LaunchEnv& env);
  // A failed launch: names the culprit, may exclude its host; true to give up.
  bool after_failure(const LaunchResult& r, const std::vector<HostSlots>& assigned,
                     int64_t last_step);
  // A launch a rank of which the OOM killer ended: the exit status, or nullopt to
  // relaunch with the micro-batch halved once more.
  std::optional<int> after_oom(const OomKill& k, const LaunchResult& r, LaunchEnv& env);
  void prepare_run_dir();
  // --launch-agent (else ssh) through etr-run's launch shim.
  std::string shim_agent() const;
  // After a launch that ended in timeouts only, the remote hosts the agent cannot reach.
  void probe_hosts(FailureEvidence& e, const std::vector<HostSlots>& assigned) const;

  const RunOptions& o_;
  HostHealth health_;
  fs::path run_dir_;
  std::optional<EventTail> events_;
  std::optional<ElasticReporter> events_out_;  // etr-run's own lines of the events file
  bool discovery_warned_ = false;
  bool discovered_once_ = false;
  std::string discovery_error_;  // the last discovery's error ("" after one that worked)
  std::optional<HeartbeatWatch> heartbeats_;  // --heartbeat-timeout > 0
  MpiNetwork network_;  // the transports of the launch (network.h); said_: its line, once
  std::string said_;
  int launches_ = 0, failures_ = 0, resizes_ = 0, oom_kills_ = 0;
};

std::optional<std::vector<HostSlots>> Driver::discover_usable(std::chrono::milliseconds timeout) {
  try {
    return accept_discovery(o_.hosts->discover(timeout, [] { return g_stop_signal != 0; }));
  } catch (const Error& e) {
    return discovery_failed(e);
  }
}

std::optional<std::vector<HostSlots>> Driver::finish_discovery(const Discovery& d) {
  try {
    return accept_discovery(d.result());
  } catch (const Error& e) {
    return discovery_failed(e);
  }
}

std::optional<std::vector<HostSlots>> Driver::accept_discovery(const std::vector<HostSlots>& hosts) {
  discovered_once_ = true;
  discovery_warned_ = false;
  discovery_error_.clear();
  return health_.usable(hosts);
}

std::optional<std::vector<HostSlots>> Driver::discovery_failed(const Error& e) {
  discovery_error_ = e.what();
  if (discovered_once_ && !discovery_warned_) say("warning: ", e.what(), "; trying again");
  discovery_warned_ = true;
  return std::nullopt;
}

std::optional<std::vector<HostSlots>> Driver::wait_for_slots() {
  const auto begin = Clock::now();
  bool announced = false;
  for (;;) {
    if (g_stop_signal) return std::nullopt;
    // The script may take what is left of --min-np-timeout, at most --discovery-timeout.
    const auto left = o_.min_np_timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                                              Clock::now() - begin);
    auto hosts = discover_usable(
        std::min(o_.discovery_timeout, std::max(left, std::chrono::milliseconds(100))));
    if (g_stop_signal) return std::nullopt;
    if (!hosts && !discovered_once_) {
      say("error: ", discovery_error_);
      return std::nullopt;
    }
    if (hosts && total_slots(*hosts) >= o_.min_np) return hosts;
    const int have = hosts ? total_slots(*hosts) : 0;
    if (since(begin) * 1000 >= static_cast<double>(o_.min_np_timeout.count())) {
      if (!hosts) {
        say("error: host discovery has failed for ", seconds(since(begin)),
            " (--min-np-timeout); giving up; the last failure: ", discovery_error_);
        return std::nullopt;
      }
      say("error: only ", have, " usable slot(s)", hosts && !hosts->empty() ? " (" + format_hosts(*hosts) + ")" : "",
          ", fewer than --min-np ", o_.min_np, ", for ", seconds(since(begin)),
          " (--min-np-timeout); giving up");
      return std::nullopt;
    }
    if (!announced) {
      say("waiting for slots: ", have, " usable, --min-np is ", o_.min_np, " (", o_.hosts->describe(),
          "; giving up after ", seconds(static_cast<double>(o_.min_np_timeout.count()) / 1000), ")");
      announced = true;
    }
    std::this_thread::sleep_for(o_.discovery_interval);
  }
}

LaunchResult Driver::launch(const std::vector<HostSlots>& hosts, int np, const LaunchEnv& env) {
  LaunchResult r;
  std::map<std::string, std::string> vars = {  // runtime/elastic.h
      {EnvNames::kRunDir, run_dir_.string()},
      {EnvNames::kRunRestart, std::to_string(env.restart)},
      {EnvNames::kRunReason, env.reason},
      {EnvNames::kRunPrevNp, std::to_string(env.prev_np)},
      {EnvNames::kRunLastStep, std::to_string(env.last_step)},
      {EnvNames::kRunEventMs, std::to_string(env.event_ms)},
      {EnvNames::kRunHosts, format_hosts(hosts)},
      {EnvNames::kRunMemoryHalvings, std::to_string(env.memory_halvings)},
  };
  if (!o_.checkpoint_dir.empty()) vars[EnvNames::kRunCheckpointDir] = o_.checkpoint_dir;
  if (heartbeats_) {
    vars[EnvNames::kRunHeartbeat] = heartbeats_->target(hosts);
    heartbeats_->begin_launch(env.restart);
  }
  const JobEnvironment job_env = job_environment(std::move(vars));
  r.oom.before = read_oom_count();
  Watch w(start_job(mpirun_command(o_, hosts, np, job_env.forward, network_), job_env.vars));
  w.next_discovery = Clock::now() + o_.discovery_interval;
  while (!(w.eof && w.reaped)) {
    pump(w, g_stop_signal);
    read_events(w, r, env, np);
    watch_discovery(w, hosts, np, r);
    watch_heartbeats(w, r);
    end_stuck_mpirun(w, r.first_error);
  }
  w.output.flush();
  r.evidence.killed_rank = w.output.killed_rank();
  if (!w.output.lost_host().empty()) r.evidence.lost_hosts.push_back(w.output.lost_host());
  r.program_error = w.output.program_error();
  close(w.stderr_fd);
  for (const Event& e : events_->read_new()) note_error(e, r);
  r.status = WIFEXITED(w.status) ? WEXITSTATUS(w.status) : 128 + WTERMSIG(w.status);
  if (r.status != kResizeExitCode) finish_evidence(r.oom, w.output, r.status);
  return r;
}

void Driver::read_events(Watch& w, LaunchResult& r, const LaunchEnv& env, int np) {
  for (const Event& e : events_->read_new()) {
    if (e.name == "started") w.started = true;
    if (e.name == "ready") r.ready_seen = true;
    if (e.name == "first-step" && !r.first_step_seen) {
      r.first_step_seen = true;
      if (env.reason != "start" && env.event_ms > 0) {
        say("recovered: step ", e.fields.count("step") ? e.fields.at("step") : "?", " done on ", np,
            " rank(s), ", seconds(static_cast<double>(e.ms - env.event_ms) / 1000.0),
            " after the last launch ended");
      }
    }
    note_error(e, r);
  }
}

// A rank silent past --heartbeat-timeout: ended (launch_watch.h), named, and the launch
// treated as failed from here (end_stuck_mpirun ends an mpirun that does not end).
void Driver::watch_heartbeats(Watch& w, LaunchResult& r) {
  // Once the job has failed otherwise (an error, a lost daemon), its ranks end without a
  // goodbye: their silence is that failure's, not a new one.
  if (!heartbeats_ || r.evidence.silent_rank >= 0 || r.first_error != Clock::time_point{}) return;
  const auto s = end_silent_rank(w, *heartbeats_);
  if (!s) return;
  const std::string timeout = seconds(static_cast<double>(heartbeats_->timeout().count()) / 1000);
  events_out_->event("rank-silent rank=" + std::to_string(s->rank) + " host=" + s->host);
  if (!s->local) {
    say("rank ", s->rank, " on ", s->host, " sent no heartbeat for ", seconds(s->seconds),
        " (--heartbeat-timeout ", timeout, "): another machine, left to the collectives' timeout");
    return;
  }
  r.evidence.silent_rank = s->rank;
  say("rank ", s->rank, " (pid ", s->pid, " on ", s->host, ") sent no heartbeat for ", seconds(s->seconds),
      " (--heartbeat-timeout ", timeout, "): declared failed, ending the launch");
  if (r.first_error == Clock::time_point{}) r.first_error = Clock::now();
}

// Discovery while the job runs (a script runs beside the loop): more slots (up to max_np),
// or fewer than it uses, ask the job to resize.
void Driver::watch_discovery(Watch& w, const std::vector<HostSlots>& hosts, int np,
                             LaunchResult& r) {
  if (g_stop_signal || w.reaped) w.discovery.reset();  // ends a script still running
  if (!w.reaped && !g_stop_signal && o_.hosts->dynamic() && !r.resize_requested && !w.discovery &&
      Clock::now() >= w.next_discovery) {
    try {
      w.discovery.emplace(o_.hosts->start(o_.discovery_timeout));
    } catch (const Error& e) {
      discovery_failed(e);
      w.next_discovery = Clock::now() + o_.discovery_interval;
    }
  }
  if (w.discovery && w.discovery->poll(std::chrono::milliseconds(0))) {
    w.next_discovery = Clock::now() + o_.discovery_interval;
    if (const auto now_hosts = finish_discovery(*w.discovery)) {
      w.reason = resize_reason(hosts, np, *now_hosts, o_.max_np, o_.pp);
      w.resize_pending = !w.reason.empty();
    }
    w.discovery.reset();
  }
  // The job's ranks handle SIGUSR1 once they have started; mpirun forwards it to them.
  if (w.resize_pending && w.started && !r.resize_requested && !w.reaped) {
    say(w.reason, ": asking the job to resize");
    events_out_->event("resize-request np=" + std::to_string(np));
    w.output.expect_resize_exit();
    kill(w.pid, SIGUSR1);
    r.resize_requested = true;
  }
}

std::string Driver::shim_agent() const {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = "etr-run";
  return launch_shim_agent(self.string(), run_dir_.string(), launch_agent_words(o_.launch_agent));
}

void Driver::probe_hosts(FailureEvidence& e, const std::vector<HostSlots>& assigned) const {
  const std::vector<std::string> remote = remote_hosts(assigned);
  if (!e.nothing_named()) return;
  if (network_.local || remote.empty()) {  // one machine: a wait says nothing of a host
    e.probed = true;
    return;
  }
  say("no rank or host is named as the cause: checking that the launch agent reaches ",
      remote.size(), " host(s) (", seconds(kProbeDeadline.count() / 1000.0), " at most)");
  e.unreachable = unreachable_hosts(launch_agent_words(o_.launch_agent), remote, kProbeDeadline);
  e.probed = true;
}

void Driver::prepare_run_dir() {
  if (o_.run_dir.empty()) {
    const char* tmp = env_value("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/etr-run-XXXXXX";
    if (!mkdtemp(templ.data())) {
      throw IoError("cannot create a run directory in /tmp: " + std::string(std::strerror(errno)));
    }
    run_dir_ = templ;
  } else {
    run_dir_ = o_.run_dir;
    std::error_code ec;
    fs::create_directories(run_dir_, ec);
    if (ec) throw IoError("cannot create the run directory " + o_.run_dir + ": " + ec.message());
    fs::remove(run_dir_ / "events", ec);
    fs::remove(run_dir_ / "progress", ec);
  }
  events_.emplace(run_dir_ / "events");
  ElasticLaunch self;
  self.active = true;
  self.run_dir = run_dir_;
  events_out_.emplace(self);
}

void catch_stop_signals() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

int Driver::run() {
  prepare_run_dir();
  catch_stop_signals();
  LaunchEnv env;
  int exit_status = 1;
  for (;;) {
    auto hosts = wait_for_slots();
    if (!hosts) {
      if (g_stop_signal) say("stopped by signal ", g_stop_signal, " while waiting for slots");
      exit_status = g_stop_signal ? 128 + g_stop_signal : 1;
      break;
    }
    int np = whole_pipelines(o_, total_slots(*hosts));
    if (launches_ == 0 && o_.np > 0) np = std::min(np, o_.np);
    const auto assigned = take_slots(*hosts, np);
    if (const std::string why = launch_problem(o_, assigned, network_); !why.empty()) {
      say("error: ", why);
      break;
    }
    if (!network_.local) network_.rsh_agent = shim_agent();
    if (auto line = network_.describe("--iface or ETR_MPI_IFACE"); line != said_) say(said_ = line);
    ++launches_;
    const std::string halvings = std::to_string(env.memory_halvings);
    say("launch ", launches_, ": ", np, " rank(s) on ", format_hosts(assigned),
        env.reason == "start" ? std::string() : " (after a " + env.reason + ", relaunch " +
                                                    std::to_string(env.restart) + ")",
        env.memory_halvings > 0 ? " with ETR_RUN_MEMORY_HALVINGS=" + halvings : std::string());
    events_out_->event("launch n=" + std::to_string(launches_) + " np=" + std::to_string(np) +
                       " hosts=" + format_hosts(assigned) + " reason=" + env.reason +
                       (env.memory_halvings > 0 ? " halvings=" + halvings : std::string()));
    const LaunchResult r = launch(assigned, np, env);
    const int64_t ended_ms = unix_ms();
    const int64_t last_step = read_progress(run_dir_ / "progress");
    events_out_->event("exit status=" + std::to_string(r.status) +
                       " last_step=" + std::to_string(last_step));
    env.prev_np = np;
    env.event_ms = ended_ms;
    if (const auto status = after_launch(r, assigned, last_step, env)) {
      exit_status = *status;
      break;
    }
  }
  if (o_.run_dir.empty()) {
    std::error_code ec;
    fs::remove_all(run_dir_, ec);
  }
  return exit_status;
}

std::optional<int> Driver::after_launch(const LaunchResult& r,
                                        const std::vector<HostSlots>& assigned,
                                        int64_t last_step, LaunchEnv& env) {
  if (g_stop_signal) {
    say("stopped by signal ", g_stop_signal, "; the job was ended (last step ", last_step, ")");
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
  probe_hosts(evidence, assigned);
  const Blame b = blame(evidence, assigned);
  const std::string& who = b.why;
  if (b.whole_host()) {
    health_.exclude_now(b.host);
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

}  // namespace

int run_elastic(const RunOptions& options) {
  Driver d(options);
  return d.run();
}

}  // namespace etr::launcher
