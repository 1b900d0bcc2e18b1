// Tests of whom etr-run blames for a failed launch (launcher/failure_cause.h) and
// of a lost host's exclusion and return (HostHealth::exclude_now and usable()), and the
// launch shim's report of a daemon that died (launch_shim.h), run as a real process, and
// the host probe (host_probe.h) through a stand-in launch agent.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "launcher/failure_cause.h"
#include "launcher/host_probe.h"
#include "launcher/hosts.h"
#include "launcher/launch_shim.h"
#include "launcher/mpirun_output.h"
#include "unit/scoped_env.h"

namespace etr::launcher {
namespace {

const std::vector<HostSlots> kTwoByTwo = {{"hA", 2}, {"hB", 2}};

TEST(Blame, RanksMapToTheHostsMpirunFilledInOrder) {
  EXPECT_EQ(host_of_rank(kTwoByTwo, 0), "hA");
  EXPECT_EQ(host_of_rank(kTwoByTwo, 1), "hA");
  EXPECT_EQ(host_of_rank(kTwoByTwo, 2), "hB");
  EXPECT_EQ(host_of_rank(kTwoByTwo, 3), "hB");
  EXPECT_EQ(host_of_rank(kTwoByTwo, 4), "");
}

TEST(Blame, ALostHostComesFirst) {
  FailureEvidence e;
  e.own_error_rank = 1;
  e.lost_hosts = {"hB"};
  const Blame b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kLostHost);
  EXPECT_EQ(b.host, "hB");
  EXPECT_TRUE(b.whole_host());
}

// What made etr-run end the launch itself comes before what followed from it: ending
// mpirun has it report this machine's ranks killed and the cut host's daemon lost.
TEST(Blame, EtrRunsOwnDecisionComesFirst) {
  FailureEvidence e;
  e.killed_rank = 0;
  e.lost_hosts = {"hA"};
  e.silent_host = "hB";
  e.silent_for = "5.10 s";
  Blame b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kUnreachableHost);
  EXPECT_EQ(b.host, "hB");
  EXPECT_TRUE(b.whole_host());
  EXPECT_EQ(b.why, "host hB is unreachable: none of its ranks sent a heartbeat for 5.10 s");
  EXPECT_FALSE(e.nothing_named());
  e.silent_host.clear();
  e.silent_rank = 3;
  b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kRank);
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.host, "hB");
  // The progress watchdog: its one rank behind, else nobody (no host is counted).
  e.silent_rank = -1;
  e.stuck = "no rank's step or stage changed for 12.00 s";
  e.stuck_rank = 2;
  b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kRank);
  EXPECT_EQ(b.rank, 2);
  EXPECT_EQ(b.why, "rank 2 on hB, no rank's step or stage changed for 12.00 s");
  e.stuck_rank = -1;
  b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kNone);
  EXPECT_TRUE(b.host.empty());
  EXPECT_EQ(b.why, "the job was stuck: no rank's step or stage changed for 12.00 s");
}

// A host whose ranks all fell silent but which still answers the launch agent: a frozen
// process (SIGSTOP), not a partition: its rank is blamed and the host kept.
TEST(Blame, ASilentHostThatAnswersBlamesItsRank) {
  FailureEvidence e;
  e.silent_host = "hB";
  e.silent_for = "5.02 s";
  e.silent_rank = 2;
  e.silent_host_answers = true;
  const Blame b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kRank);
  EXPECT_EQ(b.rank, 2);
  EXPECT_EQ(b.host, "hB");
  EXPECT_FALSE(b.whole_host());
  EXPECT_EQ(b.why, "rank 2 on hB sent no heartbeat for 5.02 s, but its host answers (a frozen "
                   "process, not a lost machine)");
}

TEST(Blame, OwnErrorThenKilledRank) {
  FailureEvidence e;
  e.killed_rank = 3;
  Blame b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kRank);
  EXPECT_EQ(b.rank, 3);
  EXPECT_EQ(b.host, "hB");
  EXPECT_FALSE(b.whole_host());
  e.own_error_rank = 0;
  b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.rank, 0);
  EXPECT_EQ(b.host, "hA");
}

