// Tests of etr-run's driver pieces (launcher: validation, the mpirun command
// line, mpirun's output) and of the job's side of the protocol (runtime/elastic.h:
// ETR_RUN_* variables, the events and progress files; the signal flags are in
// elastic_signals_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/elastic_driver.h"
#include "launcher/hosts.h"
#include "launcher/mpirun_output.h"
#include "runtime/elastic.h"
#include "runtime/error.h"
#include "unit/launcher_test_util.h"
#include "unit/scoped_env.h"

namespace etr {
namespace {

using namespace launcher_test;  // NOLINT: the helpers of these tests

// ---- validate -------------------------------------------------------------------------

launcher::RunOptions valid_options() {
  launcher::RunOptions o;
  o.hosts = HostSource(HostSource::Kind::kList, "localhost:4");
  o.command = {"etr-train", "--config", "c.pbtxt"};
  o.mpirun = "mpirun";
  return o;
}

// An unset --max-np is no limit but the usable slots (cd0ae43; it was max(np, min_np)).
TEST(Validate, MaxNpDefaultsToNoLimit) {
  constexpr int kNoLimit = std::numeric_limits<int>::max();
  auto o = valid_options();
  launcher::validate(o);
  EXPECT_EQ(o.max_np, kNoLimit);  // np 0, min_np 1

  o = valid_options();
  o.np = 4;
  launcher::validate(o);
  EXPECT_EQ(o.max_np, kNoLimit);
  EXPECT_EQ(o.np, 4);

  o = valid_options();
  o.np = 1000;
  o.min_np = 3;
  EXPECT_NO_THROW(launcher::validate(o));
  EXPECT_EQ(o.max_np, kNoLimit);

  o = valid_options();
  o.np = 2;
  o.min_np = 2;
  o.max_np = 8;  // given: kept
  launcher::validate(o);
  EXPECT_EQ(o.max_np, 8);
  EXPECT_EQ(o.np, 2);

  o = valid_options();
  o.np = 3;
  o.max_np = 3;  // np == max_np is inside
  EXPECT_NO_THROW(launcher::validate(o));
  EXPECT_EQ(o.max_np, 3);
}

TEST(Validate, NpOutsideMinMaxIsAConfigError) {
  auto o = valid_options();
  o.np = 2;
  o.min_np = 3;
  o.max_np = 4;
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("--np 2 is outside"));

  o = valid_options();
  o.np = 5;
  o.max_np = 4;
  EXPECT_THAT(config_error([&] { launcher::validate(o); }),
              HasSubstr("[--min-np, --max-np] = [1, 4]"));

  o = valid_options();
  o.min_np = 4;
  o.max_np = 2;
  EXPECT_THAT(config_error([&] { launcher::validate(o); }),
              HasSubstr("--max-np 2 is below --min-np 4"));

  o = valid_options();
  o.min_np = 0;
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("--min-np"));
}

TEST(Validate, NoHostsOrNoCommandIsAConfigError) {
  auto o = valid_options();
  o.hosts.reset();
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("--hosts"));

  o = valid_options();
  o.command.clear();
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("no job to run"));
}

TEST(Validate, NegativeCountsAndZeroIntervalAreConfigErrors) {
  auto o = valid_options();
  o.max_restarts = -1;
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("--max-restarts"));
  o = valid_options();
  o.blacklist_after = -1;
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("--blacklist-after"));
  o = valid_options();
  o.discovery_interval = std::chrono::milliseconds(0);
  EXPECT_THAT(config_error([&] { launcher::validate(o); }), HasSubstr("--discovery-interval"));
}

// ---- mpirun_command -------------------------------------------------------------------

using Args = std::vector<std::string>;

// Index of the first occurrence of `seq` as consecutive arguments of `argv`; -1 if none.
long find_seq(const Args& argv, const Args& seq) {
  auto it = std::search(argv.begin(), argv.end(), seq.begin(), seq.end());
  return it == argv.end() ? -1 : static_cast<long>(it - argv.begin());
}

