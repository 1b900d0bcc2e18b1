#include "bench/elastic_bench.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_context.h"
#include "bench/table.h"
#include "examples/gpt/gpt_config.h"
#include "runtime/config/train_config.h"
#include "runtime/elastic.h"
#include "runtime/error.h"

extern char** environ;

namespace etr::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kDiscoveryInterval = "0.2";  // etr-run --discovery-interval, seconds
constexpr int64_t kSteadyFrom = 3;  // the steady window starts after this step (warm-up)
constexpr auto kPoll = std::chrono::milliseconds(5);
const double kNone = std::nan("");  // a part that does not apply to a row

// Set by SIGINT, SIGTERM or SIGHUP while the bench runs (a signal handler's only way to
// speak): the waits then throw, and the Session's destructor ends etr-run and the job,
// which run in their own process group and so do not get the terminal's Ctrl-C.
volatile sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int sig) {
  g_interrupted = sig;
}

class InterruptGuard {
 public:
  InterruptGuard() {
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~InterruptGuard() {
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3];
};

struct ElasticArgs {
  std::string etr_run, etr_train, config, dir = ".", json;
  std::vector<std::string> overrides;
  int rounds = 3, np = 2, checkpoint_every = 10;
  double timeout_s = 60;
  bool keep = false;
};

// One line of <run dir>/events: "<unix ms> <event> key=value ...".
struct Event {
  int64_t ms = 0;
  std::string name;
  std::map<std::string, std::string> fields;
};

// The events of one launch: its "launch" line up to the next one (the job's events, then
// etr-run's resize-request and exit).
struct Launch {
  std::vector<Event> events;
  const Event* find(const std::string& name) const {
    for (const Event& e : events)
      if (e.name == name) return &e;
    return nullptr;
  }
  const Event& at(const std::string& name) const {
    if (const Event* e = find(name)) return *e;
    throw Error("launch " + events.front().fields.at("n") + " has no '" + name + "' event");
  }
  int64_t ms(const std::string& name) const { return at(name).ms; }
  int64_t field(const std::string& name, const std::string& key) const {
    const Event& e = at(name);
    if (!e.fields.count(key)) throw Error("the '" + name + "' event has no " + key + "=");
    return std::stoll(e.fields.at(key));
  }
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The events file's whole lines (a line being appended is left for the next read).
std::vector<Launch> read_launches(const fs::path& path) {
  std::vector<Launch> out;
  const std::string text = read_file(path);
  std::istringstream in(text.substr(0, text.rfind('\n') + 1));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    Event e;
    if (!(words >> e.ms >> e.name)) continue;
    for (std::string kv; words >> kv;) {
      const size_t eq = kv.find('=');
      if (eq != std::string::npos) e.fields[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (e.name == "launch") out.emplace_back();
    if (!out.empty()) out.back().events.push_back(std::move(e));
  }
  return out;
}

// The processes whose environment has ETR_RUN_DIR=run_dir: mpirun and the job's ranks
// (etr-run exports it to them and to no one else), optionally only the given rank.
std::vector<pid_t> job_processes(const fs::path& run_dir, int rank = -1) {
  const std::string dir = '\0' + std::string("ETR_RUN_DIR=") + run_dir.string() + '\0';
  const std::string key = '\0' + std::string("OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + '\0';
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = '\0' + read_file(entry.path() / "environ") + '\0';
    if (env.find(dir) == std::string::npos) continue;
    if (rank >= 0 && env.find(key) == std::string::npos) continue;
    out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

// One etr-run session in `dir` (made by the caller): etr-run as this process's child, the
// leader of its own process group, with its output in dir/etr-run.log; its run directory
// dir/run, checkpoints in dir/ckpt and the slots its discovery script prints in dir/slots.
// The destructor ends etr-run and whatever of the job is left.
class Session {
 public:
  Session(const ElasticArgs& a, const fs::path& dir) : a_(a), dir_(dir), run_dir_(dir / "run") {
    set_slots(a.np);
    const fs::path script = dir / "discover.sh";
    std::ofstream(script) << "#!/bin/sh\nexec cat '" << (dir / "slots").string() << "'\n";
    fs::permissions(script, fs::perms::owner_all);
    std::vector<std::string> argv = {a.etr_run};
    const std::pair<const char*, std::string> flags[] = {
        {"--np", std::to_string(a.np)},
        {"--min-np", "1"},
        {"--max-np", std::to_string(a.np + 1)},
        {"--host-discovery-script", script.string()},
        {"--discovery-interval", kDiscoveryInterval},
        {"--blacklist-after", "0"},  // never exclude localhost: it is all there is
        {"--checkpoint-dir", (dir / "ckpt").string()},
        {"--run-dir", run_dir_.string()}};
    for (const auto& [flag, value] : flags) argv.insert(argv.end(), {flag, value});
    argv.insert(argv.end(), {"--", a.etr_train, "--config", a.config});
    for (const std::string& set : job_overrides(a)) argv.insert(argv.end(), {"--set", set});
    start(argv);
  }
  ~Session() { end(); }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // What the bench adds to the job's config: a schedule that outlasts the rounds, the
  // checkpoint interval, and quiet logs; then the user's --set.
  static std::vector<std::string> job_overrides(const ElasticArgs& a) {
    std::vector<std::string> s = {"schedule.max_steps=100000000",
                                  "checkpoint.every=" + std::to_string(a.checkpoint_every),
                                  "log.log_every=100",
                                  "log.sample_tokens=0",
                                  "log.metrics_file=",
                                  "log.eval_every=0"};
    s.insert(s.end(), a.overrides.begin(), a.overrides.end());
    return s;
  }

  // Replaces the slots file (atomically: the script never reads half of it); returns when.
  int64_t set_slots(int n) {
    const fs::path tmp = dir_ / "slots.tmp";
    std::ofstream(tmp) << "localhost:" << n << "\n";
    const int64_t now = unix_ms();
    fs::rename(tmp, dir_ / "slots");
    return now;
  }

  std::vector<Launch> launches() const { return read_launches(run_dir_ / "events"); }
  int64_t progress() const {
    std::ifstream in(run_dir_ / "progress");
    long long step = -1;
    return in >> step ? step : -1;
  }

  // Polls until `done`; throws when etr-run exits first or after --timeout.
  void wait(const std::string& what, const std::function<bool()>& done) {
    const auto begin = Clock::now();
    while (!done()) {
      if (g_interrupted) throw Error("interrupted by signal " + std::to_string(g_interrupted));
      if (exited() && !done()) {
        throw Error("etr-run exited (status " + status() + ") before " + what);
      }
      if (std::chrono::duration<double>(Clock::now() - begin).count() > a_.timeout_s) {
        throw Error("timed out after " + cell("%g", a_.timeout_s) + " s (--timeout) waiting " +
                    "for " + what);
      }
      std::this_thread::sleep_for(kPoll);
    }
  }
  // Waits for launch n (1-based) to complete its first step; returns every launch so far.
  std::vector<Launch> wait_first_step(size_t n, const std::string& what) {
    std::vector<Launch> l;
    wait(what, [&] { return (l = launches()).size() >= n && l[n - 1].find("first-step"); });
    return l;
  }
  // Waits until rank 0 has completed `step` (of the current launch); returns the step seen.
  int64_t wait_step(int64_t step) {
    int64_t p = -1;
    wait("step " + std::to_string(step), [&] { return (p = progress()) >= step; });
    return p;
  }
  pid_t rank_pid(int rank) const {
    const std::vector<pid_t> p = job_processes(run_dir_, rank);
    if (p.size() != 1) {
      throw Error("found " + std::to_string(p.size()) + " processes of rank " +
                  std::to_string(rank) + " (expected one)");
    }
    return p[0];
  }
  // Ends the session as a user would (SIGTERM: etr-run ends the job) and waits for it.
  void stop() {
    ::kill(pid_, SIGTERM);
    wait("etr-run to exit after SIGTERM", [&] { return exited(); });
  }

 private:
  void start(std::vector<std::string> argv) {
    // etr-run must not see this process's MPI job: a singleton's or mpirun's variables
    // would make its mpirun join our job instead of starting its own.
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      bool mpi = false;
      for (const char* p : {"OMPI_", "PMIX_", "OPAL_", "ORTE_", "HYDRA_"})
        mpi |= kv.rfind(p, 0) == 0;
      if (!mpi) env.push_back(kv);
    }
    std::vector<char*> cargv, cenv;
    for (auto& s : argv) cargv.push_back(s.data());
    for (auto& s : env) cenv.push_back(s.data());
    cargv.push_back(nullptr);
    cenv.push_back(nullptr);
    // Every online CPU: under mpirun this process may be bound to one core, and the job
    // must get the machine as it would without the bench.
    cpu_set_t all;
    CPU_ZERO(&all);
    for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
    const int log = ::open((dir_ / "etr-run.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log < 0) throw IoError("cannot create " + (dir_ / "etr-run.log").string());
    pid_ = fork();
    if (pid_ == 0) {  // async-signal-safe calls only until exec
      setpgid(0, 0);
      dup2(log, STDOUT_FILENO);
      dup2(log, STDERR_FILENO);
      close_range(3, ~0U, 0);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      sched_setaffinity(0, sizeof all, &all);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    ::close(log);
    if (pid_ < 0) throw Error("fork failed; cannot start etr-run");
    setpgid(pid_, pid_);  // also here: no race with a kill of the group
  }

  bool exited() {
    if (!reaped_ && waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    return reaped_;
  }
  std::string status() const {
    return WIFEXITED(status_) ? std::to_string(WEXITSTATUS(status_))
                              : "signal " + std::to_string(WTERMSIG(status_));
  }

  // SIGTERM to etr-run, SIGKILL to its group after 10 s, then to any rank or mpirun left.
  void end() noexcept {
    if (pid_ <= 0) return;
    if (!exited()) {
      ::kill(pid_, SIGTERM);
      const auto begin = Clock::now();
      while (!exited() && Clock::now() - begin < std::chrono::seconds(10))
        std::this_thread::sleep_for(kPoll);
      if (!exited()) {
        ::kill(-pid_, SIGKILL);
        waitpid(pid_, &status_, 0);
        reaped_ = true;
      }
    }
    try {
      for (int i = 0; i < 200; ++i) {  // mpirun ends its ranks itself, shortly
        const std::vector<pid_t> left = job_processes(run_dir_);
        if (left.empty()) break;
        if (i >= 100) {
          for (pid_t p : left) ::kill(p, SIGKILL);
        }
        std::this_thread::sleep_for(kPoll * 2);
      }
    } catch (...) {
    }
  }

  const ElasticArgs& a_;
  fs::path dir_, run_dir_;
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

// One start or recovery, in ms; kNone where a part does not apply.
struct Phase {
  double detect = kNone, agree_save = kNone, exit = kNone, relaunch = kNone, restore = kNone,
         first_step = kNone, total = kNone;
  int64_t steps_lost = -1;  // -1: does not apply
};

struct Round {
  Phase cold, steady, kill, join, leave;  // steady: total = ms/step at np
};

// The first launch: from etr-run's launch line to its first step ("relaunch" is the
// launch, "restore" building the model with nothing to restore).
Phase cold_start(const Launch& l) {
  Phase p;
  p.relaunch = static_cast<double>(l.ms("started") - l.ms("launch"));
  p.restore = static_cast<double>(l.ms("ready") - l.ms("started"));
  p.first_step = static_cast<double>(l.ms("first-step") - l.ms("ready"));
  p.total = static_cast<double>(l.ms("first-step") - l.ms("launch"));
  return p;
}

// From `trigger_ms` (the kill, or the slots file rewritten) to the first step of `after`,
// the launch that followed `before`. The parts add up to the total.
Phase recovery(const Launch& before, const Launch& after, int64_t trigger_ms, bool resize) {
  Phase p;
  const int64_t exit = before.ms("exit");
  if (resize) {
    if (before.field("resize-exit", "saved") != 1) throw Error("the resize's save failed");
    p.detect = static_cast<double>(before.ms("resize-request") - trigger_ms);
    p.agree_save = static_cast<double>(before.ms("resize-exit") - before.ms("resize-request"));
    p.exit = static_cast<double>(exit - before.ms("resize-exit"));
  } else {
    p.detect = static_cast<double>(exit - trigger_ms);
  }
  p.relaunch = static_cast<double>(after.ms("started") - exit);
  p.restore = static_cast<double>(after.ms("ready") - after.ms("started"));
  p.first_step = static_cast<double>(after.ms("first-step") - after.ms("ready"));
  p.total = static_cast<double>(after.ms("first-step") - trigger_ms);
  p.steps_lost = before.field("exit", "last_step") - after.field("restored", "step");
  return p;
}

void expect_launch(const Launch& l, int np, const std::string& reason) {
  const auto& f = l.at("launch").fields;
  if (f.at("np") != std::to_string(np) || f.at("reason") != reason) {
    throw Error("etr-run's launch " + f.at("n") + " is np=" + f.at("np") + " reason=" +
                f.at("reason") + "; expected np=" + std::to_string(np) + " reason=" + reason);
  }
}

// printf into a string, for lines longer than cell() takes.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buf[1024];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

Round measure_round(const ElasticArgs& a, const fs::path& dir) {
  Session s(a, dir);
  const int every = a.checkpoint_every;
  Round r;
  std::vector<Launch> l = s.wait_first_step(1, "the first step of the first launch");
  r.cold = cold_start(l[0]);

  // Steady state: whole steps between two polls of the progress file.
  const int64_t from = s.wait_step(kSteadyFrom);
  const auto t0 = Clock::now();
  const int64_t to = s.wait_step(from + every);
  r.steady.total = ms_since(t0) / static_cast<double>(to - from);

  // kill -9 of the last rank right after the step midway between two checkpoints.
  const pid_t victim = s.rank_pid(a.np - 1);
  int64_t kill_at = to + 1;
  while (kill_at % every != every / 2) ++kill_at;
  s.wait_step(kill_at);
  const int64_t kill_ms = unix_ms();
  if (::kill(victim, SIGKILL) != 0)
    throw Error("kill -9 of rank " + std::to_string(a.np - 1) + " failed");
  l = s.wait_first_step(2, "the first step after the kill");
  expect_launch(l[1], a.np, "failure");
  r.kill = recovery(l[0], l[1], kill_ms, false);

  // Join one slot, then leave it again, each after a few steps at the current size.
  s.wait_step(l[1].field("first-step", "step") + 2);
  const int64_t join_ms = s.set_slots(a.np + 1);
  l = s.wait_first_step(3, "the first step at np " + std::to_string(a.np + 1));
  expect_launch(l[2], a.np + 1, "resize");
  r.join = recovery(l[1], l[2], join_ms, true);
  s.wait_step(l[2].field("first-step", "step") + 2);
  const int64_t leave_ms = s.set_slots(a.np);
  l = s.wait_first_step(4, "the first step back at np " + std::to_string(a.np));
  expect_launch(l[3], a.np, "resize");
  r.leave = recovery(l[2], l[3], leave_ms, true);
  s.stop();
  return r;
}

// --- Output ---

// Median over rounds of one part of one row; "-" where it does not apply.
std::string median_cell(const std::vector<Round>& rounds, Phase Round::*row, double Phase::*part) {
  std::vector<double> v;
  for (const Round& r : rounds)
    if (!std::isnan(r.*row.*part)) v.push_back(r.*row.*part);
  return v.empty() ? "-" : cell("%.0f", median(v));
}

// Median over rounds of the row's total relative to the same round's `ref` total.
double median_ratio(const std::vector<Round>& rounds, Phase Round::*row, Phase Round::*ref) {
  std::vector<double> v;
  for (const Round& r : rounds) v.push_back((r.*row).total / (r.*ref).total);
  return median(v);
}

std::string steps_lost_cell(const std::vector<Round>& rounds, Phase Round::*row) {
  int64_t lo = INT64_MAX, hi = -1;
  for (const Round& r : rounds) {
    lo = std::min(lo, (r.*row).steps_lost);
    hi = std::max(hi, (r.*row).steps_lost);
  }
  if (hi < 0) return "-";
  return lo == hi ? std::to_string(lo) : std::to_string(lo) + "-" + std::to_string(hi);
}

struct RowSpec {
  std::string what;
  int np;
  Phase Round::*phase;
  const char* key;  // in the JSON
};

nlohmann::json print_table(const BenchContext& ctx, const ElasticArgs& a,
                           const std::vector<Round>& rounds) {
  const std::string np = std::to_string(a.np), np1 = std::to_string(a.np + 1);
  const RowSpec rows[] = {
      {"cold start (reference)", a.np, &Round::cold, "cold_start"},
      {"steady step (reference)", a.np, &Round::steady, "steady_step"},
      {"kill -9 rank " + std::to_string(a.np - 1), a.np, &Round::kill, "kill"},
      {"join np " + np + " -> " + np1, a.np + 1, &Round::join, "join"},
      {"leave np " + np1 + " -> " + np, a.np, &Round::leave, "leave"},
  };
  struct Part {
    const char* title;
    const char* key;  // in the JSON
    double Phase::*ms;
  };
  const Part parts[] = {{"detect", "detect_ms", &Phase::detect},
                        {"agree+save", "agree_save_ms", &Phase::agree_save},
                        {"exit", "exit_ms", &Phase::exit},
                        {"relaunch", "relaunch_ms", &Phase::relaunch},
                        {"restore", "restore_ms", &Phase::restore},
                        {"first step", "first_step_ms", &Phase::first_step},
                        {"total", "total_ms", &Phase::total}};
  Table t;
  const std::string group = "ms, median of " + std::to_string(rounds.size()) +
                            (rounds.size() == 1 ? " round" : " rounds");
  t.add_column("what                   ", 23).add_column("np", 2);
  for (const Part& part : parts) t.add_column(part.title, 6, group);
  t.add_column("best total", 10).add_column("x cold start", 12).add_column("in steps", 8);
  t.add_column("steps lost", 10);
  ctx.print(t.header());
  nlohmann::json out;
  for (const RowSpec& row : rows) {
    std::vector<std::string> cells = {cell("%-23s", row.what.c_str()), std::to_string(row.np)};
    for (const Part& part : parts) cells.push_back(median_cell(rounds, row.phase, part.ms));
    double best = INFINITY;
    nlohmann::json per_round = nlohmann::json::array();
    for (const Round& r : rounds) {
      const Phase& p = r.*row.phase;
      best = std::min(best, p.total);
      nlohmann::json j = {{"steps_lost", p.steps_lost}};
      for (const Part& part : parts)
        if (!std::isnan(p.*part.ms)) j[part.key] = p.*part.ms;
      per_round.push_back(j);
    }
    cells.push_back(cell("%.0f", best));
    cells.push_back(cell("%.2f", median_ratio(rounds, row.phase, &Round::cold)));
    cells.push_back(cell("%.1f", median_ratio(rounds, row.phase, &Round::steady)));
    cells.push_back(steps_lost_cell(rounds, row.phase));
    ctx.print(t.row(cells));
    out[row.key] = per_round;
  }
  return out;
}

void print_header(const BenchContext& ctx, const ElasticArgs& a, const TrainConfig& c) {
  const gpt::GptConfig g = gpt::GptConfig::from(c.model());
  const double params = static_cast<double>(g.num_parameters());
  const int cpus = ctx.machine().cpus_online;
  std::string text = "# etr-bench elastic: " + a.config + ": " + g.str();
  text += format(
      ", global batch %d (micro-batch %d); checkpoint %.1f MB (param + adam.m + "
      "adam.v, f32) every %d steps, %s\n",
      c.batch().global_batch(), c.batch().micro_batch(), 3 * 4 * params / 1e6, a.checkpoint_every,
      c.checkpoint().async() ? "async" : "sync");
  text += format(
      "# etr-run on localhost:%d: kill -9 of one rank, join to %d slots, leave back to "
      "%d; discovery every %s s; %d round(s), each a fresh etr-run session; %d CPUs",
      a.np, a.np + 1, a.np, kDiscoveryInterval, a.rounds, cpus);
  if (cpus < a.np + 1) text += " (np " + std::to_string(a.np + 1) + " oversubscribes them)";
  ctx.print(text + "\n");
}

void print_notes(const BenchContext& ctx, const ElasticArgs& a, const std::vector<Round>& r) {
  std::vector<double> lost_ms;
  for (const Round& x : r)
    lost_ms.push_back(static_cast<double>(x.kill.steps_lost) * x.steady.total);
  std::string text =
      "# detect: kill -9 -> etr-run saw mpirun exit; join/leave: slots file rewritten -> etr-run "
      "asked the job to resize. agree+save: -> the ranks stopped at a step boundary and saved "
      "(resize-exit); exit: -> mpirun exited\n"
      "# relaunch: -> the new ranks started (MPI initialised); restore: -> model built and "
      "checkpoint read (cold start: built, nothing to read); first step: -> the first step done. "
      "Cold start: the same from etr-run's launch\n"
      "# x cold start, in steps: median of each round's total / that round's cold start, "
      "steady step\n";
  text += format(
      "# steps lost: the last step done - the step resumed from; the kill comes "
      "midway between checkpoints (every %d): redoing the lost steps costs %.0f ms "
      "more (median), not in total\n",
      a.checkpoint_every, median(lost_ms));
  ctx.print(text);
}

// --- The subcommand ---

// Where etr-run or etr-train is by default: in the build tree, `build_dir` beside
// etr-bench's bench/; installed, in etr-bench's own directory. "" when neither.
std::string find_program(const std::string& build_dir, const std::string& name) {
  std::error_code ec;
  const fs::path here = fs::read_symlink("/proc/self/exe", ec).parent_path();
  if (ec) return "";
  for (const fs::path& p : {here / ".." / build_dir / name, here / name}) {
    if (::access(p.c_str(), X_OK) == 0) return fs::weakly_canonical(p, ec).string();
  }
  return "";
}

void resolve_paths(ElasticArgs& a) {
  if (a.etr_run.empty()) a.etr_run = find_program("runtime/launcher", "etr-run");
  if (a.etr_train.empty()) a.etr_train = find_program("examples/train", "etr-train");
  for (const auto& [path, flag] :
       {std::pair{a.etr_run, "--etr-run"}, {a.etr_train, "--etr-train"}}) {
    if (path.empty() || ::access(path.c_str(), X_OK) != 0) {
      throw ConfigError(std::string(path.empty() ? "cannot find the program beside etr-bench"
                                                 : "cannot run " + path) +
                        "; build it (ninja etr-run etr-train) or pass " + flag);
    }
  }
  if (a.config.empty()) a.config = std::string(ETR_SOURCE_DIR) + "/configs/demo.pbtxt";
  if (!fs::exists(a.config)) throw ConfigError("no config " + a.config + "; pass --config");
  std::error_code ec;
  a.etr_run = fs::absolute(a.etr_run, ec).string();
  a.etr_train = fs::absolute(a.etr_train, ec).string();
  a.config = fs::absolute(a.config, ec).string();
}

// The run's directory inside --dir, removed at the end unless kept (with --dir itself
// when this run made it and it is empty).
struct WorkDir {
  fs::path path;
  bool keep = false, made_parent = false;
  ~WorkDir() {
    std::error_code ec;
    if (keep) return;
    fs::remove_all(path, ec);
    if (made_parent) fs::remove(path.parent_path(), ec);
  }
};

void run(BenchContext& ctx, ElasticArgs a) {
  if (ctx.size() > 1) {
    throw ConfigError(
        "etr-bench elastic runs on one rank and starts etr-run itself: run it "
        "without mpirun, or with -np 1");
  }
  resolve_paths(a);
  TrainConfig config = load_config(a.config);
  apply_overrides(config, Session::job_overrides(a));
  resolve(config);
  WorkDir work{fs::absolute(a.dir) / ("etr-bench-elastic-" + std::to_string(::getpid())), a.keep};
  std::error_code ec;
  work.made_parent = !fs::exists(a.dir, ec);
  fs::create_directories(work.path, ec);
  if (ec) throw IoError("cannot create " + work.path.string() + ": " + ec.message());
  print_header(ctx, a, config);
  const InterruptGuard interrupts;

  std::vector<Round> rounds;
  for (int i = 1; i <= a.rounds; ++i) {
    const fs::path dir = work.path / ("round-" + std::to_string(i));
    try {
      fs::create_directory(dir);
      rounds.push_back(measure_round(a, dir));
    } catch (const std::exception& e) {
      work.keep = true;
      throw AgreedError("round " + std::to_string(i) + ": " + e.what() + "; etr-run's output (" +
                        (dir / "etr-run.log").string() + ") and the events (" +
                        (dir / "run" / "events").string() + ") are kept");
    }
    const Round& r = rounds.back();
    ctx.print(
        format("# round %d of %d: cold start %.0f ms, step %.1f ms, kill -9 %.0f ms (%lld steps "
               "lost), join %.0f ms, leave %.0f ms\n",
               i, a.rounds, r.cold.total, r.steady.total, r.kill.total,
               static_cast<long long>(r.kill.steps_lost), r.join.total, r.leave.total));
  }
  nlohmann::json rows = print_table(ctx, a, rounds);
  print_notes(ctx, a, rounds);
  if (a.keep)
    ctx.print("# kept " + work.path.string() + " (each round's events and etr-run's output)\n");
  if (!a.json.empty()) {
    ctx.write_json(a.json, {{"benchmark", "elastic"},
                            {"config", format_config(config)},
                            {"machine", ctx.machine().to_json()},
                            {"np", a.np},
                            {"checkpoint_every", a.checkpoint_every},
                            {"discovery_interval_s", std::stod(kDiscoveryInterval)},
                            {"rows", rows}});
  }
}

}  // namespace

void add_elastic_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<ElasticArgs>();
  CLI::App* cmd = app.add_subcommand(
      "elastic",
      "Recovery from kill -9 and resizing under etr-run beside a cold start and a step "
      "(one rank, no mpirun: bench/run_elastic.sh)");
  cmd->add_option("--etr-run", args->etr_run,
                  "etr-run (default: the one built or installed with etr-bench)");
  cmd->add_option("--etr-train", args->etr_train, "etr-train (default: as --etr-run)");
  cmd->add_option("--config", args->config,
                  "The job's config (default: the source tree's configs/demo.pbtxt)");
  cmd->add_option("--set", args->overrides, "Override a field of the job's config (repeatable)");
  cmd->add_option("--rounds", args->rounds, "Rounds, each a fresh etr-run session")
      ->capture_default_str();
  cmd->add_option("--np", args->np, "Ranks of the job; it joins to np + 1 and leaves back")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", args->checkpoint_every,
                  "The job's checkpoint interval in steps")
      ->capture_default_str();
  cmd->add_option("--timeout", args->timeout_s,
                  "Seconds any one wait may take before the bench gives up")
      ->capture_default_str();
  cmd->add_option(
         "--dir", args->dir,
         "Directory for the run's files; the run works in a new subdirectory of it and removes it")
      ->capture_default_str();
  cmd->add_flag("--keep", args->keep,
                "Keep the run's subdirectory (each round's events and etr-run's output)");
  cmd->add_option("--json", args->json, "Also write the figures to this JSON file");
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->rounds < 1 || args->np < 1 || args->checkpoint_every < 2 ||
                        !(args->timeout_s > 0)) {
                      throw ConfigError(
                          "--rounds and --np must be at least 1, --checkpoint-every "
                          "at least 2 and --timeout positive");
                    }
                    run(ctx, *args);
                  }});
}

}  // namespace etr::bench