TEST(Blame, TheHostOthersWaitedOnIsUnreachable) {
  const std::vector<HostSlots> three = {{"hA", 1}, {"hB", 1}, {"hC", 1}};
  FailureEvidence e;
  // hB cut off: hA and hC wait on it, hB waits on hA.
  e.waits = {{0, 1}, {2, 1}, {1, 0}};
  const Blame b = blame(e, three);
  EXPECT_EQ(b.kind, Blame::Kind::kUnreachableHost);
  EXPECT_EQ(b.host, "hB");
}

TEST(Blame, ATieGoesAgainstTheHostEtrRunCannotSee) {
  // Two hosts cut apart: each side waits on the other. etr-run runs on this machine
  // ("localhost" is its host), so the other side is the unreachable one.
  const std::vector<HostSlots> two = {{"zB", 1}, {"localhost", 1}};
  FailureEvidence e;
  e.waits = {{1, 0}, {0, 1}};  // (zB sorts after localhost: the map order cannot decide)
  Blame b = blame(e, two);
  EXPECT_EQ(b.kind, Blame::Kind::kUnreachableHost);
  EXPECT_EQ(b.host, "zB");
  e.waits = {{0, 1}, {1, 0}};  // the order of the reports does not matter
  b = blame(e, two);
  EXPECT_EQ(b.host, "zB");
}

TEST(Blame, AProbeThatReachedEveryHostBlamesNoHost) {
  const std::vector<HostSlots> three = {{"hA", 1}, {"hB", 1}, {"hC", 1}};
  FailureEvidence e;
  e.waits = {{0, 1}, {2, 1}, {1, 0}};
  e.probed = true;  // and every host answered: a stuck rank, not a lost host
  const Blame b = blame(e, three);
  EXPECT_EQ(b.kind, Blame::Kind::kNone);
  e.unreachable = {"hC"};
  EXPECT_EQ(blame(e, three).host, "hC");
}

TEST(Blame, AliasesOfOneMachineAreNeverUnreachable) {
  // localhost and 127.0.0.1: two "hosts" to etr-run, one machine; a stopped rank on one
  // makes the other wait on it, which must not exclude a host (etr-run marks it probed).
  const std::vector<HostSlots> aliases = {{"localhost", 1}, {"127.0.0.1", 1}};
  FailureEvidence e;
  e.waits = {{0, 1}};
  EXPECT_EQ(blame(e, aliases).kind, Blame::Kind::kUnreachableHost);  // the guess, unprobed
  e.probed = true;
  EXPECT_EQ(blame(e, aliases).kind, Blame::Kind::kNone);
}

TEST(Blame, WaitsWithinOneHostBlameNobody) {
  FailureEvidence e;
  e.waits = {{0, 1}, {2, 3}};
  const Blame b = blame(e, kTwoByTwo);
  EXPECT_EQ(b.kind, Blame::Kind::kNone);
  EXPECT_TRUE(b.host.empty());
}

TEST(HostHealth, ALostHostIsExcludedAtOnceAndAdmittedWhenItComesBack) {
  HostHealth health(3, std::chrono::minutes(10));
  const auto t0 = HostHealth::Clock::now();
  health.exclude_now("hB", t0);
  EXPECT_TRUE(health.excluded("hB", t0));
  // Still listed: stays out for the cool-down.
  EXPECT_EQ(health.usable(kTwoByTwo, t0 + std::chrono::seconds(1)).size(), 1u);
  // Dropped by discovery, then listed again: back at once.
  EXPECT_EQ(health.usable({{"hA", 2}}, t0 + std::chrono::seconds(2)).size(), 1u);
  const auto back = health.usable(kTwoByTwo, t0 + std::chrono::seconds(3));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].host, "hB");
  EXPECT_FALSE(health.excluded("hB", t0 + std::chrono::seconds(3)));
}

