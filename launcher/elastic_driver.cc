#include "launcher/elastic_driver_impl.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
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
#include "launcher/srun_launch.h"
#include "runtime/env.h"

namespace etr::launcher {

volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_stop_signals = 0;

namespace {

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  g_stop_signals = g_stop_signals + 1;
}

}  // namespace

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
    heartbeats_->begin_launch(env.restart, np);
    if (progress_) progress_->begin_launch();
  }
  JobEnvironment job_env = job_environment(std::move(vars));
  const std::vector<std::string> argv = job_command(hosts, np, job_env);
  r.oom.before = read_oom_count();
  Watch w(start_job(argv, job_env.vars));
  w.next_discovery = Clock::now() + o_.discovery_interval;
  while (!(w.eof && w.reaped)) {
    pump(w, watch_stop(w), wake_for(w, r));
    read_events(w, r, env, np);
    watch_discovery(w, hosts, np, r);
    watch_heartbeats(w, r, hosts);
    end_stuck_mpirun(w, r.first_error, heartbeats_ ? &*heartbeats_ : nullptr);
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

PumpWake Driver::wake_for(const Watch& w, const LaunchResult& r) const {
  PumpWake k;  // discovery and the progress watchdog: every 100 ms is soon enough
  k.by = std::min(k.by, next_due(w, r.first_error));
  if (w.stop_asked && w.end_at == Clock::time_point{}) k.by = std::min(k.by, w.stop_by);
  // While watch_heartbeats() reads the beats (until the launch failed otherwise): a beat
  // wakes the wait, and so does the moment a rank would fall silent.
  if (heartbeats_ && !w.reaped && r.first_error == Clock::time_point{}) {
    k.fd = heartbeats_->fd();
    k.by = std::min(k.by, heartbeats_->next_silence());
    if (!w.remote_silent.empty()) k.by = std::min(k.by, w.remote_silent_at + kSilentGather);
  }
  return k;
}

std::vector<std::string> Driver::job_command(const std::vector<HostSlots>& hosts, int np,
                                             JobEnvironment& env) const {
  if (!o_.use_srun()) return mpirun_command(o_, hosts, np, env.forward, network_);
  // A job step (srun_launch.h): rank r on the node of line r of SLURM_HOSTFILE.
  const fs::path hostfile = run_dir_ / "slurm-hostfile";
  std::ofstream out(hostfile, std::ios::trunc);
  out << hostfile_lines(hosts, np);
  if (!out.flush()) throw IoError("cannot write " + hostfile.string());
  SrunCommand c = srun_command(o_.srun, o_.srun_args, hosts, np, network_, hostfile, o_.command);
  for (auto& [k, v] : c.env) env.vars[k] = v;
  return c.argv;
}

void Driver::read_events(Watch& w, LaunchResult& r, const LaunchEnv& env, int np) {
  for (const Event& e : events_->read_new()) {
    if (e.name == "started") w.started = true;
    if (e.name == "ready") r.ready_seen = true;
    const bool exit_event = e.name == "stop-exit" || e.name == "resize-exit";
    if (exit_event && e.fields.count("saved") && e.fields.at("saved") == "1") {
      const auto step = e.fields.find("step");
      r.saved_step = step != e.fields.end() ? std::strtoll(step->second.c_str(), nullptr, 10) : 0;
    }
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

// Discovery while the job runs (a script runs beside the loop): more slots (up to max_np),
// or fewer than it uses, ask the job to resize.
void Driver::watch_discovery(Watch& w, const std::vector<HostSlots>& hosts, int np,
                             LaunchResult& r) {
  if (g_stop_signal || w.reaped) w.discovery.reset();  // ends a script still running
  if (!w.reaped && !g_stop_signal && o_.hosts->dynamic()) reprobe_unreachable();
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
    w.output.expect_own_exit();
    kill(w.pid, SIGUSR1);
    r.resize_requested = true;
  }
}

bool Driver::stop_again() {
  const int n = g_stop_signals;
  if (stop_first_ == Clock::time_point{}) {
    stop_first_ = Clock::now();
    stop_counted_ = n;
  } else if (n > stop_counted_ && Clock::now() - stop_first_ < kStopSameRequest) {
    stop_counted_ = n;
  }
  return n > stop_counted_;
}

int Driver::watch_stop(Watch& w) {
  if (!g_stop_signal || w.reaped) return 0;
  if (!w.stop_asked && (!w.started || o_.stop_timeout.count() == 0)) return g_stop_signal;
  if (!w.stop_asked) {
    say("signal ", g_stop_signal, ": asking the job to save its step and stop (",
        seconds(static_cast<double>(o_.stop_timeout.count()) / 1000),
        " at most, --stop-timeout; another signal ends it at once)");
    events_out_->event("stop-request signal=" + std::to_string(g_stop_signal));
    w.output.expect_own_exit();
    kill(w.pid, SIGUSR2);  // mpirun forwards it to every rank (runtime/elastic.h)
    w.stop_asked = true;
    w.stop_by = Clock::now() + o_.stop_timeout;
  }
  const bool again = stop_again();
  if (w.end_at == Clock::time_point{} && (again || Clock::now() >= w.stop_by)) {
    say(again ? "another signal" : "--stop-timeout passed",
        ": ending the job without waiting for its save");
    w.end_at = Clock::now();  // end_stuck_mpirun(): SIGTERM, then SIGKILL
  }
  return 0;
}

std::string Driver::shim_agent() const {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) self = "etr-run";
  return launch_shim_agent(self.string(), run_dir_.string(), launch_agent_words(o_.launch_agent));
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
  sigfillset(&sa.sa_mask);  // one at a time: g_stop_signals counts each
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    if (signal_ignored(sig)) continue;  // SIGHUP under nohup, a script's background job
    sigaction(sig, &sa, nullptr);
  }
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
    const auto assigned = take_slots(*hosts, np, previous_);
    previous_ = assigned;
    if (const std::string why = launch_problem(o_, assigned, network_); !why.empty()) {
      say("error: ", why);
      break;
    }
    if (!network_.local && !o_.use_srun()) network_.rsh_agent = shim_agent();
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

int run_elastic(const RunOptions& options) {
  Driver d(options);
  return d.run();
}

}  // namespace etr::launcher
