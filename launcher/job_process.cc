#include "launcher/job_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/error.h"
#include "runtime/env.h"
#include "runtime/omp_env.h"

extern char** environ;

namespace etr::launcher {

JobEnvironment job_environment(std::map<std::string, std::string> vars) {
  JobEnvironment env;
  for (const auto& [name, value] : missing_spin_limits()) vars[name] = value;  // omp_env.h
  if (!env_value("HWLOC_COMPONENTS")) vars["HWLOC_COMPONENTS"] = kHwlocComponents;
  for (const auto& [k, v] : vars) env.forward.push_back(k);
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e);
    const std::string name = kv.substr(0, kv.find('='));
    const bool ours = name.rfind("ETR_", 0) == 0 || name.rfind("OMP_", 0) == 0 ||
                      name == "GOMP_SPINCOUNT" || name == "OPENBLAS_NUM_THREADS" ||
                      name == "OPENBLAS_THREAD_TIMEOUT" || name == "HWLOC_COMPONENTS";
    if (ours && !vars.count(name)) env.forward.push_back(name);
  }
  env.vars = std::move(vars);
  return env;
}

JobProcess start_job(const std::vector<std::string>& argv_s,
                     const std::map<std::string, std::string>& vars) {
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) throw IoError(std::string("pipe failed: ") + std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw IoError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(err[1], STDERR_FILENO);
    // A group of its own: a terminal's Ctrl-C reaches etr-run alone, which asks the job to
    // save and stop (mpirun would end it at once). Away from the terminal's foreground
    // group, reading it would stop mpirun (SIGTTIN): the job's input is /dev/null; and
    // writing to it would too with `stty tostop` (SIGTTOU, ignored). Out of etr-run's group,
    // a kill of that group misses mpirun: etr-run's death ends it (PR_SET_PDEATHSIG; the
    // fork is on the main thread, which lives as long as etr-run).
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(1);  // etr-run died before the prctl
    signal(SIGTTOU, SIG_IGN);
    if (const int null = open("/dev/null", O_RDONLY); null >= 0) {
      dup2(null, STDIN_FILENO);
      if (null != STDIN_FILENO) close(null);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    std::vector<char*> argv;
    for (const auto& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "etr-run: cannot run %s: %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  close(err[1]);
  return JobProcess{pid, err[0]};
}

}  // namespace etr::launcher
