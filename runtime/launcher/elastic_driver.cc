#include "runtime/launcher/elastic_driver.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "runtime/elastic.h"
#include "runtime/error.h"
#include "runtime/launcher/mpirun_output.h"

extern char** environ;

namespace etr::launcher {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

volatile sig_atomic_t g_stop_signal = 0;
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

// One parsed line of <run dir>/events: "<unix ms> <event> key=value ...".
struct Event {
  int64_t ms = 0;
  std::string name;
  std::map<std::string, std::string> fields;
};

std::optional<Event> parse_event(const std::string& line) {
  std::istringstream in(line);
  Event e;
  if (!(in >> e.ms >> e.name)) return std::nullopt;
  std::string kv;
  while (in >> kv) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) e.fields[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return e;
}

// Follows the events file as the job appends to it.
class EventTail {
 public:
  explicit EventTail(fs::path path) : path_(std::move(path)) {}
  std::vector<Event> read_new() {
    std::vector<Event> out;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return out;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t start = 0;
    for (size_t nl; (nl = chunk.find('\n', start)) != std::string::npos; start = nl + 1) {
      if (auto e = parse_event(chunk.substr(start, nl - start))) out.push_back(*e);
    }
    offset_ += start;
    return out;
  }

 private:
  fs::path path_;
  size_t offset_ = 0;
};

int64_t read_progress(const fs::path& path) {
  std::ifstream in(path);
  long long step = -1;
  if (in >> step) return step;
  return -1;
}

// What one launch of the job did.
struct LaunchResult {
  int status = 0;          // exit status (128 + signal when mpirun was killed)
  int killed_rank = -1;    // from mpirun's report (MpirunOutput)
  int own_error_rank = -1; // from the job's "error ... own=1" event
  bool final_error = false;  // the job's "error ... final=1": a relaunch would fail alike
  bool resize_requested = false;
  bool first_step_seen = false;
  bool ready_seen = false;  // rank 0 got through its setup (config, model, restore)
  std::string program_error;  // mpirun could not start the program (MpirunOutput)
};

// A job's "error rank=R own=0|1 [final=1]" event: the first rank that named itself the
// cause (own=1), and whether a relaunch would fail the same way (final=1).
void note_error(const Event& e, LaunchResult& r) {
  if (e.name != "error") return;
  auto field = [&e](const char* k) { return e.fields.count(k) ? e.fields.at(k) : std::string(); };
  if (field("own") == "1" && r.own_error_rank < 0) r.own_error_rank = std::atoi(field("rank").c_str());
  if (field("final") == "1") r.final_error = true;
}

// The job's environment on top of etr-run's: the ETR_RUN_* variables of runtime/elastic.h.
struct LaunchEnv {
  int restart = 0;
  std::string reason = "start";
  int prev_np = 0;
  int64_t last_step = -1;
  int64_t event_ms = 0;
};

class Driver {
 public:
  explicit Driver(const RunOptions& o)
      : o_(o), health_(o.blacklist_after, o.blacklist_cooldown) {}

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