std::string joined(const Args& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

TEST(MpirunCommand, LocalHostsGetLoopbackFlagsEnvAndCommandLast) {
  auto o = valid_options();
  o.mpirun = "/opt/mpi/bin/mpirun";
  o.mpi_args = {"--bind-to", "none"};
  const HostList hosts = {{"localhost", 2}, {"127.0.0.1", 1}};
  const launcher::MpiNetwork network = launcher::launch_network(o, hosts);
  EXPECT_TRUE(network.local);
  const Args argv = launcher::mpirun_command(o, hosts, 3, {"ETR_RUN_DIR", "OMP_NUM_THREADS"}, network);
  SCOPED_TRACE(joined(argv));
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv[0], "/opt/mpi/bin/mpirun");
  EXPECT_EQ(find_seq(argv, {"--allow-run-as-root"}) >= 0, geteuid() == 0);
  EXPECT_GE(find_seq(argv, {"--mca", "pml", "ob1"}), 0);
  EXPECT_GE(find_seq(argv, {"--mca", "btl", "self,vader"}), 0);
  EXPECT_GE(find_seq(argv, {"--mca", "oob_tcp_if_include", "lo"}), 0);
  EXPECT_GE(find_seq(argv, {"--mca", "btl_tcp_if_include", "lo"}), 0);
  EXPECT_GE(find_seq(argv, {"--mca", "odls_base_sigkill_timeout", "0"}), 0);
  const long np = find_seq(argv, {"-np", "3"});
  const long host = find_seq(argv, {"--host", "localhost:2,127.0.0.1:1"});
  const long x1 = find_seq(argv, {"-x", "ETR_RUN_DIR"});
  const long x2 = find_seq(argv, {"-x", "OMP_NUM_THREADS"});
  const long extra = find_seq(argv, {"--bind-to", "none"});
  const long cmd = find_seq(argv, {"etr-train", "--config", "c.pbtxt"});
  EXPECT_GE(np, 0);
  EXPECT_GE(host, 0);
  EXPECT_GE(x1, 0);
  EXPECT_GE(x2, 0);
  // Order: the env names, then the extra mpirun arguments, then the job's command last.
  EXPECT_LT(x1, x2);
  EXPECT_LT(x2, extra);
  EXPECT_LT(np, extra);
  EXPECT_LT(host, extra);
  EXPECT_LT(extra, cmd);
  EXPECT_EQ(cmd, static_cast<long>(argv.size()) - 3);
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "-x"), 2);
}

TEST(MpirunCommand, RemoteHostsGetTcpOnTheirNetworkAndNoLoopbackFlags) {
  auto o = valid_options();
  launcher::MpiNetwork network;
  network.local = false;
  network.machines = 2;
  network.iface = "198.18.0.0/24";
  network.origin = "--iface";
  for (const HostList& hosts :
       {HostList{{"example.invalid", 2}}, HostList{{"localhost", 1}, {"example.invalid", 1}}}) {
    const Args argv = launcher::mpirun_command(o, hosts, 2, {}, network);
    SCOPED_TRACE(joined(argv));
    EXPECT_GE(find_seq(argv, {"--mca", "btl", "self,vader,tcp"}), 0);
    EXPECT_GE(find_seq(argv, {"--mca", "btl_tcp_if_include", "198.18.0.0/24"}), 0);
    EXPECT_GE(find_seq(argv, {"--mca", "oob_tcp_if_include", "198.18.0.0/24"}), 0);
    EXPECT_EQ(find_seq(argv, {"lo"}), -1);
    EXPECT_EQ(find_seq(argv, {"--allow-run-as-root"}) >= 0, geteuid() == 0);
    EXPECT_GE(find_seq(argv, {"--host", launcher::format_hosts(hosts)}), 0);
    EXPECT_GE(find_seq(argv, {"-np", "2"}), 0);
    EXPECT_EQ(find_seq(argv, {"-x"}), -1);
    EXPECT_EQ(argv.back(), "c.pbtxt");
  }
}

TEST(MpirunCommand, TheUsersOwnMcaParameterWins) {
  auto o = valid_options();
  o.mpi_args = {"--mca", "btl", "self,tcp"};
  const Args argv = launcher::mpirun_command(o, {{"localhost", 2}}, 2, {},
                                             launcher::launch_network(o, {{"localhost", 2}}));
  SCOPED_TRACE(joined(argv));
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "btl"), 1);
  EXPECT_GE(find_seq(argv, {"--mca", "btl", "self,tcp"}), 0);
  EXPECT_GE(find_seq(argv, {"--mca", "pml", "ob1"}), 0);
}

