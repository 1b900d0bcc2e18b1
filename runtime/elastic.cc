#include "runtime/elastic.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"
#include "runtime/env.h"

namespace etr {
namespace {

// Set by the SIGUSR1 handler, read by the training thread. The handler runs on whichever
// thread the signal lands on (a progress or writer thread, or the thread that raised it),
// so volatile sig_atomic_t, safe only against the same thread, would be a data race (TSan
// found it); a lock-free atomic is both signal-safe and thread-safe.
std::atomic<int> g_resize_requested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the SIGUSR1 handler needs a lock-free flag");

extern "C" void on_resize_signal(int) {
  g_resize_requested.store(1);
}

// The first stop signal (install_stop_signal_handler), 0 before one: the same kind of flag.
std::atomic<int> g_stop_signal{0};

// Whether install_stop_signal_handler caught SIGTERM, SIGINT (written before the handler
// is installed, read by it).
bool g_caught_term = false, g_caught_int = false;

extern "C" void on_job_stop_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  if (sig != SIGTERM && sig != SIGINT) return;
  // Either one, once: the next SIGTERM or SIGINT ends the process (sigaction is
  // async-signal-safe; both are blocked while this runs, so a second one waits for it).
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  if (g_caught_term) sigaction(SIGTERM, &dfl, nullptr);
  if (g_caught_int) sigaction(SIGINT, &dfl, nullptr);
}

const char* env(const char* name) {
  const char* v = env_value(name);
  return v && *v ? v : nullptr;
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  int64_t out = 0;
  const std::string_view s(v);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (ec != std::errc() || end != s.data() + s.size()) {
    throw ConfigError(std::string(name) + "='" + v + "' is not an integer (etr-run sets it)");
  }
  return out;
}

}  // namespace

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<std::pair<std::string, int>> parse_host_slots(const std::string& text) {
  std::vector<std::pair<std::string, int>> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    item = b == std::string::npos ? std::string() : item.substr(b, e - b + 1);
    begin = end + 1;
    if (item.empty()) {
      if (end == text.size()) break;
      continue;
    }
    const size_t colon = item.rfind(':');
    std::string host = colon == std::string::npos ? item : item.substr(0, colon);
    int slots = 1;
    if (colon != std::string::npos) {
      const std::string n = item.substr(colon + 1);
      auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), slots);
      if (ec != std::errc() || p != n.data() + n.size() || slots < 0) {
        throw ConfigError("'" + item + "' is not HOST:SLOTS with a whole number of slots");
      }
    }
    if (host.empty()) throw ConfigError("'" + item + "' has no host name before the ':'");
    out.emplace_back(std::move(host), slots);
  }
  return out;
}

ElasticLaunch ElasticLaunch::from_env() {
  ElasticLaunch l;
  const char* dir = env(EnvNames::kRunDir);
  if (!dir) return l;
  l.active = true;
  l.run_dir = dir;
  l.restart = static_cast<int>(env_int(EnvNames::kRunRestart, 0));
  if (const char* r = env(EnvNames::kRunReason)) l.reason = r;
  l.prev_world = static_cast<int>(env_int(EnvNames::kRunPrevNp, 0));
  l.last_step = env_int(EnvNames::kRunLastStep, -1);
  l.event_ms = env_int(EnvNames::kRunEventMs, 0);
  if (const char* h = env(EnvNames::kRunHosts)) l.hosts = parse_host_slots(h);
  if (const char* c = env(EnvNames::kRunCheckpointDir)) l.checkpoint_dir = c;
  if (const char* h = env(EnvNames::kRunHeartbeat)) l.heartbeat = h;
  return l;
}

std::string ElasticLaunch::host_of(int rank) const {
  if (rank < 0) return "";
  int first = 0;
  for (const auto& [host, slots] : hosts) {
    if (rank < first + slots) return host;
    first += slots;
  }
  return "";
}

void install_resize_signal_handler() {
  struct sigaction sa = {};
  sa.sa_handler = on_resize_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

bool resize_requested() { return g_resize_requested.load() != 0; }
void clear_resize_request() { g_resize_requested.store(0); }

void install_stop_signal_handler(bool term_and_int) {
  struct sigaction sa = {};
  sa.sa_handler = on_job_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);  // etr-run's request: every time
  if (!term_and_int) return;
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGINT);
  for (int sig : {SIGTERM, SIGINT}) {
    if (signal_ignored(sig)) continue;
    (sig == SIGTERM ? g_caught_term : g_caught_int) = true;
    sigaction(sig, &sa, nullptr);
  }
}

int stop_signal() { return g_stop_signal.load(); }

bool signal_ignored(int sig) {
  struct sigaction old = {};
  return sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN;
}

void clear_stop_request() { g_stop_signal.store(0); }

ElasticReporter::ElasticReporter(ElasticLaunch launch) : launch_(std::move(launch)) {}

ElasticReporter::~ElasticReporter() {
  if (progress_fd_ >= 0) ::close(progress_fd_);
}

void ElasticReporter::event(const std::string& text) const {
  if (!launch_.active) return;
  const std::string line = std::to_string(unix_ms()) + " " + text + "\n";
  const int fd = ::open((launch_.run_dir / "events").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  // One write of a short line to an O_APPEND file: lines from etr-run and the job never
  // interleave.
  [[maybe_unused]] ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
}

void ElasticReporter::progress(int64_t step) {
  if (!launch_.active) return;
  if (progress_fd_ < 0) {
    progress_fd_ = ::open((launch_.run_dir / "progress").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (progress_fd_ < 0) return;
  }
  // Fixed width, rewritten in place: a reader sees the old or the new number.
  char text[24];
  const int n = std::snprintf(text, sizeof text, "%20lld\n", static_cast<long long>(step));
  [[maybe_unused]] ssize_t w = ::pwrite(progress_fd_, text, static_cast<size_t>(n), 0);
}

}  // namespace etr
