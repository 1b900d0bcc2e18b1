#include "launcher/launch_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace etr::launcher {

namespace {

// Through syscall(): Debian 12's glibc declares pidfd_open without C linkage for C++.
int open_pidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

Watch::Watch(const JobProcess& job)
    : pid(job.pid), stderr_fd(job.stderr_fd), pidfd(open_pidfd(job.pid)), output(STDERR_FILENO) {}

Watch::~Watch() {
  if (pidfd >= 0) close(pidfd);
}

namespace {

// What the job wrote to stderr, passed on; end of file once nobody holds it open.
void read_stderr(Watch& w) {
  char buf[65536];
  const ssize_t n = read(w.stderr_fd, buf, sizeof buf);
  if (n > 0) {
    w.output.feed(buf, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    w.eof = true;
  }
}

}  // namespace

void pump(Watch& w, int stop_signal, const PumpWake& wake) {
  pollfd p[3];
  nfds_t n = 0;
  const bool reading = !w.eof;  // stderr is p[0] while it is read
  if (reading) p[n++] = {w.stderr_fd, POLLIN, 0};
  if (!w.reaped && w.pidfd >= 0) p[n++] = {w.pidfd, POLLIN, 0};
  if (wake.fd >= 0) p[n++] = {wake.fd, POLLIN, 0};
  // Without a pidfd, mpirun's exit is noticed within 20 ms while a daemon holds stderr.
  auto by = wake.by;
  if (!w.reaped && w.pidfd < 0) by = std::min(by, Watch::Clock::now() + std::chrono::milliseconds(20));
  const auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(by - Watch::Clock::now()).count();
  const int ready = poll(p, n, static_cast<int>(std::clamp<int64_t>(wait_ms, 0, 1000)));
  if (ready > 0 && reading && p[0].revents != 0) read_stderr(w);
  if (!w.reaped && waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
    w.reaped = true;
    w.reaped_at = Watch::Clock::now();
  }
  // The drain's end (next_due): kDrainAfterExit after the exit, kDrainAfterKill after
  // etr-run killed mpirun itself (what still holds the pipe, a launch agent's connection
  // to a host cut off, has nothing left to say that matters).
  if (w.reaped && !w.eof && Watch::Clock::now() >= next_due(w, {})) {
    std::fprintf(stderr, "etr-run: mpirun has exited, but processes it left behind still hold "
                         "its output open: no longer reading it\n");
    w.eof = true;
  }
  if (stop_signal && !w.stop_forwarded && !w.reaped) {
    kill(w.pid, SIGTERM);
    w.stop_forwarded = true;
  }
}

Watch::Clock::time_point next_due(const Watch& w, Watch::Clock::time_point first_error) {
  using Clock = Watch::Clock;
  if (w.reaped) {
    if (w.eof) return Clock::time_point::max();
    return w.reaped_at + (w.stuck_signals == 2 ? std::chrono::milliseconds(kDrainAfterKill)
                                               : std::chrono::milliseconds(kDrainAfterExit));
  }
  const bool decided = w.end_at != Clock::time_point{};
  if (!decided && first_error == Clock::time_point{}) return Clock::time_point::max();
  const auto due = decided ? w.end_at : first_error + kStuckMpirunGrace;
  if (w.stuck_signals == 0) return due;
  if (w.stuck_signals == 1) return due + (decided ? std::chrono::milliseconds(kDecidedKillAfter)
                                                  : std::chrono::milliseconds(kStuckKillAfter));
  return Clock::time_point::max();
}

void end_stuck_mpirun(Watch& w, std::chrono::steady_clock::time_point first_error,
                      const HeartbeatWatch* heartbeats) {
  // next_due() holds the schedule: the grace (or the decision), then the kill-after.
  if (w.reaped || Watch::Clock::now() < next_due(w, first_error)) return;
  if (w.stuck_signals == 0) {
    if (w.end_at == Watch::Clock::time_point{}) {
      std::fprintf(stderr,
                   "etr-run: mpirun has not ended the failed job %lld s after its first error (a "
                   "host it cannot reach?): ending mpirun\n",
                   static_cast<long long>(kStuckMpirunGrace.count()));
    }
    kill(w.pid, SIGTERM);
    w.stuck_signals = 1;
  } else {
    kill(w.pid, SIGKILL);
    w.stuck_signals = 2;
    if (heartbeats) {
      for (pid_t p : heartbeats->local_pids()) kill(p, SIGKILL);
    }
  }
}

std::optional<HeartbeatWatch::Silent> end_silent_rank(Watch& w, HeartbeatWatch& heartbeats) {
  if (w.reaped) return std::nullopt;
  std::optional<HeartbeatWatch::Silent> local;
  for (const HeartbeatWatch::Silent& s : heartbeats.poll()) {
    if (s.local && s.pid > 0) {
      if (!local) {
        kill(s.pid, SIGKILL);
        local = s;
      }
      continue;
    }
    if (w.remote_silent.empty()) w.remote_silent_at = Watch::Clock::now();
    w.remote_silent.push_back(s);
  }
  return local;
}

}  // namespace etr::launcher