// ---- killed_rank_in -------------------------------------------------------------------

TEST(KilledRankIn, OpenMpiReports) {
  EXPECT_EQ(
      launcher::killed_rank_in(
          "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed)."),
      1);
  EXPECT_EQ(launcher::killed_rank_in("mpiexec noticed that process rank 12 with PID 5 on node a "
                                     "exited on signal 15 (Terminated)."),
            12);
  EXPECT_EQ(launcher::killed_rank_in("mpirun noticed that process rank 0 with PID 4711 on node "
                                     "n0 exited on signal 11 (Segmentation fault)."),
            0);
}

TEST(KilledRankIn, OtherLinesAreMinusOne) {
  EXPECT_EQ(launcher::killed_rank_in(""), -1);
  EXPECT_EQ(
      launcher::killed_rank_in("--------------------------------------------------------------"),
      -1);
  EXPECT_EQ(launcher::killed_rank_in("Primary job  terminated normally, but 1 process returned"),
            -1);
  EXPECT_EQ(launcher::killed_rank_in(
                "a non-zero exit code. Per user-direction, the job has been aborted."),
            -1);
  EXPECT_EQ(launcher::killed_rank_in("  Process name: [[4711,1],2]"), -1);
  EXPECT_EQ(launcher::killed_rank_in("step 10 loss 3.2 process rank 1"),
            -1);                                                          // no "exited on signal"
  EXPECT_EQ(launcher::killed_rank_in("a child exited on signal 9"), -1);  // no "process rank"
}

// ---- runtime/elastic: parse_host_slots, ElasticLaunch ---------------------------------

TEST(ParseHostSlots, ListsInOrder) {
  using Pairs = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(parse_host_slots("h1:2,h2:1"), (Pairs{{"h1", 2}, {"h2", 1}}));
  EXPECT_EQ(parse_host_slots("h1,h2:3"), (Pairs{{"h1", 1}, {"h2", 3}}));
  EXPECT_EQ(parse_host_slots("n:0"), (Pairs{{"n", 0}}));
  EXPECT_TRUE(parse_host_slots("").empty());
  EXPECT_THROW(parse_host_slots("h1:two"), ConfigError);
  EXPECT_THROW(parse_host_slots(":1"), ConfigError);
  EXPECT_THROW(parse_host_slots("h1:-3"), ConfigError);
}

// Every ETR_RUN_* variable, set (or unset with nullopt) for one test.
struct RunEnv {
  using V = std::optional<std::string>;
  RunEnv(V dir, V restart, V reason, V prev_np, V last_step, V event_ms, V hosts, V ckpt)
      : dir_("ETR_RUN_DIR", dir),
        restart_("ETR_RUN_RESTART", restart),
        reason_("ETR_RUN_REASON", reason),
        prev_np_("ETR_RUN_PREV_NP", prev_np),
        last_step_("ETR_RUN_LAST_STEP", last_step),
        event_ms_("ETR_RUN_EVENT_MS", event_ms),
        hosts_("ETR_RUN_HOSTS", hosts),
        ckpt_("ETR_RUN_CHECKPOINT_DIR", ckpt) {}
  testing::ScopedEnv dir_, restart_, reason_, prev_np_, last_step_, event_ms_, hosts_, ckpt_;
};