TEST(HostHealth, AnExcludedHostNeverDroppedStaysOutUntilTheCooldownEnds) {
  HostHealth health(3, std::chrono::seconds(60));
  const auto t0 = HostHealth::Clock::now();
  health.exclude_now("hB", t0);
  EXPECT_EQ(health.usable(kTwoByTwo, t0 + std::chrono::seconds(59)).size(), 1u);
  EXPECT_EQ(health.usable(kTwoByTwo, t0 + std::chrono::seconds(61)).size(), 2u);
}

// An unreachable host (a partition) is named for the re-probe until it is admitted again;
// a lost one is not (its daemon died: reaching the machine says nothing of that).
TEST(HostHealth, AnUnreachableHostIsAskedAgainAndReadmitted) {
  HostHealth health(3, std::chrono::seconds(60));
  const auto t0 = HostHealth::Clock::now();
  health.exclude_now("hB", t0, /*unreachable=*/true);
  health.exclude_now("hC", t0);
  EXPECT_EQ(health.unreachable_excluded(t0 + std::chrono::seconds(1)), std::vector<std::string>{"hB"});
  EXPECT_TRUE(health.unreachable_excluded(t0 + std::chrono::seconds(61)).empty());  // cool-down over
  EXPECT_EQ(health.usable(kTwoByTwo, t0 + std::chrono::seconds(2)).size(), 1u);
  health.readmit("hB");
  EXPECT_FALSE(health.excluded("hB", t0 + std::chrono::seconds(3)));
  EXPECT_TRUE(health.unreachable_excluded(t0 + std::chrono::seconds(3)).empty());
  EXPECT_EQ(health.usable(kTwoByTwo, t0 + std::chrono::seconds(3)).size(), 2u);
  EXPECT_TRUE(health.excluded("hC", t0 + std::chrono::seconds(3)));
}

