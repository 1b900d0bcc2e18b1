#include "launcher/run_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "launcher/srun_launch.h"
#include "runtime/error.h"
#include "runtime/env.h"

namespace etr::launcher {
namespace {

bool executable_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

// N of the job's "parallel.pp=N" argument (etr-train's --set), else 0.
int pp_of_job(const std::vector<std::string>& command) {
  constexpr std::string_view kKey = "parallel.pp=";
  int pp = 0;
  for (const std::string& arg : command) {
    if (arg.rfind(kKey, 0) != 0) continue;
    const std::string_view v = std::string_view(arg).substr(kKey.size());
    int n = 0;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < 1) {
      throw ConfigError("the job's argument " + arg + " does not name a number of pipeline stages");
    }
    pp = n;
  }
  return pp;
}

}  // namespace

int whole_pipelines(const RunOptions& o, int slots) {
  const int pp = std::max(1, o.pp);
  return std::min(slots, o.max_np) / pp * pp;
}

void validate(RunOptions& o, const std::string& self) {
  if (o.launcher.empty()) o.launcher = in_slurm_allocation() ? "srun" : "mpirun";
  if (o.launcher != "srun" && o.launcher != "mpirun") {
    throw ConfigError("--launcher must be mpirun or srun, not '" + printable(o.launcher) + "'");
  }
  if (o.use_srun()) {
    check_srun_launcher(o.srun);
    if (!o.hosts) o.hosts.emplace(HostSource::Kind::kSlurm, self);
  }
  if (!o.hosts)
    throw ConfigError("say where to run: --hosts, --hostfile or --host-discovery-script");
  if (o.command.empty())
    throw ConfigError(
        "no job to run: put its command after --, e.g. -- etr-train --config c.pbtxt");
  if (o.min_np < 1 || o.min_np > kMaxTotalSlots) {
    throw ConfigError("--min-np must be from 1 to " + std::to_string(kMaxTotalSlots) +
                      " (the most slots a host list may have)");
  }
  if (o.max_np == 0) o.max_np = std::numeric_limits<int>::max();  // every usable slot
  const int job_pp = pp_of_job(o.command);
  if (o.pp != 0 && job_pp != 0 && o.pp != job_pp) {
    throw ConfigError("--pp " + std::to_string(o.pp) + " disagrees with the job's parallel.pp=" +
                      std::to_string(job_pp) + "; give one of them");
  }
  if (o.pp == 0) o.pp = job_pp != 0 ? job_pp : 1;
  if (o.pp < 1 || o.pp > kMaxTotalSlots) {
    throw ConfigError("--pp must be from 1 to " + std::to_string(kMaxTotalSlots) + ", not " +
                      std::to_string(o.pp));
  }
  if (o.max_np < o.pp) {
    throw ConfigError("--max-np " + std::to_string(o.max_np) + " is less than one pipeline: the job's " +
                      std::to_string(o.pp) + " stages (--pp) need " + std::to_string(o.pp) + " ranks");
  }
  o.min_np = (o.min_np + o.pp - 1) / o.pp * o.pp;  // whole pipelines
  if (o.max_np != std::numeric_limits<int>::max()) o.max_np = o.max_np / o.pp * o.pp;
  if (o.np % o.pp != 0) {
    throw ConfigError("--np " + std::to_string(o.np) + " is not a multiple of the job's " +
                      std::to_string(o.pp) + " pipeline stages (--pp); the job runs whole pipelines");
  }
  if (o.max_np < o.min_np) {
    throw ConfigError("--max-np " + std::to_string(o.max_np) + " is below --min-np " +
                      std::to_string(o.min_np));
  }
  if (o.np != 0 && (o.np < o.min_np || o.np > o.max_np)) {
    throw ConfigError("--np " + std::to_string(o.np) + " is outside [--min-np, --max-np] = [" +
                      std::to_string(o.min_np) + ", " + std::to_string(o.max_np) + "]");
  }
  if (o.max_restarts < 0) throw ConfigError("--max-restarts cannot be negative");
  if (o.blacklist_after < 0) throw ConfigError("--blacklist-after cannot be negative");
  if (o.discovery_interval.count() <= 0) throw ConfigError("--discovery-interval must be positive");
  if (o.discovery_timeout.count() <= 0) throw ConfigError("--discovery-timeout must be positive");
  if (!o.iface.empty()) check_iface(o.iface, "--iface");
}