TEST(ElasticLaunchFromEnv, ReadsEveryVariable) {
  RunEnv env("/tmp/etr-run-abc", "2", "failure", "4", "17", "1700000000123", "a:2,b:1", "/ckpt");
  const ElasticLaunch l = ElasticLaunch::from_env();
  EXPECT_TRUE(l.active);
  EXPECT_EQ(l.run_dir, fs::path("/tmp/etr-run-abc"));
  EXPECT_EQ(l.restart, 2);
  EXPECT_EQ(l.reason, "failure");
  EXPECT_EQ(l.prev_world, 4);
  EXPECT_EQ(l.last_step, 17);
  EXPECT_EQ(l.event_ms, 1700000000123);
  EXPECT_EQ(l.hosts, (std::vector<std::pair<std::string, int>>{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(l.checkpoint_dir, "/ckpt");
}

TEST(ElasticLaunchFromEnv, DefaultsWhenOnlyTheDirIsSet) {
  RunEnv env("/tmp/x", std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
             std::nullopt, std::nullopt);
  const ElasticLaunch l = ElasticLaunch::from_env();
  EXPECT_TRUE(l.active);
  EXPECT_EQ(l.restart, 0);
  EXPECT_EQ(l.reason, "start");
  EXPECT_EQ(l.prev_world, 0);
  EXPECT_EQ(l.last_step, -1);
  EXPECT_EQ(l.event_ms, 0);
  EXPECT_TRUE(l.hosts.empty());
  EXPECT_EQ(l.checkpoint_dir, "");
}

TEST(ElasticLaunchFromEnv, InactiveWithoutTheDir) {
  // The other variables (even malformed ones) are not read without ETR_RUN_DIR.
  RunEnv env(std::nullopt, "garbage", "resize", "4", "17", "5", "a:2", "/ckpt");
  const ElasticLaunch l = ElasticLaunch::from_env();
  EXPECT_FALSE(l.active);
  EXPECT_EQ(l.restart, 0);
  EXPECT_EQ(l.reason, "start");
  EXPECT_TRUE(l.hosts.empty());
  EXPECT_EQ(l.checkpoint_dir, "");

  RunEnv empty_dir("", "1", std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                   std::nullopt);
  EXPECT_FALSE(ElasticLaunch::from_env().active);  // set but empty counts as unset
}

TEST(ElasticLaunchFromEnv, MalformedValuesAreConfigErrorsNamingTheVariable) {
  {
    RunEnv env("/tmp/x", "2x", std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt,
               std::nullopt);
    const std::string msg = config_error([] { ElasticLaunch::from_env(); });
    EXPECT_THAT(msg, HasSubstr("ETR_RUN_RESTART"));
    EXPECT_THAT(msg, HasSubstr("'2x'"));
  }
  {
    RunEnv env("/tmp/x", "1", std::nullopt, std::nullopt, "seven", std::nullopt, std::nullopt,
               std::nullopt);
    EXPECT_THAT(config_error([] { ElasticLaunch::from_env(); }), HasSubstr("ETR_RUN_LAST_STEP"));
  }
  {
    RunEnv env("/tmp/x", "1", std::nullopt, std::nullopt, std::nullopt, std::nullopt, "a:b",
               std::nullopt);
    EXPECT_THROW(ElasticLaunch::from_env(), ConfigError);
  }
}

TEST(ElasticLaunchHostOf, RankToHostBySlots) {
  ElasticLaunch l;
  l.hosts = parse_host_slots("a:2,b:1");
  EXPECT_EQ(l.host_of(0), "a");
  EXPECT_EQ(l.host_of(1), "a");
  EXPECT_EQ(l.host_of(2), "b");
  EXPECT_EQ(l.host_of(3), "");
  EXPECT_EQ(ElasticLaunch{}.host_of(0), "");
}

// ---- runtime/elastic: ElasticReporter -------------------------------------------------

ElasticLaunch active_launch(const fs::path& dir) {
  ElasticLaunch l;
  l.active = true;
  l.run_dir = dir;
  return l;
}

TEST(ElasticReporter, EventsAreAppendedWithTheirTime) {
  TempDir dir;
  const int64_t before = unix_ms();
  {
    ElasticReporter r(active_launch(dir.path()));
    EXPECT_TRUE(r.active());
    r.event("started np=2");
    r.event("first-step step=1");
  }
  ElasticReporter(active_launch(dir.path())).event("done");  // appends, does not truncate
  const int64_t after = unix_ms();
  std::istringstream in(read_file(dir.path() / "events"));
  const std::vector<std::string> texts = {"started np=2", "first-step step=1", "done"};
  std::string line;
  size_t n = 0;
  int64_t last_ms = 0;
  while (std::getline(in, line)) {
    ASSERT_LT(n, texts.size()) << line;
    const size_t space = line.find(' ');
    ASSERT_NE(space, std::string::npos) << line;
    const int64_t ms = std::stoll(line.substr(0, space));
    EXPECT_GE(ms, before);
    EXPECT_LE(ms, after);
    EXPECT_GE(ms, last_ms);
    last_ms = ms;
    EXPECT_EQ(line.substr(space + 1), texts[n]);
    ++n;
  }
  EXPECT_EQ(n, texts.size());
}

TEST(ElasticReporter, ProgressIsRewrittenInPlace) {
  TempDir dir;
  const fs::path file = dir.path() / "progress";
  auto read_step = [&] {
    std::istringstream in(read_file(file));
    long long step = -99;
    in >> step;
    std::string rest;
    in >> rest;
    EXPECT_EQ(rest, "") << "more than one number in the progress file";
    return step;
  };
  ElasticReporter r(active_launch(dir.path()));
  r.progress(7);
  EXPECT_EQ(read_step(), 7);
  r.progress(12);
  EXPECT_EQ(read_step(), 12);
  r.progress(123456789012);
  EXPECT_EQ(read_step(), 123456789012);
  r.progress(3);  // shorter than the number before it
  EXPECT_EQ(read_step(), 3);
}

TEST(ElasticReporter, InactiveWritesNothing) {
  TempDir dir;
  ElasticLaunch l = active_launch(dir.path());
  l.active = false;
  ElasticReporter r(l);
  EXPECT_FALSE(r.active());
  r.event("started");
  r.progress(5);
  EXPECT_FALSE(fs::exists(dir.path() / "events"));
  EXPECT_FALSE(fs::exists(dir.path() / "progress"));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(ElasticReporter, UnwritableDirDoesNotThrow) {
  ElasticReporter r(active_launch("/nonexistent/etr-run-dir"));
  EXPECT_NO_THROW(r.event("started"));
  EXPECT_NO_THROW(r.progress(1));
}

TEST(KilledRankIn, NonNumericOrHugeRankIsMinusOne) {
  EXPECT_EQ(launcher::killed_rank_in("process rank x exited on signal 9"), -1);
  EXPECT_EQ(launcher::killed_rank_in("process rank 99999999999 with PID 1 exited on signal 9"), -1);
}

TEST(ElasticLaunchHostOf, NegativeRankIsNoHost) { EXPECT_EQ(ElasticLaunch{}.host_of(-1), ""); }

// ---- MpirunOutput ---------------------------------------------------------------------

// What MpirunOutput forwards of `chunks` (fed one after another), through a pipe.
std::string forwarded(const std::vector<std::string>& chunks, bool resizing, int* killed = nullptr) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  launcher::MpirunOutput out(fds[1]);
  if (resizing) out.expect_own_exit();
  for (const auto& c : chunks) out.feed(c.data(), c.size());
  out.flush();
  ::close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  if (killed) *killed = out.killed_rank();
  return text;
}

const std::string kDashes(74, '-');

TEST(MpirunOutput, ForwardsLinesSplitAcrossChunksAndAnUnfinishedLastLine) {
  EXPECT_EQ(forwarded({"[etr 0/2] st", "ep 1\nstep", " 2\nlast"}, false), "[etr 0/2] step 1\nstep 2\nlast\n");
}

TEST(MpirunOutput, ResizeExitReportIsDroppedOnlyWhenEtrRunAskedForIt) {
  const std::string frame = kDashes + "\nPrimary job  terminated normally, but 1 process returned\n"
                            "a non-zero exit code. Per user-direction, the job has been aborted.\n" + kDashes + "\n";
  const std::string other = kDashes + "\nMPI_ABORT was invoked on rank 0\n" + kDashes + "\n";
  const std::string text = "before\nmpiexec: Forwarding signal 10 to job\n" + frame + other + "after\n";
  EXPECT_EQ(forwarded({text}, false), text);
  EXPECT_EQ(forwarded({text}, true), "before\n" + other + "after\n");
}

TEST(MpirunOutput, UnclosedFrameIsForwardedAtTheEnd) {
  EXPECT_EQ(forwarded({kDashes + "\nhalf a frame\n"}, true), kDashes + "\nhalf a frame\n");
}

TEST(MpirunOutput, FirstKilledRankIsKept) {
  int killed = -2;
  forwarded({"x\n" + kDashes + "\nmpirun noticed that process rank 3 with PID 0 on node vm exited on signal 9 (Killed).\n" +
                 kDashes + "\nmpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n"},
            false, &killed);
  EXPECT_EQ(killed, 3);
  forwarded({"nothing here\n"}, false, &killed);
  EXPECT_EQ(killed, -1);
}

}  // namespace
}  // namespace etr
