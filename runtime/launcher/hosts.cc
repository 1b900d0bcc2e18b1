#include "runtime/launcher/hosts.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/elastic.h"
#include "runtime/error.h"

namespace etr::launcher {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

bool parse_count(const std::string& text, int& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size() && out >= 0;
}

void add(std::vector<HostSlots>& hosts, const std::string& host, int slots) {
  for (auto& h : hosts) {
    if (h.host == host) {
      h.slots += slots;
      return;
    }
  }
  hosts.push_back({host, slots});
}

}  // namespace

std::vector<HostSlots> parse_host_list(const std::string& text) {
  std::vector<HostSlots> out;
  for (auto& [host, slots] : parse_host_slots(text)) add(out, host, slots);
  return out;
}

std::vector<HostSlots> parse_host_lines(const std::string& text, const std::string& source) {
  std::vector<HostSlots> out;
  std::istringstream in(text);
  std::string raw;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    std::string line = trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    auto bad = [&](const std::string& why) {
      return ConfigError(source + ", line " + std::to_string(number) + " ('" + line + "'): " + why +
                         "; write HOST, HOST:SLOTS or HOST slots=SLOTS");
    };
    std::string host = line;
    int slots = 1;
    const size_t space = line.find_first_of(" \t");
    if (space != std::string::npos) {
      host = line.substr(0, space);
      const std::string rest = trim(line.substr(space));
      if (rest.rfind("slots=", 0) != 0 || !parse_count(rest.substr(6), slots)) {
        throw bad("expected slots=N after the host name");
      }
    } else if (const size_t colon = line.rfind(':'); colon != std::string::npos) {
      host = line.substr(0, colon);
      if (!parse_count(line.substr(colon + 1), slots)) throw bad("the slot count is not a whole number");
    }
    if (host.empty()) throw bad("there is no host name");
    add(out, host, slots);
  }
  return out;
}

std::string format_hosts(const std::vector<HostSlots>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ',';
    out += h.host + ':' + std::to_string(h.slots);
  }
  return out;
}

int total_slots(const std::vector<HostSlots>& hosts) {
  int n = 0;
  for (const auto& h : hosts) n += h.slots;
  return n;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  if (host.rfind("127.", 0) == 0 && host.find_first_not_of("0123456789.") == std::string::npos) return true;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return false;
  const std::string self(name);
  return host == self || (host.size() < self.size() && self.rfind(host + ".", 0) == 0);
}

std::string HostSource::describe() const {
  switch (kind_) {
    case Kind::kList: return "--hosts " + value_;
    case Kind::kFile: return "hostfile " + value_;
    case Kind::kScript: return "discovery script " + value_;
  }
  return value_;
}

std::vector<HostSlots> HostSource::discover(std::chrono::milliseconds script_timeout) const {
  if (kind_ == Kind::kList) return parse_host_list(value_);
  if (kind_ == Kind::kFile) {
    std::error_code ec;
    if (std::filesystem::is_directory(value_, ec)) {
      throw IoError("the hostfile " + value_ + " is a directory; name a file of hosts");
    }
    std::ifstream in(value_);
    if (!in) throw IoError("cannot read the hostfile " + value_ + ": " + std::strerror(errno));
    std::stringstream text;
    text << in.rdbuf();
    return parse_host_lines(text.str(), "hostfile " + value_);
  }
  // A script: run it, read its standard output, wait at most script_timeout.
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw IoError(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw IoError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    signal(SIGPIPE, SIG_DFL);
    execl(value_.c_str(), value_.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "etr-run: cannot run the host discovery script %s: %s\n", value_.c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  std::string text;
  int status = 0;
  bool reaped = false;
  const auto deadline = std::chrono::steady_clock::now() + script_timeout;
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 50)));
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      // The script may have exited while a child of its own keeps the pipe open.
      if (waitpid(pid, &status, WNOHANG) == pid) {
        reaped = true;
        break;
      }
      continue;
    }
    if (r < 0) continue;
    char buf[4096];
    const ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  if (timed_out) kill(pid, SIGKILL);
  while (!reaped && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.3g s", static_cast<double>(script_timeout.count()) / 1000);
    throw IoError("the host discovery script " + value_ + " did not finish within " + limit);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw IoError("the host discovery script " + value_ + " failed (" +
                  (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                     : "signal " + std::to_string(WTERMSIG(status))) + ")");
  }
  return parse_host_lines(text, "the output of " + value_);
}

bool HostHealth::record_failure(const std::string& host, Clock::time_point now) {
  State& s = state_[host];
  if (s.excluded && now >= s.excluded_until) s = State{};  // its cool-down is over
  ++s.failures;
  if (blacklist_after_ > 0 && s.failures >= blacklist_after_ && !s.excluded) {
    s.excluded = true;
    s.excluded_until = now + cooldown_;
    return true;
  }
  return false;
}

bool HostHealth::excluded(const std::string& host, Clock::time_point now) const {
  auto it = state_.find(host);
  return it != state_.end() && it->second.excluded && now < it->second.excluded_until;
}

int HostHealth::failures(const std::string& host) const {
  auto it = state_.find(host);
  return it == state_.end() ? 0 : it->second.failures;
}

std::vector<HostSlots> HostHealth::usable(const std::vector<HostSlots>& hosts, Clock::time_point now) {
  std::vector<HostSlots> out;
  for (const auto& h : hosts) {
    auto it = state_.find(h.host);
    if (it != state_.end() && it->second.excluded) {
      if (now < it->second.excluded_until) continue;
      it->second = State{};  // cool-down over: a fresh start
    }
    if (h.slots > 0) out.push_back(h);
  }
  return out;
}

std::vector<HostSlots> take_slots(const std::vector<HostSlots>& hosts, int np) {
  std::vector<HostSlots> out;
  for (const auto& h : hosts) {
    if (np <= 0) break;
    const int n = std::min(np, h.slots);
    if (n > 0) out.push_back({h.host, n});
    np -= n;
  }
  return out;
}

}  // namespace etr::launcher
