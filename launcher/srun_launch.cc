#include "launcher/srun_launch.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "launcher/run_options.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/error_text.h"

extern char** environ;

namespace etr::launcher {
namespace {

// The standard output of `argv` (PATH searched); IoError naming the command when it cannot
// run or exits non-zero. Its stderr stays etr-run's.
std::string capture(const std::vector<std::string>& argv) {
  int out[2];
  if (pipe(out) != 0) throw IoError(std::string("pipe failed: ") + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    throw IoError("cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
    throw IoError("'" + printable(cmd, 200) + "' failed");
  }
  return text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Whether etr-run's environment sets `name` (an Open MPI parameter, named at run time, so
// outside the registry of runtime/env.cc).
bool in_environment(const std::string& name) {
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, name.c_str(), name.size()) == 0 && (*e)[name.size()] == '=') return true;
  }
  return false;
}

const char* env_or_empty(const char* name) {
  const char* v = env_value(name);
  return v ? v : "";
}

}  // namespace

bool in_slurm_allocation() { return *env_or_empty("SLURM_JOB_ID") != '\0'; }

void check_srun_launcher(const std::string& srun) {
  if (!in_slurm_allocation()) {
    throw ConfigError("--launcher srun needs a Slurm allocation (SLURM_JOB_ID is not set): run "
                      "etr-run in an sbatch script or under salloc, or use --launcher mpirun");
  }
  if (const std::string why = program_problem(srun); !why.empty()) {
    throw ConfigError("--launcher srun cannot start job steps: " + why + " (Debian: slurm-client)");
  }
}

std::vector<int> parse_tasks_per_node(const std::string& text) {
  std::vector<int> out;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    int count = 0, repeat = 1;
    char x = 0, close = 0;
    std::istringstream w(item);
    if (!(w >> count) || count < 1) {
      throw ConfigError("cannot read the tasks per node '" + printable(text) + "' from Slurm");
    }
    if (w >> close) {
      if (close != '(' || !(w >> x >> repeat >> close) || x != 'x' || close != ')' || repeat < 1 ||
          repeat > kMaxTotalSlots) {
        throw ConfigError("cannot read the tasks per node '" + printable(text) + "' from Slurm");
      }
    }
    if (char extra = 0; w >> extra) {
      throw ConfigError("cannot read the tasks per node '" + printable(text) + "' from Slurm");
    }
    out.insert(out.end(), static_cast<size_t>(repeat), std::min(count, kMaxSlotsPerHost));
  }
  if (out.empty()) throw ConfigError("Slurm gave no tasks per node");
  return out;
}

bool usable_node_state(const std::string& state) {
  for (const char* ok : {"allocated", "mixed", "idle", "completing"}) {
    if (state == ok) return true;
  }
  return false;  // down, drained, draining, fail, maint, reserved..., or a flag such as '*'
}

std::string scontrol_field(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  for (std::string w; words >> w;) {
    if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
  }
  return "";
}

std::vector<HostSlots> usable_allocation(const std::vector<std::string>& all_nodes,
                                         const std::vector<int>& per_node,
                                         const std::vector<std::string>& now_nodes,
                                         const std::string& sinfo) {
  std::map<std::string, std::string> state;
  for (const std::string& line : lines_of(sinfo)) {
    std::istringstream w(line);
    std::string node, s;
    if (w >> node >> s) state[node] = s;
  }
  std::vector<HostSlots> out;
  for (size_t i = 0; i < all_nodes.size(); ++i) {
    const std::string& node = all_nodes[i];
    if (std::find(now_nodes.begin(), now_nodes.end(), node) == now_nodes.end()) continue;
    if (!usable_node_state(state[node])) continue;
    out.push_back({node, i < per_node.size() ? per_node[i] : (per_node.empty() ? 1 : per_node.back())});
  }
  return out;
}

std::string hostfile_lines(const std::vector<HostSlots>& hosts, int np) {
  std::string text;
  for (const HostSlots& h : hosts) {
    for (int s = 0; s < h.slots && np > 0; ++s, --np) text += h.host + "\n";
  }
  return text;
}

SrunCommand srun_command(const std::string& srun, const std::vector<std::string>& srun_args,
                         const std::vector<HostSlots>& hosts, int np, const MpiNetwork& network,
                         const std::string& hostfile, const std::vector<std::string>& job) {
  SrunCommand c;
  int nodes = 0;
  for (int left = np; const HostSlots& h : hosts) {
    if (left <= 0) break;
    ++nodes;
    left -= h.slots;
  }
  c.argv = {srun, "--mpi=pmix", "--kill-on-bad-exit=1", "--overlap", "--export=ALL",
            "--nodes=" + std::to_string(nodes), "--ntasks=" + std::to_string(np),
            "--distribution=arbitrary"};
  c.argv.insert(c.argv.end(), srun_args.begin(), srun_args.end());
  c.argv.insert(c.argv.end(), job.begin(), job.end());
  c.env["SLURM_HOSTFILE"] = hostfile;
  const std::vector<std::string> mca = network.flags();  // "--mca NAME VALUE" triples
  for (size_t i = 0; i + 2 < mca.size(); i += 3) {
    const std::string name = "OMPI_MCA_" + mca[i + 1];
    if (mca[i + 1] == "plm_rsh_agent" || in_environment(name)) continue;  // (no mpirun to start daemons)
    c.env[name] = mca[i + 2];
  }
  return c;
}

std::string srun_lost_node_in(const std::string& line) {
  if (line.rfind("srun: error: ", 0) != 0) return "";
  for (const char* marker : {"Node failure on ", " failed on node "}) {
    const size_t at = line.find(marker);
    if (at == std::string::npos) continue;
    const size_t begin = at + std::strlen(marker);
    size_t end = begin;
    while (end < line.size() && (std::isalnum(static_cast<unsigned char>(line[end])) ||
                                 line[end] == '-' || line[end] == '.' || line[end] == '_')) {
      ++end;
    }
    if (end > begin) return line.substr(begin, end - begin);
  }
  return "";
}

int run_slurm_nodes() {
  try {
    const std::string job = env_or_empty("SLURM_JOB_ID");
    if (job.empty()) throw ConfigError("not inside a Slurm allocation (SLURM_JOB_ID is not set)");
    const std::string all_list = env_or_empty("SLURM_JOB_NODELIST");
    std::string per = env_or_empty("SLURM_TASKS_PER_NODE");
    if (per.empty()) per = env_or_empty("SLURM_JOB_CPUS_PER_NODE");
    const std::string now_list =
        scontrol_field(capture({"scontrol", "show", "job", "-o", job}), "NodeList");
    if (now_list.empty() || now_list == "(null)") return 0;  // no nodes left: none usable
    const auto all = lines_of(capture({"scontrol", "show", "hostnames", all_list.empty() ? now_list : all_list}));
    const auto now = lines_of(capture({"scontrol", "show", "hostnames", now_list}));
    const std::string sinfo = capture({"sinfo", "-h", "-N", "-n", now_list, "-o", "%N %T"});
    for (const HostSlots& h : usable_allocation(all, parse_tasks_per_node(per.empty() ? "1" : per), now, sinfo)) {
      std::printf("%s:%d\n", h.host.c_str(), h.slots);
    }
    return 0;
  } catch (const Error& e) {
    print_error("etr-run --slurm-nodes", e.what());
    return 1;
  }
}

}  // namespace etr::launcher