std::vector<std::string> mpirun_command(const RunOptions& o, const std::vector<HostSlots>& hosts,
                                        int np, const std::vector<std::string>& env_names,
                                        const MpiNetwork& network) {
  std::vector<std::string> a = {o.mpirun};
  if (geteuid() == 0) a.push_back("--allow-run-as-root");
  // One machine: shared memory, loopback only; several: TCP between them (network.h).
  std::vector<std::string> mca = network.flags();
  // When one rank fails (or exits non-zero, as a resize does), mpirun ends the others with
  // SIGTERM and, a second later, SIGKILL. The job's state is in its checkpoints, so the
  // grace second only delays recovery: kill at once.
  mca.insert(mca.end(), {"--mca", "odls_base_sigkill_timeout", "0"});
  mca = without_user_mca(mca, o.mpi_args);  // mpirun refuses a parameter given twice
  a.insert(a.end(), mca.begin(), mca.end());
  a.insert(a.end(), {"-np", std::to_string(np), "--host", format_hosts(hosts)});
  for (const auto& n : env_names) a.insert(a.end(), {"-x", n});
  a.insert(a.end(), o.mpi_args.begin(), o.mpi_args.end());
  a.insert(a.end(), o.command.begin(), o.command.end());
  return a;
}

MpiNetwork launch_network(const RunOptions& o, const std::vector<HostSlots>& hosts) {
  std::vector<std::string> names;
  for (const auto& h : hosts) names.push_back(h.host);
  return choose_network(names, o.iface);
}

std::string program_problem(const std::string& program) {
  if (program.empty()) return "the job's program is an empty string";
  if (program.find('/') == std::string::npos) {
    const char* path = env_value("PATH");
    std::string dirs = path ? path : "";
    for (size_t begin = 0;;) {
      const size_t colon = std::min(dirs.find(':', begin), dirs.size());
      const std::string dir = dirs.substr(begin, colon - begin);
      if (executable_file((dir.empty() ? "." : dir) + "/" + program)) return "";
      if (colon == dirs.size()) break;
      begin = colon + 1;
    }
    if (executable_file(program)) return "";  // mpirun also looks in the working directory
    return "the program " + printable(program) + " is not on PATH or in the working directory";
  }
  struct stat st;
  if (stat(program.c_str(), &st) != 0) {
    if (errno == ENOENT) return "the program " + printable(program) + " does not exist";
    return "the program " + printable(program) + " cannot be run: " + std::strerror(errno);
  }
  if (!S_ISREG(st.st_mode)) return "the program " + printable(program) + " is not a file";
  if (access(program.c_str(), X_OK) != 0) {
    return "the program " + printable(program) + " is not executable";
  }
  return "";
}

// The problem with the job's program when every host is this machine and mpirun looks
// for it in the usual places (no -wdir, --path, --app or --preload-binary among the
// extra mpirun arguments); "" otherwise.
std::string local_program_problem(const RunOptions& o, const std::vector<HostSlots>& hosts) {
  for (const auto& h : hosts) {
    if (!is_local_host(h.host)) return "";
  }
  for (const auto& a : o.mpi_args) {
    for (const char* opt : {"-wdir", "--wdir", "-wd", "--wd", "-path", "--path", "--app", "-app",
                            "-s", "--preload-binary"}) {
      if (a == opt || a.rfind(std::string(opt) + "=", 0) == 0) return "";
    }
  }
  return program_problem(o.command.front());
}

std::string launch_problem(const RunOptions& o, const std::vector<HostSlots>& hosts,
                           MpiNetwork& network) {
  if (const std::string why = local_program_problem(o, hosts); !why.empty()) {
    return why + "; give the job as an executable's path or a program on PATH";
  }
  try {
    network = launch_network(o, hosts);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace etr::launcher
