#include "launcher/heartbeat_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <sstream>

#include "launcher/network.h"
#include "runtime/error.h"

namespace etr::launcher {

HeartbeatWatch::HeartbeatWatch(HeartbeatTimeoutOptions timeout) : timeout_(timeout) {
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  // The kernel's arrival time of each beat: the gaps the timeout learns from are the
  // beats', not how often etr-run's loop happens to read them.
  const int one = 1;
  if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    throw IoError("etr-run cannot open its heartbeat socket (" + why + "); --heartbeat-timeout 0 runs without");
  }
  port_ = ntohs(addr.sin_port);
}

HeartbeatWatch::~HeartbeatWatch() {
  if (fd_ >= 0) close(fd_);
}

std::string HeartbeatWatch::target(const std::vector<HostSlots>& hosts) const {
  for (const HostSlots& h : hosts) {
    if (names_this_machine(h.host) || resolves_to_this_machine(h.host)) continue;
    for (const std::string& a : resolve_host(h.host)) {
      if (a.find(':') != std::string::npos) continue;  // (the socket is IPv4)
      return route_to(a).address + ":" + std::to_string(port_);
    }
  }
  return "127.0.0.1:" + std::to_string(port_);
}

void HeartbeatWatch::begin_launch(int launch, int ranks) {
  launch_ = launch;
  launch_ranks_ = ranks;
  ranks_.clear();
}

namespace {

// The arrival time the kernel stamped on a datagram (SO_TIMESTAMPNS), else the time now.
double arrival_seconds(msghdr& m) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
      timespec t;
      std::memcpy(&t, CMSG_DATA(c), sizeof t);
      return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
    }
  }
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

void HeartbeatWatch::receive(Clock::time_point now) {
  char buf[512];
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
  for (;;) {
    sockaddr_in from{};
    iovec io{buf, sizeof buf - 1};
    msghdr m{};
    m.msg_name = &from;
    m.msg_namelen = sizeof from;
    m.msg_iov = &io;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(fd_, &m, 0);
    if (n < 0) return;  // EAGAIN: nothing more
    buf[n] = '\0';
    std::istringstream in(buf);
    std::string kind, host, stage_text;
    int launch = -1, rank = -1;
    long pid = 0;
    long long step = 0;
    if (!(in >> kind >> launch >> rank >> pid >> host >> step >> stage_text) || rank < 0 ||
        (kind != "etr-hb" && kind != "etr-bye")) {
      continue;  // not a heartbeat
    }
    if (launch != launch_) {
      // A rank of a launch etr-run has ended (cut off meanwhile, now back): told to end.
      if (launch < launch_ && kind == "etr-hb") end_stale(launch, from);
      continue;
    }
    const std::optional<RankStage> stage = parse_stage(stage_text);
    if (!stage) continue;
    long long waited = 0;  // (absent from an older rank's beats)
    if (!(in >> waited) || waited < 0) waited = 0;
    Rank& r = ranks_[rank];
    const double arrived = arrival_seconds(m);
    if (r.arrived >= 0 && kind == "etr-hb" && !r.reported) timeout_.observe_gap(arrived - r.arrived);
    r.arrived = arrived;
    r.step = step;
    r.stage = *stage;
    r.waited_ms = waited;
    r.last = now;
    r.pid = static_cast<pid_t>(pid);
    r.host = host;
    char address[INET_ADDRSTRLEN] = "";
    inet_ntop(AF_INET, &from.sin_addr, address, sizeof address);
    r.local = is_local_address(address);
    if (kind == "etr-bye") r.gone = true;
  }
}

void HeartbeatWatch::end_stale(int launch, const sockaddr_in& from) {
  const std::string text = "etr-end " + std::to_string(launch);
  // Unchecked: the rank beats again, and is answered again, until it is gone.
  ::sendto(fd_, text.data(), text.size(), MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&from),
           sizeof from);
  ++stale_told_;
}

std::vector<HeartbeatWatch::Silent> HeartbeatWatch::poll(Clock::time_point now) {
  receive(now);
  const bool stalled_job = all_but_one_wait(now);
  std::vector<Silent> out;
  for (auto& [rank, r] : ranks_) {
    if (r.gone || r.reported) continue;
    const auto silent = now - r.last;
    // (a rank silent past the stalled timeout is the one that does not wait)
    const bool stalled = stalled_job && silent < timeout_.current() && silent >= timeout_.stalled();
    if (silent < timeout_.current() && !stalled) continue;
    r.reported = true;
    out.push_back({rank, r.pid, r.host, r.local, std::chrono::duration<double>(silent).count(), stalled});
  }
  return out;
}

bool HeartbeatWatch::all_but_one_wait(Clock::time_point now) const {
  if (launch_ranks_ < 2 || static_cast<int>(ranks_.size()) < launch_ranks_) return false;
  size_t waiting = 0;
  for (const auto& [rank, r] : ranks_) {
    const bool beats = !r.gone && !r.reported && now - r.last < timeout_.stalled();
    if (beats && r.waited_ms >= kPeersWaitAtLeast.count()) ++waiting;
  }
  return waiting + 1 == ranks_.size();
}

}  // namespace etr::launcher

namespace etr::launcher {

HeartbeatWatch::Clock::time_point HeartbeatWatch::next_silence() const {
  Clock::time_point next = Clock::time_point::max();
  const bool stalled_job = all_but_one_wait(Clock::now());
  for (const auto& [rank, r] : ranks_) {
    if (r.gone || r.reported) continue;
    next = std::min(next, r.last + (stalled_job ? timeout_.stalled() : timeout_.current()));
  }
  return next;
}

std::vector<HeartbeatWatch::Position> HeartbeatWatch::positions() const {
  std::vector<Position> out;
  for (const auto& [rank, r] : ranks_) {
    if (!r.gone) out.push_back({rank, r.step, r.stage, r.waited_ms});
  }
  return out;
}

std::vector<pid_t> HeartbeatWatch::local_pids() const {
  std::vector<pid_t> out;
  for (const auto& [rank, r] : ranks_) {
    if (!r.gone && r.local && r.pid > 0) out.push_back(r.pid);
  }
  return out;
}

}  // namespace etr::launcher
