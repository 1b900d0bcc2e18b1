#include "launcher/launch_shim.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <sstream>

#include "runtime/elastic.h"
#include "runtime/env.h"

namespace etr::launcher {
namespace {

volatile sig_atomic_t g_child = 0;
volatile sig_atomic_t g_forwarded = 0;  // the agent was told to stop: its end is no loss
extern "C" void forward_signal(int sig) {
  const int saved = errno;
  g_forwarded = 1;
  if (g_child > 0) kill(g_child, sig);
  errno = saved;
}

void forward_stop_signals() {
  struct sigaction sa = {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// The index of the first word at or after `first` that is not an option (the host);
// args.size() when none.
size_t host_index(const std::vector<std::string>& args, size_t first) {
  for (size_t i = first; i < args.size(); ++i) {
    if (args[i].rfind('-', 0) != 0) return i;
  }
  return args.size();
}

// The remote daemon's variables the shim passes on (job_process.h sets them).
std::vector<std::pair<std::string, std::string>> daemon_env() {
  std::vector<std::pair<std::string, std::string>> env;
  for (const char* name : {"HWLOC_COMPONENTS"}) {
    if (const char* v = env_value(name)) env.emplace_back(name, v);
  }
  return env;
}

}  // namespace

std::vector<std::string> with_daemon_env(
    std::vector<std::string> command,
    const std::vector<std::pair<std::string, std::string>>& env) {
  std::string prefix = "env";
  for (const auto& [name, value] : env) {
    if (value.find('\'') != std::string::npos) return command;
    prefix += " " + name + "='" + value + "'";
  }
  if (env.empty()) return command;
  for (std::string& word : command) {
    const size_t end = word.find_last_not_of(" \t");
    if (end == std::string::npos) continue;
    const size_t begin = word.find_last_of(" \t;", end) + 1;  // npos + 1 == 0
    const std::string token = word.substr(begin, end + 1 - begin);
    if (token == "orted" || token.ends_with("/orted")) {
      word.insert(begin, prefix + " ");
      break;
    }
  }
  return command;
}

namespace {

// The agent's argv: its words and options, the host, and the command with the daemon's
// variables (args as run_launch_shim's, the host at host_at).
std::vector<std::string> agent_command(const std::vector<std::string>& args, size_t host_at) {
  const auto at = [&](size_t i) { return args.begin() + static_cast<std::ptrdiff_t>(i); };
  std::vector<std::string> words(at(2), at(host_at));
  if (host_at < args.size()) {
    words.push_back(args[host_at]);
    const std::vector<std::string> command =
        with_daemon_env(std::vector<std::string>(at(host_at + 1), args.end()), daemon_env());
    words.insert(words.end(), command.begin(), command.end());
  }
  return words;
}

}  // namespace

std::vector<std::string> launch_agent_words(const std::string& launch_agent) {
  std::istringstream words(launch_agent.empty() ? std::string("ssh") : launch_agent);
  return {std::istream_iterator<std::string>(words), {}};
}

std::string launch_shim_agent(const std::string& self, const std::string& run_dir,
                              const std::vector<std::string>& agent) {
  // mpirun splits the value at spaces: paths with spaces cannot pass through it.
  std::string s = self + " " + kLaunchShimFlag + " " + run_dir + " " + std::to_string(agent.size());
  for (const auto& w : agent) s += " " + w;
  return s;
}

int run_launch_shim(const std::vector<std::string>& args) {
  const int n = args.size() >= 2 ? std::atoi(args[1].c_str()) : -1;
  if (n < 1 || args.size() < static_cast<size_t>(n) + 3) {
    std::fprintf(stderr, "etr-run: error: --launch-shim RUN_DIR N AGENT... HOST COMMAND is for mpirun only\n");
    return 2;
  }
  const std::string run_dir = args[0];
  const size_t host_at = host_index(args, 2 + static_cast<size_t>(n));
  const std::string host = host_at < args.size() ? args[host_at] : "";
  std::vector<std::string> words = agent_command(args, host_at);
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // mpirun gone: end the daemon too
  forward_stop_signals();
  // The stop signals wait until the child's pid is known, so none is lost in between.
  sigset_t stops, old;
  sigemptyset(&stops);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stops, sig);
  sigprocmask(SIG_BLOCK, &stops, &old);
  const pid_t pid = fork();
  if (pid == 0) {
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) signal(sig, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // the shim gone: end the agent too
  } else {
    if (pid > 0) g_child = pid;
    sigprocmask(SIG_SETMASK, &old, nullptr);
  }
  if (pid < 0) {
    std::fprintf(stderr, "etr-run: launch shim: fork failed: %s\n", std::strerror(errno));
    return 127;
  }
  if (pid == 0) {
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "etr-run: cannot run the launch agent %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0 && !g_forwarded && !run_dir.empty()) {
    ElasticLaunch launch;
    launch.active = true;
    launch.run_dir = run_dir;
    ElasticReporter(launch).event("daemon-lost host=" + host + " status=" + std::to_string(code));
  }
  return code;
}

}  // namespace etr::launcher
