#include "launcher/discovery_script.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "runtime/error.h"

namespace etr::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// In the forked child: a process group of its own, killed with etr-run, stdin /dev/null,
// stdout the pipe, default signal handling; then the script.
[[noreturn]] void exec_script(const std::string& path, const std::vector<std::string>& args,
                              int out_fd, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);  // etr-run died before prctl
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  dup2(out_fd, STDOUT_FILENO);
  for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  std::vector<char*> argv = {const_cast<char*>(path.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(path.c_str(), argv.data());
  std::fprintf(stderr, "etr-run: cannot run the host discovery script %s: %s\n", path.c_str(),
               std::strerror(errno));
  _exit(127);
}

// True while a process of group `pgid` is alive (a zombie is not: it is dead, waiting
// for its parent, or init, to reap it). Reads /proc; without it, kill(-pgid, 0).
bool group_alive(pid_t pgid) {
  DIR* proc = opendir("/proc");
  if (!proc) return kill(-pgid, 0) == 0;
  bool alive = false;
  while (const dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string path = std::string("/proc/") + e->d_name + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) continue;
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) state ppid pgrp ...": comm may hold anything, so parse after the last ')'.
    const char* close = std::strrchr(buf, ')');
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (close && std::sscanf(close + 1, " %c %d %d", &state, &ppid, &pgrp) == 3 && pgrp == pgid &&
        state != 'Z' && state != 'X') {
      alive = true;
      break;
    }
  }
  closedir(proc);
  return alive;
}

}  // namespace

DiscoveryScript::DiscoveryScript(std::string path, milliseconds timeout,
                                 std::vector<std::string> args)
    : path_(std::move(path)), args_(std::move(args)), timeout_(timeout),
      deadline_(Clock::now() + timeout) {
  const std::string name = "the host discovery script " + printable(path_, 200);
  struct stat st;
  if (stat(path_.c_str(), &st) != 0)
    throw IoError("cannot run " + name + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw IoError(name + " is a directory; name an executable file");
  if (access(path_.c_str(), X_OK) != 0) {
    throw IoError(name + " is not executable; chmod +x it");
  }
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0)
    throw IoError(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    close(out[0]);
    close(out[1]);
    throw IoError(std::string("fork failed: ") + std::strerror(errno));
  }
  if (pid_ == 0) exec_script(path_, args_, out[1], parent);
  setpgid(pid_, pid_);  // also here, so that the group exists before the first kill
  close(out[1]);
  out_fd_ = out[0];
  fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
}

DiscoveryScript::~DiscoveryScript() {
  if (!over_) end_group();
  if (out_fd_ >= 0) close(out_fd_);
}

void DiscoveryScript::read_available() {
  char buf[65536];
  while (out_fd_ >= 0 && !too_much_) {
    const ssize_t n = read(out_fd_, buf, sizeof buf);
    if (n > 0) {
      output_.append(buf, static_cast<size_t>(n));
      too_much_ = output_.size() > kMaxScriptOutput;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        close(out_fd_);
        out_fd_ = -1;
      }
      return;
    }
  }
}

bool DiscoveryScript::poll(milliseconds wait) {
  const auto until = Clock::now() + wait;
  while (!over_) {
    if (!reaped_ && waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    read_available();  // after the exit: everything it wrote is in the pipe
    if (reaped_ || too_much_ || Clock::now() >= deadline_) {
      timed_out_ = !reaped_ && !too_much_;
      end_group();
      over_ = true;
      break;
    }
    const auto now = Clock::now();
    if (now >= until) break;
    // Wake at least every 20 ms: a child the script left may hold the pipe open.
    const auto left = std::chrono::ceil<milliseconds>(std::min(until, deadline_) - now);
    const int ms = static_cast<int>(std::clamp<int64_t>(left.count(), 1, 20));
    if (out_fd_ >= 0) {
      pollfd p{out_fd_, POLLIN, 0};
      ::poll(&p, 1, ms);
    } else {
      std::this_thread::sleep_for(milliseconds(ms));
    }
  }
  return over_;
}

void DiscoveryScript::end_group() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  const auto give_up = Clock::now() + kKillGrace;
  for (;;) {
    if (!reaped_ && waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
    if (reaped_ && !group_alive(pid_)) return;  // nothing of the group is left running
    if (Clock::now() >= give_up) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  kill(-pid_, SIGKILL);
  while (!reaped_) {
    if (waitpid(pid_, &status_, 0) == pid_ || errno != EINTR) reaped_ = true;
  }
}

std::vector<HostSlots> DiscoveryScript::result() const {
  const std::string name = "the host discovery script " + printable(path_, 200);
  if (!over_) throw IoError(name + " has not finished");
  if (timed_out_) {
    char limit[32];
    std::snprintf(limit, sizeof limit, "%.3g s", static_cast<double>(timeout_.count()) / 1000);
    throw IoError(name + " did not finish within " + limit +
                  " (--discovery-timeout) and was ended");
  }
  if (too_much_) {
    throw IoError(name + " printed more than " + std::to_string(kMaxScriptOutput >> 20) +
                  " MiB and was ended; print one line per host");
  }
  if (!WIFEXITED(status_) || WEXITSTATUS(status_) != 0) {
    throw IoError(name + " failed (" +
                  (WIFEXITED(status_) ? "exit status " + std::to_string(WEXITSTATUS(status_))
                                      : "signal " + std::to_string(WTERMSIG(status_))) +
                  ")");
  }
  return parse_host_lines(output_, "the output of " + path_);
}

}  // namespace etr::launcher