// The agent runs `AGENT HOST true`: with `sh -c SCRIPT`, the host is $0. "up" answers,
// "down" fails, "cut" does not answer within the deadline (a partition).
TEST(HostProbe, AnsweringAndUnreachableHosts) {
  const std::vector<std::string> agent = {
      "/bin/sh", "-c", "case \"$0\" in up) exit 0 ;; cut) sleep 30 ;; *) exit 1 ;; esac"};
  const std::vector<std::string> hosts = {"up", "down", "cut"};
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(answering_hosts(agent, hosts, std::chrono::milliseconds(500)),
            std::vector<std::string>{"up"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "the deadline holds";
  EXPECT_EQ(unreachable_hosts(agent, hosts, std::chrono::milliseconds(500)),
            (std::vector<std::string>{"down", "cut"}));
  // A probe that cannot be started says nothing: no host answers, none is unreachable.
  EXPECT_TRUE(answering_hosts({}, hosts, std::chrono::milliseconds(100)).empty());
  EXPECT_TRUE(unreachable_hosts({}, hosts, std::chrono::milliseconds(100)).empty());
}

TEST(MpirunOutput, ALostDaemonNamesItsHost) {
  const std::string frame =
      "--------------------------------------------------------------------------\n"
      "ORTE has lost communication with a remote daemon.\n"
      "\n"
      "  HNP daemon   : [[50091,0],0] on node h1\n"
      "  Remote daemon: [[50091,0],2] on node 198.18.0.3\n"
      "\n"
      "This is usually due to either a failure of the TCP network\n"
      "--------------------------------------------------------------------------\n";
  EXPECT_EQ(lost_daemon_host_in(frame), "198.18.0.3");
  EXPECT_EQ(lost_daemon_host_in("Remote daemon: [[1,0],2] on node h3\n"), "");  // not that report
  MpirunOutput out(-1);
  out.feed(frame.data(), frame.size());
  EXPECT_EQ(out.lost_host(), "198.18.0.3");
}

// The shim runs an agent that ends the way a lost host's ssh does; its event names the host.
std::string run_shim(const std::string& agent_script, int* status) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("etr-shim-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path agent = dir / "agent.sh";
  std::ofstream(agent) << "#!/bin/sh\n" << agent_script << "\n";
  fs::permissions(agent, fs::perms::owner_all);
  *status = run_launch_shim({dir.string(), "1", agent.string(), "-x", "hB", "orted", "--args"});
  std::ifstream in(dir / "events");
  std::string events((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fs::remove_all(dir);
  return events;
}

TEST(LaunchShim, ADaemonThatDiesIsReportedWithItsHost) {
  int status = 0;
  const std::string events = run_shim("kill -9 $$", &status);
  EXPECT_EQ(status, 128 + 9);
  EXPECT_NE(events.find("daemon-lost host=hB status=137"), std::string::npos) << events;
}

TEST(LaunchShim, ADaemonThatEndsWellIsNotReported) {
  testing::ScopedEnv hwloc("HWLOC_COMPONENTS", std::nullopt);  // the command as it was
  int status = 0;
  const std::string events = run_shim("test \"$1 $2 $3\" = \"-x hB orted\"", &status);
  EXPECT_EQ(status, 0);  // and the agent got the host and the command
  EXPECT_EQ(events, "");
}

// ssh carries no variables: the daemon, started by a remote shell, gets etr-run's
// HWLOC_COMPONENTS from the command itself.
TEST(LaunchShim, TheRemoteDaemonGetsHwlocComponents) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("etr-shim-env-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto script = [&](const char* name, const std::string& body) {
    std::ofstream(dir / name) << "#!/bin/sh\n" << body << "\n";
    fs::permissions(dir / name, fs::perms::owner_all);
  };
  script("agent.sh", "shift 2; env -u HWLOC_COMPONENTS sh -c \"$*\"");  // like ssh -x HOST CMD
  script("orted", "echo \"$HWLOC_COMPONENTS\" > " + (dir / "seen").string());
  testing::ScopedEnv hwloc("HWLOC_COMPONENTS", "-linux:pci,-pci");
  EXPECT_EQ(run_launch_shim({dir.string(), "1", (dir / "agent.sh").string(), "-x", "hB",
                             " " + (dir / "orted").string(), "-mca", "ess", "env"}),
            0);
  std::ifstream in(dir / "seen");
  std::string seen;
  std::getline(in, seen);
  EXPECT_EQ(seen, "-linux:pci,-pci");
  fs::remove_all(dir);
}

TEST(LaunchShim, TheDaemonWordTakesTheVariablesAfterItsPrefix) {
  const std::vector<std::pair<std::string, std::string>> env = {{"HWLOC_COMPONENTS", "-pci"}};
  EXPECT_EQ(with_daemon_env({" orted", "-mca", "orted_x", "1"}, env),
            (std::vector<std::string>{" env HWLOC_COMPONENTS='-pci' orted", "-mca", "orted_x",
                                      "1"}));
  EXPECT_EQ(with_daemon_env({"PATH=/p/bin:$PATH ; export PATH ; /p/bin/orted", "-mca"}, env),
            (std::vector<std::string>{
                "PATH=/p/bin:$PATH ; export PATH ; env HWLOC_COMPONENTS='-pci' /p/bin/orted",
                "-mca"}));
  EXPECT_EQ(with_daemon_env({"hostname"}, env), std::vector<std::string>{"hostname"});
  EXPECT_EQ(with_daemon_env({" orted"}, {{"HWLOC_COMPONENTS", "it's"}}),
            std::vector<std::string>{" orted"});  // no quoting games: passed on as it was
  EXPECT_EQ(with_daemon_env({" orted"}, {}), std::vector<std::string>{" orted"});
}

TEST(LaunchShim, TheAgentStringCarriesItsWords) {
  EXPECT_EQ(launch_shim_agent("/bin/etr-run", "/tmp/r", {"ssh", "-q"}),
            "/bin/etr-run --launch-shim /tmp/r 2 ssh -q");
}

}  // namespace
}  // namespace etr::launcher