  const RunOptions& o_;
  HostHealth health_;
  fs::path run_dir_;
  std::optional<EventTail> events_;
  std::optional<ElasticReporter> events_out_;  // etr-run's own lines of the events file
  bool discovery_warned_ = false;
  bool discovered_once_ = false;
  std::string discovery_error_;  // the last discovery's error ("" after one that worked)
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
  // The job's environment: ETR_RUN_* plus whatever etr-run was given.
  std::map<std::string, std::string> vars = {
      {"ETR_RUN_DIR", run_dir_.string()},
      {"ETR_RUN_RESTART", std::to_string(env.restart)},
      {"ETR_RUN_REASON", env.reason},
      {"ETR_RUN_PREV_NP", std::to_string(env.prev_np)},
      {"ETR_RUN_LAST_STEP", std::to_string(env.last_step)},
      {"ETR_RUN_EVENT_MS", std::to_string(env.event_ms)},
      {"ETR_RUN_HOSTS", format_hosts(hosts)},
  };
  if (!o_.checkpoint_dir.empty()) vars["ETR_RUN_CHECKPOINT_DIR"] = o_.checkpoint_dir;
  if (!std::getenv("GOMP_SPINCOUNT")) vars["GOMP_SPINCOUNT"] = "10000";  // runtime/omp_env.h
  std::vector<std::string> names;
  for (const auto& [k, v] : vars) names.push_back(k);
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    const std::string name = kv.substr(0, kv.find('='));
    const bool ours = name.rfind("ETR_", 0) == 0 || name.rfind("OMP_", 0) == 0 ||
                      name == "GOMP_SPINCOUNT" || name == "OPENBLAS_NUM_THREADS";
    if (ours && !vars.count(name)) names.push_back(name);
  }
  const std::vector<std::string> argv_s = mpirun_command(o_, hosts, np, names);

  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) throw IoError(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw IoError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(err[1], STDERR_FILENO);
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    std::vector<char*> argv;
    for (const auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "etr-run: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(err[1]);

  const auto start = Clock::now();
  auto next_discovery = start + o_.discovery_interval;
  bool started = false, stop_forwarded = false, resize_pending = false;
  std::string reason;
  MpirunOutput output(STDERR_FILENO);
  bool eof = false;
  int status = 0;
  bool reaped = false;
  std::optional<Discovery> discovery;
  while (!(eof && reaped)) {
    if (!eof) {
      pollfd p{err[0], POLLIN, 0};
      const int pr = poll(&p, 1, 100);
      if (pr > 0) {
        char buf[65536];
        const ssize_t n = read(err[0], buf, sizeof buf);
        if (n > 0) {
          output.feed(buf, static_cast<size_t>(n));
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          eof = true;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!reaped) {
      const pid_t w = waitpid(pid, &status, WNOHANG);
      if (w == pid) reaped = true;
    }
    if (g_stop_signal && !stop_forwarded && !reaped) {
      kill(pid, SIGTERM);
      stop_forwarded = true;
    }
    for (const Event& e : events_->read_new()) {
      if (e.name == "started") started = true;
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
    // Discovery while the job runs (a script runs beside this loop): more slots (up to
    // max_np), or fewer than it uses.
    if (g_stop_signal || reaped) discovery.reset();  // ends a script still running
    if (!reaped && !g_stop_signal && o_.hosts->dynamic() && !r.resize_requested && !discovery &&
        Clock::now() >= next_discovery) {
      try {
        discovery.emplace(o_.hosts->start(o_.discovery_timeout));
      } catch (const Error& e) {
        discovery_failed(e);
        next_discovery = Clock::now() + o_.discovery_interval;
      }
    }
    if (discovery && discovery->poll(std::chrono::milliseconds(0))) {
      next_discovery = Clock::now() + o_.discovery_interval;
      if (const auto now_hosts = finish_discovery(*discovery)) {
        reason = resize_reason(hosts, np, *now_hosts, o_.max_np);
        resize_pending = !reason.empty();
      }
      discovery.reset();
    }
    // The job's ranks handle SIGUSR1 once they have started; mpirun forwards it to them.
    if (resize_pending && started && !r.resize_requested && !reaped) {
      say(reason, ": asking the job to resize");
      events_out_->event("resize-request np=" + std::to_string(np));
      output.expect_resize_exit();
      kill(pid, SIGUSR1);
      r.resize_requested = true;
    }
  }
  output.flush();
  r.killed_rank = output.killed_rank();
  r.program_error = output.program_error();
  close(err[0]);
  for (const Event& e : events_->read_new()) note_error(e, r);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

int Driver::run() {
  if (o_.run_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/etr-run-XXXXXX";
    if (!mkdtemp(templ.data())) throw IoError("cannot create a run directory in /tmp: " + std::string(std::strerror(errno)));
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
  ElasticReporter& log = *events_out_;

  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);

  LaunchEnv env;
  int failures = 0, resizes = 0, launches = 0;
  int exit_status = 1;
  for (;;) {
    auto hosts = wait_for_slots();
    if (!hosts) {
      if (g_stop_signal) say("stopped by signal ", g_stop_signal, " while waiting for slots");
      exit_status = g_stop_signal ? 128 + g_stop_signal : 1;
      break;
    }
    const int slots = total_slots(*hosts);
    int np = std::min(slots, o_.max_np);
    if (launches == 0 && o_.np > 0) np = std::min(np, o_.np);
    const auto assigned = take_slots(*hosts, np);
    if (const std::string why = local_program_problem(o_, assigned); !why.empty()) {
      say("error: ", why, "; give the job as an executable's path or a program on PATH");
      exit_status = 1;
      break;
    }
    ++launches;
    say("launch ", launches, ": ", np, " rank(s) on ", format_hosts(assigned),
        env.reason == "start" ? std::string() : " (after a " + env.reason + ", relaunch " +
                                                    std::to_string(env.restart) + ")");
    log.event("launch n=" + std::to_string(launches) + " np=" + std::to_string(np) + " hosts=" +
              format_hosts(assigned) + " reason=" + env.reason);
    const LaunchResult r = launch(assigned, np, env);
    const int64_t ended_ms = unix_ms();
    const int64_t last_step = read_progress(run_dir_ / "progress");
    log.event("exit status=" + std::to_string(r.status) + " last_step=" + std::to_string(last_step));
    if (g_stop_signal) {
      say("stopped by signal ", g_stop_signal, "; the job was ended (last step ", last_step, ")");
      exit_status = 128 + g_stop_signal;
      break;
    }
    if (r.status == 0) {
      say("the job completed after ", launches, " launch(es): ", failures, " failure(s), ", resizes,
          " resize(s)");
      exit_status = 0;
      break;
    }
    env.prev_np = np;
    env.last_step = last_step;
    env.event_ms = ended_ms;
    ++env.restart;
    if (r.status == kResizeExitCode) {
      ++resizes;
      env.reason = "resize";
      say("the job stopped at step ", last_step, " to resize; relaunching");
      continue;
    }
    if (!r.program_error.empty()) {  // mpirun could not start it on a host
      say("error: ", r.program_error, "; give the job as an executable's path or a program on PATH");
      exit_status = 1;
      break;
    }
    if (r.final_error) {
      say("error: the job stopped with an error that a relaunch would repeat (exit status ",
          r.status, ", after step ", last_step, "); not relaunching: see its error above");
      exit_status = r.status;
      break;
    }
    if (launches == 1 && !r.ready_seen) {
      // A bad configuration, a missing file, a program that is not an etr job: relaunching
      // would fail the same way.
      say("error: the job failed (exit status ", r.status, ") on its first launch before it "
          "was ready to train; not relaunching: see its error above");
      exit_status = r.status;
      break;
    }
    ++failures;
    env.reason = "failure";
    const int culprit = r.own_error_rank >= 0 ? r.own_error_rank : r.killed_rank;
    std::string who = "no rank is named as the cause";
    if (culprit >= 0) {
      std::string host;
      int first = 0;
      for (const auto& h : assigned) {
        if (culprit < first + h.slots) { host = h.host; break; }
        first += h.slots;
      }
      who = "rank " + std::to_string(culprit) + " on " + host;
      if (!host.empty() && health_.record_failure(host)) {
        say("host ", host, " failed ", health_.failures(host), " time(s) (--blacklist-after ",
            o_.blacklist_after, "): excluded for ",
            seconds(static_cast<double>(o_.blacklist_cooldown.count()) / 1000));
        log.event("exclude host=" + host);
      }
    }
    say("the job failed (exit status ", r.status, "; ", who, ") after step ", last_step, "; failure ",
        failures, " of at most ", o_.max_restarts + 1);
    if (failures > o_.max_restarts) {
      say("error: giving up: the job failed ", failures, " time(s) and --max-restarts is ",
          o_.max_restarts);
      exit_status = r.status;
      break;
    }
  }
  if (o_.run_dir.empty()) {
    std::error_code ec;
    fs::remove_all(run_dir_, ec);
  }
  return exit_status;
}

}  // namespace

int run_elastic(const RunOptions& options) {
  Driver d(options);
  return d.run();
}

}  // namespace etr::launcher
