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

enum class Probe { kReached, kNotReached, kNotStarted };

// Runs the probes of `hosts` at once, each within `deadline`.
std::vector<Probe> probe_all(const std::vector<std::string>& agent,
                             const std::vector<std::string>& hosts,
                             std::chrono::milliseconds deadline) {
  std::vector<pid_t> pids;
  std::vector<Probe> out(hosts.size(), Probe::kNotReached);
  for (size_t i = 0; i < hosts.size(); ++i) {
    pids.push_back(agent.empty() ? -1 : start_probe(agent, hosts[i]));
    if (pids.back() <= 0) out[i] = Probe::kNotStarted;
  }
  const auto end = std::chrono::steady_clock::now() + deadline;
  size_t running = 0;
  do {
    running = 0;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        out[i] = ok ? Probe::kReached : Probe::kNotReached;
        kill(-pids[i], SIGKILL);  // whatever it left behind
        pids[i] = -1;
      } else {
        ++running;
      }
    }
    if (running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (running > 0 && std::chrono::steady_clock::now() < end);
  for (pid_t pid : pids) {
    if (pid > 0) {  // past the deadline: not reached
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  return out;
}

std::vector<std::string> hosts_with(const std::vector<std::string>& hosts,
                                    const std::vector<Probe>& probes, Probe want) {
  std::vector<std::string> out;
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (probes[i] == want) out.push_back(hosts[i]);
  }
  return out;
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
  // A probe that did not start says nothing of its host.
  return hosts_with(hosts, probe_all(agent, hosts, deadline), Probe::kNotReached);
}

std::vector<std::string> answering_hosts(const std::vector<std::string>& agent,
                                         const std::vector<std::string>& hosts,
                                         std::chrono::milliseconds deadline) {
  return hosts_with(hosts, probe_all(agent, hosts, deadline), Probe::kReached);
}

}  // namespace etr::launcher
