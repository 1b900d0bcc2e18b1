#include "launcher/launch_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <thread>

namespace etr::launcher {

Watch::Watch(const JobProcess& job) : pid(job.pid), stderr_fd(job.stderr_fd), output(STDERR_FILENO) {}

void pump(Watch& w, int stop_signal) {
  if (!w.eof) {
    pollfd p{w.stderr_fd, POLLIN, 0};
    if (poll(&p, 1, 100) > 0) {
      char buf[65536];
      const ssize_t n = read(w.stderr_fd, buf, sizeof buf);
      if (n > 0) {
        w.output.feed(buf, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        w.eof = true;
      }
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!w.reaped && waitpid(w.pid, &w.status, WNOHANG) == w.pid) {
    w.reaped = true;
    w.reaped_at = Watch::Clock::now();
  }
  // After etr-run killed mpirun itself, what still holds the pipe (a launch agent's
  // connection to a host cut off) has nothing left to say that matters.
  const auto drain = w.stuck_signals == 2 ? kDrainAfterKill : kDrainAfterExit;
  if (w.reaped && !w.eof && Watch::Clock::now() - w.reaped_at > drain) {
    std::fprintf(stderr, "etr-run: mpirun has exited, but processes it left behind still hold "
                         "its output open: no longer reading it\n");
    w.eof = true;
  }
  if (stop_signal && !w.stop_forwarded && !w.reaped) {
    kill(w.pid, SIGTERM);
    w.stop_forwarded = true;
  }
}

void end_stuck_mpirun(Watch& w, std::chrono::steady_clock::time_point first_error,
                      const HeartbeatWatch* heartbeats) {
  using std::chrono::steady_clock;
  if (w.reaped) return;
  const bool decided = w.end_at != steady_clock::time_point{};
  if (!decided && first_error == steady_clock::time_point{}) return;
  const auto due = decided ? w.end_at : first_error + kStuckMpirunGrace;
  const auto late = steady_clock::now() - due;
  if (late < std::chrono::seconds(0)) return;
  if (w.stuck_signals == 0) {
    if (!decided) {
      std::fprintf(stderr,
                   "etr-run: mpirun has not ended the failed job %lld s after its first error (a "
                   "host it cannot reach?): ending mpirun\n",
                   static_cast<long long>(kStuckMpirunGrace.count()));
    }
    kill(w.pid, SIGTERM);
    w.stuck_signals = 1;
  } else if (w.stuck_signals == 1 && late >= (decided ? kDecidedKillAfter : kStuckKillAfter)) {
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
