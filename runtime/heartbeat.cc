#include "runtime/heartbeat.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <iterator>

#include "runtime/error.h"
#include "runtime/peer_wait.h"

namespace etr {
namespace {

// A UDP socket connected to "address:port" ([v6]:port too); -1 and `error` set otherwise.
int connect_udp(const std::string& target, std::string& error) {
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos || colon + 1 == target.size()) {
    error = "it is not address:port";
    return -1;
  }
  std::string host = target.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = 0;
  for (char c : target.substr(colon + 1)) {
    if (c < '0' || c > '9' || port > 65535) {
      error = "its port is not a number in [1, 65535]";
      return -1;
    }
    port = port * 10 + (c - '0');
  }
  if (port < 1 || port > 65535) {
    error = "its port is not a number in [1, 65535]";
    return -1;
  }
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v6;
  } else {
    error = "'" + host + "' is not a numeric address";
    return -1;
  }
  const int fd = socket(addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    error = std::string("no socket to it: ") + std::strerror(errno);
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

constexpr const char* kStageNames[] = {"start",    "restore",  "compute",    "step-sums",
                                       "optimizer", "evaluate", "checkpoint", "finish"};

}  // namespace

const char* stage_name(RankStage stage) {
  const auto i = static_cast<size_t>(stage);
  return i < std::size(kStageNames) ? kStageNames[i] : "?";
}

std::optional<RankStage> parse_stage(std::string_view name) {
  for (size_t i = 0; i < std::size(kStageNames); ++i) {
    if (name == kStageNames[i]) return static_cast<RankStage>(i);
  }
  return std::nullopt;
}

bool slow_stage(RankStage stage) {
  return stage != RankStage::kCompute && stage != RankStage::kStepSums &&
         stage != RankStage::kOptimizer;
}

Heartbeat::Heartbeat(const std::string& target, int launch, int rank, std::chrono::milliseconds every,
                     std::function<void()> on_ended)
    : launch_(launch), on_ended_(std::move(on_ended)), every_(every) {
  if (target.empty()) return;
  std::string error;
  fd_ = connect_udp(target, error);
  if (fd_ < 0) throw ConfigError("ETR_RUN_HEARTBEAT='" + target + "' cannot be used: " + error);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  report_peer_waits_of_this_thread();
  body_ = std::to_string(launch) + " " + std::to_string(rank) + " " + std::to_string(getpid()) + " " + host;
  send("etr-hb");  // at once: etr-run counts the rank from here
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  if (fd_ < 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  send("etr-bye");
  close(fd_);
}

void Heartbeat::set_position(int64_t step, RankStage stage) {
  step_.store(step, std::memory_order_relaxed);
  stage_.store(static_cast<uint8_t>(stage), std::memory_order_relaxed);
}

void Heartbeat::send(const char* kind) {
  const std::string msg = std::string(kind) + " " + body_ + " " +
                          std::to_string(step_.load(std::memory_order_relaxed)) + " " +
                          stage_name(static_cast<RankStage>(stage_.load(std::memory_order_relaxed))) + " " +
                          std::to_string(peer_wait_ms());
  // Non-blocking and unchecked: a full buffer or an unreachable etr-run loses one beat.
  if (::send(fd_, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) ++sent_;
}

bool Heartbeat::ended_by_run() {
  char buf[64];
  bool ended = false;
  for (ssize_t n; (n = ::recv(fd_, buf, sizeof buf - 1, MSG_DONTWAIT)) > 0;) {
    buf[n] = '\0';
    ended = ended || std::string_view(buf) == "etr-end " + std::to_string(launch_);
  }
  return ended;
}

void Heartbeat::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, every_, [this] { return stop_; })) {
    send("etr-hb");
    if (!ended_by_run()) continue;
    if (on_ended_) {
      on_ended_();
      continue;
    }
    const std::string line = "etr: etr-run has ended launch " + std::to_string(launch_) +
                             ", from which this rank was cut off; ending the process\n";
    [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, line.data(), line.size());
    ::_exit(1);
  }
}

}  // namespace etr
