#include "bench/elastic_session.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "bench/table.h"
#include "runtime/elastic.h"
#include "runtime/error.h"

extern char** environ;

namespace etr::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr auto kPoll = std::chrono::milliseconds(5);

// Set by the InterruptGuard's handler to the signal that arrived.
volatile sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int sig) {
  g_interrupted = sig;
}

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
    std::optional<Event> e = launcher::parse_event(line);
    if (!e) continue;
    if (e->name == "launch") out.emplace_back();
    if (!out.empty()) out.back().events.push_back(std::move(*e));
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

}  // namespace

// --- Launch ---

const Event* Launch::find(const std::string& name) const {
  for (const Event& e : events)
    if (e.name == name) return &e;
  return nullptr;
}

const Event& Launch::at(const std::string& name) const {
  if (const Event* e = find(name)) return *e;
  throw Error("launch " + events.front().fields.at("n") + " has no '" + name + "' event");
}

int64_t Launch::field(const std::string& name, const std::string& key) const {
  const Event& e = at(name);
  if (!e.fields.count(key)) throw Error("the '" + name + "' event has no " + key + "=");
  return std::stoll(e.fields.at(key));
}

// --- InterruptGuard ---

InterruptGuard::InterruptGuard() {
  struct sigaction sa = {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &old_[i]);
}

InterruptGuard::~InterruptGuard() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &old_[i], nullptr);
}

// --- ElasticSession ---

ElasticSession::ElasticSession(Options options, const fs::path& dir)
    : options_(std::move(options)), dir_(dir), run_dir_(dir / "run") {
  const Options& o = options_;
  set_slots(o.np);
  const fs::path script = dir / "discover.sh";
  std::ofstream(script) << "#!/bin/sh\nexec cat '" << (dir / "slots").string() << "'\n";
  fs::permissions(script, fs::perms::owner_all);
  std::vector<std::string> argv = {o.etr_run};
  if (!o.cluster.empty()) {  // on host 1, the others through the cluster's rsh
    argv = {o.cluster, "exec", "1", o.etr_run, "--launch-agent", o.cluster + " rsh"};
  }
  const std::pair<const char*, std::string> flags[] = {
      {"--np", std::to_string(o.np)},
      {"--min-np", "1"},
      {"--max-np", std::to_string(o.np + 1)},
      {"--host-discovery-script", script.string()},
      {"--discovery-interval", kDiscoveryInterval},
      {"--blacklist-after", "0"},  // never exclude localhost: it is all there is
      {"--checkpoint-dir", (dir / "ckpt").string()},
      {"--run-dir", run_dir_.string()}};
  for (const auto& [flag, value] : flags) argv.insert(argv.end(), {flag, value});
  argv.insert(argv.end(), {"--", o.etr_train, "--config", o.config});
  for (const std::string& set : o.sets) argv.insert(argv.end(), {"--set", set});
  start(argv);
}

int64_t ElasticSession::set_slots(int n) {
  const fs::path tmp = dir_ / "slots.tmp";
  {
    std::ofstream out(tmp);
    if (options_.cluster.empty()) out << "localhost:" << n << "\n";
    for (int i = 1; i <= n && !options_.cluster.empty(); ++i) out << "198.18.0." << i << ":1\n";
  }
  const int64_t now = unix_ms();
  fs::rename(tmp, dir_ / "slots");
  return now;
}

void ElasticSession::cluster(const std::string& args) const {
  const std::string command = "'" + options_.cluster + "' " + args;
  if (std::system(command.c_str()) != 0) throw Error("'" + command + "' failed");
}

int64_t ElasticSession::lose_host(int host) {
  const int64_t now = unix_ms();
  cluster("kill " + std::to_string(host));
  cluster("cut " + std::to_string(host));
  set_slots(host - 1);
  return now;
}

int64_t ElasticSession::restore_host(int host) {
  cluster("heal " + std::to_string(host));
  return set_slots(host);
}

std::vector<Launch> ElasticSession::launches() const {
  return read_launches(run_dir_ / "events");
}

int64_t ElasticSession::progress() const {
  std::ifstream in(run_dir_ / "progress");
  long long step = -1;
  return in >> step ? step : -1;
}

void ElasticSession::wait(const std::string& what, const std::function<bool()>& done) {
  const auto begin = Clock::now();
  while (!done()) {
    if (g_interrupted) throw Error("interrupted by signal " + std::to_string(g_interrupted));
    if (exited() && !done()) {
      throw Error("etr-run exited (status " + status() + ") before " + what);
    }
    if (std::chrono::duration<double>(Clock::now() - begin).count() > options_.timeout_s) {
      throw Error("timed out after " + cell("%g", options_.timeout_s) + " s (--timeout) waiting " +
                  "for " + what);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

std::vector<Launch> ElasticSession::wait_first_step(size_t n, const std::string& what) {
  std::vector<Launch> l;
  wait(what, [&] { return (l = launches()).size() >= n && l[n - 1].find("first-step"); });
  return l;
}

int64_t ElasticSession::wait_step(int64_t step) {
  int64_t p = -1;
  wait("step " + std::to_string(step), [&] { return (p = progress()) >= step; });
  return p;
}

pid_t ElasticSession::rank_pid(int rank) const {
  const std::vector<pid_t> p = job_processes(run_dir_, rank);
  if (p.size() != 1) {
    throw Error("found " + std::to_string(p.size()) + " processes of rank " + std::to_string(rank) +
                " (expected one)");
  }
  return p[0];
}

void ElasticSession::stop() {
  ::kill(pid_, SIGTERM);
  wait("etr-run to exit after SIGTERM", [&] { return exited(); });
}

void ElasticSession::start(std::vector<std::string> argv) {
  // etr-run must not see this process's MPI job: a singleton's or mpirun's variables
  // would make its mpirun join our job instead of starting its own.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    bool mpi = false;
    for (const char* p : {"OMPI_", "PMIX_", "OPAL_", "ORTE_", "HYDRA_"}) mpi |= kv.rfind(p, 0) == 0;
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

bool ElasticSession::exited() {
  if (!reaped_ && waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return reaped_;
}

std::string ElasticSession::status() const {
  return WIFEXITED(status_) ? std::to_string(WEXITSTATUS(status_))
                            : "signal " + std::to_string(WTERMSIG(status_));
}

void ElasticSession::end() noexcept {
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

}  // namespace etr::bench
