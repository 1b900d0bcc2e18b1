// Tests of how etr-run refuses a job whose program cannot be started (issue 13 case 10):
// program_problem() on this machine, and mpirun's reports of a program it could not
// start (frames copied from Open MPI 4.1's output) turned into one sentence and kept out
// of etr-run's output. Also the --discovery-timeout check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <tuple>
#include <utility>

#include "launcher/job_process.h"
#include "launcher/mpirun_output.h"
#include "launcher/run_options.h"
#include "unit/launcher_test_util.h"
#include "unit/scoped_env.h"

namespace etr {
namespace {

using namespace launcher_test;  // NOLINT: the helpers of these tests

// The job's environment holds the threading libraries' spin limits (runtime/omp_env.h),
// forwarded to every rank, unless the user set them: then theirs travel.
TEST(JobEnvironment, SpinLimitsAndHwlocUnlessTheUserSetThem) {
  {
    testing::ScopedEnv gomp("GOMP_SPINCOUNT", std::nullopt);
    testing::ScopedEnv blas("OPENBLAS_THREAD_TIMEOUT", std::nullopt);
    testing::ScopedEnv hwloc("HWLOC_COMPONENTS", std::nullopt);
    const launcher::JobEnvironment env = launcher::job_environment({{"ETR_RUN_DIR", "/tmp/x"}});
    EXPECT_EQ(env.vars.at("GOMP_SPINCOUNT"), "10000");
    EXPECT_EQ(env.vars.at("OPENBLAS_THREAD_TIMEOUT"), "20");
    EXPECT_EQ(env.vars.at("HWLOC_COMPONENTS"), "-linux:pci,-linux:io,-pci");
    EXPECT_THAT(env.forward,
                ::testing::IsSupersetOf({"GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT",
                                         "HWLOC_COMPONENTS", "ETR_RUN_DIR"}));
  }
  testing::ScopedEnv gomp("GOMP_SPINCOUNT", std::nullopt);
  testing::ScopedEnv policy("OMP_WAIT_POLICY", "active");  // GOMP_SPINCOUNT would override it
  testing::ScopedEnv blas("OPENBLAS_THREAD_TIMEOUT", "28");
  testing::ScopedEnv hwloc("HWLOC_COMPONENTS", "-pci");
  const launcher::JobEnvironment env = launcher::job_environment({});
  EXPECT_EQ(env.vars.count("GOMP_SPINCOUNT"), 0u);
  EXPECT_EQ(env.vars.count("OPENBLAS_THREAD_TIMEOUT"), 0u);  // the process's own value
  EXPECT_EQ(env.vars.count("HWLOC_COMPONENTS"), 0u);
  EXPECT_THAT(env.forward, ::testing::IsSupersetOf({"OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT",
                                                    "HWLOC_COMPONENTS"}));
}

TEST(ProgramProblem, ExecutablesByPathOnPathOrInTheWorkingDirectory) {
  EXPECT_EQ(launcher::program_problem("/bin/sh"), "");
  EXPECT_EQ(launcher::program_problem("sh"), "");  // on PATH
  TempDir dir;
  dir.write("job.sh", "#!/bin/sh\n", 0755);
  EXPECT_EQ(launcher::program_problem(dir.path().string() + "/job.sh"), "");
  testing::ScopedEnv path("PATH", dir.path().string());
  EXPECT_EQ(launcher::program_problem("job.sh"), "");
}

TEST(ProgramProblem, MissingDirectoryOrNotExecutableIsASentence) {
  EXPECT_EQ(launcher::program_problem("/nonexistent"), "the program /nonexistent does not exist");
  EXPECT_EQ(launcher::program_problem("no-such-program-etr"),
            "the program no-such-program-etr is not on PATH or in the working directory");
  EXPECT_EQ(launcher::program_problem("/tmp"), "the program /tmp is not a file");
  TempDir dir;
  const std::string plain = dir.write("plain.sh", "#!/bin/sh\n", 0644);
  EXPECT_EQ(launcher::program_problem(plain), "the program " + plain + " is not executable");
  EXPECT_EQ(launcher::program_problem(""), "the job's program is an empty string");
  EXPECT_EQ(launcher::program_problem("/x\x1b[2J"), "the program /x\\x1b[2J does not exist");
}

const std::string kDashes(74, '-');

std::string frame(const std::string& body) {
  return kDashes + "\n" + body + kDashes + "\n";
}

// Open MPI 4.1.4, `mpirun -np 2 /nonexistent`.
const std::string kCannotAccess = frame(
    "mpiexec was unable to launch the specified application as it could not access\n"
    "or execute an executable:\n\nExecutable: /nonexistent\nNode: vm\n\n"
    "while attempting to start process rank 0.\n");
// `mpirun -np 2 nonexistent_prog`.
const std::string kNotFound = frame(
    "mpiexec was unable to find the specified executable file, and therefore\n"
    "did not launch the job.  This error was first reported for process\n"
    "rank 0; it may have occurred for other processes as well.\n\n"
    "NOTE: A common cause for this error is misspelling a mpiexec command\n"
    "      line parameter option (remember that mpiexec interprets the first\n"
    "      unrecognized command line token as the executable).\n\n"
    "Node:       vm\nExecutable: nonexistent_prog\n");
// `mpirun -np 1 /tmp/somedir`: the execve report, then a generic one.
const std::string kExecve = frame(
    "Open MPI tried to fork a new process via the \"execve\" system call but\n"
    "failed.  Open MPI checks many things before attempting to launch a\n"
    "child process, but nothing is perfect. This error may be indicative\n"
    "of another problem on the target host, or even something as silly as\n"
    "having specified a directory for your application. Your job will now\n"
    "abort.\n\n  Local host:        vm\n  Working dir:       /tmp\n"
    "  Application name:  /tmp/somedir\n  Error:             Permission denied\n");
const std::string kGeneric = frame(
    "mpiexec was unable to start the specified application as it encountered an\n"
    "error:\n\nError code: -125\nError name: The specified application failed to start\n"
    "Node: vm\n\nwhen attempting to start process rank 0.\n");

TEST(LaunchFailureIn, OpenMpiReportsAreOneSentence) {
  EXPECT_EQ(launcher::launch_failure_in(kCannotAccess),
            "the program /nonexistent does not exist or is not executable on host vm");
  EXPECT_EQ(launcher::launch_failure_in(kNotFound),
            "the program nonexistent_prog was not found on host vm");
  EXPECT_EQ(launcher::launch_failure_in(kExecve),
            "the program /tmp/somedir could not be started (Permission denied) on host vm");
  EXPECT_EQ(launcher::launch_failure_in(kGeneric), "");
  EXPECT_EQ(launcher::launch_failure_in(frame("MPI_ABORT was invoked on rank 0\n")), "");
}

// What MpirunOutput forwards of `text`, and its program_error().
std::pair<std::string, std::string> through_output(const std::string& text) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  launcher::MpirunOutput out(fds[1]);
  out.feed(text.data(), text.size());
  out.flush();
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  return {got, out.program_error()};
}

TEST(MpirunOutput, LaunchFailureFramesAreKeptBackAndTheFirstIsTheError) {
  const std::string other = frame("something else\n");
  auto [text, error] =
      through_output("before\n" + kExecve + kGeneric + other + kNotFound + "after\n");
  EXPECT_EQ(text, "before\n" + other + "after\n");
  EXPECT_EQ(error, "the program /tmp/somedir could not be started (Permission denied) on host vm");
  // Without a launch failure, the generic frame is someone else's business: forwarded.
  std::tie(text, error) = through_output(kGeneric);
  EXPECT_EQ(text, kGeneric);
  EXPECT_EQ(error, "");
}

TEST(Validate, DiscoveryTimeoutMustBePositive) {
  launcher::RunOptions o;
  o.hosts = HostSource(HostSource::Kind::kFile, "hosts");
  o.command = {"etr-train"};
  launcher::validate(o);
  EXPECT_EQ(o.discovery_timeout, launcher::kDefaultDiscoveryTimeout);
  o.discovery_timeout = std::chrono::milliseconds(0);
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("--discovery-timeout"));
}

}  // namespace
}  // namespace etr
