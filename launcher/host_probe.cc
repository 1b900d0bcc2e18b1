#include "launcher/host_probe.h"

#include "launcher/hosts.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace etr::launcher {
namespace {

// Starts `agent HOST true` in a process group of its own, output discarded; -1 when it
// cannot be started.
pid_t start_probe(const std::vector<std::string>& agent, const std::string& host) {
  std::vector<std::string> words = agent;
  words.insert(words.end(), {host, "true"});
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid > 0) setpgid(pid, pid);  // both sides, so that the group exists for kill(-pid)
  if (pid != 0) return pid;
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
  }
  execvp(argv[0], argv.data());
  _exit(127);
}

}  // namespace

std::vector<std::string> remote_hosts(const std::vector<HostSlots>& assigned) {
  std::vector<std::string> remote;
  for (const auto& h : assigned) {
    if (!is_local_host(h.host)) remote.push_back(h.host);
  }
  return remote;
}

std::vector<std::string> unreachable_hosts(const std::vector<std::string>& agent,
                                           const std::vector<std::string>& hosts,
                                           std::chrono::milliseconds deadline) {
  std::vector<pid_t> pids;
  std::vector<int> ok(hosts.size(), 0);  // 1: reached (or not probed: unknown), 0: not
  for (size_t i = 0; i < hosts.size(); ++i) {
    pids.push_back(agent.empty() ? -1 : start_probe(agent, hosts[i]));
    if (pids.back() <= 0) ok[i] = 1;  // a probe that did not start says nothing of the host
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  size_t running = 0;
  do {
    running = 0;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        ok[i] = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        kill(-pids[i], SIGKILL);  // whatever it left behind
        pids[i] = -1;
      } else {
        ++running;
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (running > 0 && std::chrono::steady_clock::now() < end);
  std::vector<std::string> out;
  for (size_t i = 0; i < pids.size(); ++i) {
    if (pids[i] > 0) {  // past the deadline
      kill(-pids[i], SIGKILL);
      kill(pids[i], SIGKILL);
      waitpid(pids[i], nullptr, 0);
    }
    if (!ok[i]) out.push_back(hosts[i]);
  }
  return out;
}

}  // namespace etr::launcher
