// Tests of etr-run's logic (runtime/launcher: host lists, hostfiles, discovery scripts,
// host health, the mpirun command line, mpirun's report of a killed rank) and of the
// job's side of the protocol (runtime/elastic.h: ETR_RUN_* variables, the events and
// progress files, the SIGUSR1 resize flag). Expected values are written out by hand;
// scripts and hostfiles are real files run and read by the code under test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/elastic.h"
#include "runtime/error.h"
#include "runtime/launcher/elastic_driver.h"
#include "runtime/launcher/hosts.h"
#include "unit/scoped_env.h"

namespace etr {
namespace {

namespace fs = std::filesystem;
using launcher::HostHealth;
using launcher::HostSlots;
using launcher::HostSource;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using HostList = std::vector<HostSlots>;

// The message of the ConfigError `f` throws ("" and a test failure when it throws none).
std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError";
  return "";
}

std::string io_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no IoError";
  return "";
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "etr-launcher-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp: " << std::strerror(errno);
    }
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  // Writes `text` to <dir>/name with permissions `mode`; returns the path.
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0644) const {
    const fs::path p = path_ / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc) << text;
    ::chmod(p.c_str(), mode);
    return p.string();
  }

 private:
  fs::path path_;
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- parse_host_list ------------------------------------------------------------------

TEST(ParseHostList, HostsWithAndWithoutSlots) {
  EXPECT_EQ(launcher::parse_host_list("h1:2,h2"), (HostList{{"h1", 2}, {"h2", 1}}));
  EXPECT_EQ(launcher::parse_host_list("solo"), (HostList{{"solo", 1}}));
  EXPECT_EQ(launcher::parse_host_list("a:3,b:1,c:4"), (HostList{{"a", 3}, {"b", 1}, {"c", 4}}));
}

TEST(ParseHostList, DuplicatesAddUpInFirstSeenOrder) {
  EXPECT_EQ(launcher::parse_host_list("h1:2,h2,h1:3"), (HostList{{"h1", 5}, {"h2", 1}}));
  EXPECT_EQ(launcher::parse_host_list("h2,h2,h2"), (HostList{{"h2", 3}}));
}

TEST(ParseHostList, MalformedItemsAreConfigErrorsNamingThem) {
  std::string msg = config_error([] { launcher::parse_host_list("h1:x"); });
  EXPECT_THAT(msg, HasSubstr("'h1:x'"));
  EXPECT_THAT(msg, HasSubstr("whole number"));

  msg = config_error([] { launcher::parse_host_list(":2"); });
  EXPECT_THAT(msg, HasSubstr("':2'"));
  EXPECT_THAT(msg, HasSubstr("no host name"));

  msg = config_error([] { launcher::parse_host_list("h1:-1"); });
  EXPECT_THAT(msg, HasSubstr("'h1:-1'"));

  msg = config_error([] { launcher::parse_host_list("ok:1,h1:"); });
  EXPECT_THAT(msg, HasSubstr("'h1:'"));

  msg = config_error([] { launcher::parse_host_list("h1:2x"); });
  EXPECT_THAT(msg, HasSubstr("'h1:2x'"));
}

// ---- parse_host_lines -----------------------------------------------------------------

TEST(ParseHostLines, EveryLineForm) {
  const std::string text =
      "# a hostfile\n"
      "alpha\n"
      "\n"
      "beta:4\n"
      "   \t\n"
      "gamma slots=3   # trailing comment\n"
      "  delta\tslots=2\n";
  EXPECT_EQ(launcher::parse_host_lines(text, "hostfile h"),
            (HostList{{"alpha", 1}, {"beta", 4}, {"gamma", 3}, {"delta", 2}}));
}

TEST(ParseHostLines, CrlfLineEndsAndNoFinalNewline) {
  EXPECT_EQ(launcher::parse_host_lines("a:2\r\nb slots=3\r\n# c\r\n\r\nd", "f"),
            (HostList{{"a", 2}, {"b", 3}, {"d", 1}}));
}

TEST(ParseHostLines, DuplicatesAdd) {
  EXPECT_EQ(launcher::parse_host_lines("a:2\nb\na slots=3\na\n", "f"),
            (HostList{{"a", 6}, {"b", 1}}));
}

TEST(ParseHostLines, EmptyTextIsNoHosts) {
  EXPECT_TRUE(launcher::parse_host_lines("", "f").empty());
  EXPECT_TRUE(launcher::parse_host_lines("# only a comment\n\n", "f").empty());
}

TEST(ParseHostLines, MalformedLinesNameSourceAndLine) {
  std::string msg =
      config_error([] { launcher::parse_host_lines("a\nb\nc:x\n", "hostfile /x/hosts"); });
  EXPECT_THAT(msg, StartsWith("hostfile /x/hosts, line 3 ('c:x'): "));
  EXPECT_THAT(msg, HasSubstr("HOST slots=SLOTS"));

  msg = config_error([] { launcher::parse_host_lines("# c\n\nhost slots=two\n", "src"); });
  EXPECT_THAT(msg, StartsWith("src, line 3 ("));
  EXPECT_THAT(msg, HasSubstr("slots="));

  msg = config_error([] { launcher::parse_host_lines("host cpus=2\n", "src"); });
  EXPECT_THAT(msg, StartsWith("src, line 1 "));

  msg = config_error([] { launcher::parse_host_lines("ok\n:3\n", "src"); });
  EXPECT_THAT(msg, StartsWith("src, line 2 "));
  EXPECT_THAT(msg, HasSubstr("no host name"));

  msg = config_error([] { launcher::parse_host_lines("ok\r\nh:-2\r\n", "src"); });
  EXPECT_THAT(msg, StartsWith("src, line 2 ('h:-2')"));
}

TEST(HostFormatting, FormatAndTotal) {
  const HostList hosts = {{"a", 2}, {"b", 1}, {"c", 5}};
  EXPECT_EQ(launcher::format_hosts(hosts), "a:2,b:1,c:5");
  EXPECT_EQ(launcher::format_hosts({}), "");
  EXPECT_EQ(launcher::total_slots(hosts), 8);
  EXPECT_EQ(launcher::total_slots({}), 0);
  // format_hosts is what parse_host_list reads back.
  EXPECT_EQ(launcher::parse_host_list(launcher::format_hosts(hosts)), hosts);
}

// ---- HostSource -----------------------------------------------------------------------

TEST(HostSourceList, IsFixed) {
  HostSource s(HostSource::Kind::kList, "h1:2,h2");
  EXPECT_FALSE(s.dynamic());
  EXPECT_EQ(s.discover(), (HostList{{"h1", 2}, {"h2", 1}}));
  EXPECT_EQ(s.describe(), "--hosts h1:2,h2");
}

TEST(HostSourceFile, ReadsAndRereadsTheFile) {
  TempDir dir;
  const std::string path = dir.write("hosts", "a slots=2\nb\n");
  HostSource s(HostSource::Kind::kFile, path);
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.discover(), (HostList{{"a", 2}, {"b", 1}}));
  dir.write("hosts", "c:4\n");
  EXPECT_EQ(s.discover(), (HostList{{"c", 4}}));
  dir.write("hosts", "");
  EXPECT_TRUE(s.discover().empty());
}

TEST(HostSourceFile, MalformedLineNamesTheHostfile) {
  TempDir dir;
  const std::string path = dir.write("hosts", "a\nb:zz\n");
  const std::string msg =
      config_error([&] { HostSource(HostSource::Kind::kFile, path).discover(); });
  EXPECT_THAT(msg, StartsWith("hostfile " + path + ", line 2 "));
}

TEST(HostSourceFile, MissingFileIsAnIoErrorNamingIt) {
  TempDir dir;
  const std::string path = (dir.path() / "no-such-hostfile").string();
  const std::string msg = io_error([&] { HostSource(HostSource::Kind::kFile, path).discover(); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("No such file"));
}

TEST(HostSourceScript, ParsesWhatTheScriptPrints) {
  TempDir dir;
  const std::string path =
      dir.write("discover.sh", "#!/bin/sh\necho 'h1 slots=2'\necho h2:3\necho h1\n", 0755);
  HostSource s(HostSource::Kind::kScript, path);
  EXPECT_TRUE(s.dynamic());
  EXPECT_EQ(s.discover(), (HostList{{"h1", 3}, {"h2", 3}}));
  EXPECT_EQ(s.describe(), "discovery script " + path);
}

TEST(HostSourceScript, RunsAgainOnEveryDiscovery) {
  TempDir dir;
  const std::string path = dir.write("discover.sh", "#!/bin/sh\necho a:1\n", 0755);
  HostSource s(HostSource::Kind::kScript, path);
  EXPECT_EQ(s.discover(), (HostList{{"a", 1}}));
  dir.write("discover.sh", "#!/bin/sh\necho a:1\necho b:2\n", 0755);
  EXPECT_EQ(s.discover(), (HostList{{"a", 1}, {"b", 2}}));
}

TEST(HostSourceScript, NonZeroExitIsAnIoErrorWithTheStatus) {
  TempDir dir;
  const std::string path = dir.write("fail.sh", "#!/bin/sh\necho h1:2\nexit 3\n", 0755);
  const std::string msg = io_error([&] { HostSource(HostSource::Kind::kScript, path).discover(); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("exit status 3"));
}

TEST(HostSourceScript, KilledBySignalIsAnIoErrorWithTheSignal) {
  TempDir dir;
  const std::string path = dir.write("killed.sh", "#!/bin/sh\nkill -9 $$\n", 0755);
  const std::string msg = io_error([&] { HostSource(HostSource::Kind::kScript, path).discover(); });
  EXPECT_THAT(msg, HasSubstr("signal 9"));
}

TEST(HostSourceScript, SlowScriptTimesOut) {
  TempDir dir;
  // exec: the process killed at the deadline is the sleep itself, not a shell around it.
  const std::string path = dir.write("slow.sh", "#!/bin/sh\necho h1\nexec sleep 20\n", 0755);
  const auto begin = std::chrono::steady_clock::now();
  const std::string msg = io_error([&] {
    HostSource(HostSource::Kind::kScript, path).discover(std::chrono::milliseconds(300));
  });
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("did not finish"));
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 5.0);  // well before the script would have ended on its own
}

TEST(HostSourceScript, MalformedOutputNamesTheScript) {
  TempDir dir;
  const std::string path = dir.write("bad.sh", "#!/bin/sh\necho 'h1 slots=lots'\n", 0755);
  const std::string msg =
      config_error([&] { HostSource(HostSource::Kind::kScript, path).discover(); });
  EXPECT_THAT(msg, StartsWith("the output of " + path + ", line 1 "));
}

TEST(HostSourceScript, NonExecutableOrMissingScriptIsAnError) {
  TempDir dir;
  // Mode 0644: not executable, not even for root.
  const std::string plain = dir.write("plain.sh", "#!/bin/sh\necho h1\n", 0644);
  std::string msg = io_error([&] { HostSource(HostSource::Kind::kScript, plain).discover(); });
  EXPECT_THAT(msg, HasSubstr(plain));
  const std::string missing = (dir.path() / "missing.sh").string();
  msg = io_error([&] { HostSource(HostSource::Kind::kScript, missing).discover(); });
  EXPECT_THAT(msg, HasSubstr(missing));
}

// ---- HostHealth -----------------------------------------------------------------------

TEST(HostHealth, ExcludedAfterBlacklistAfterFailuresForTheCooldown) {
  using std::chrono::seconds;
  HostHealth health(3, std::chrono::milliseconds(60'000));
  const auto t0 = HostHealth::Clock::now();
  EXPECT_EQ(health.failures("a"), 0);
  EXPECT_FALSE(health.record_failure("a", t0));
  EXPECT_FALSE(health.record_failure("a", t0 + seconds(1)));
  EXPECT_FALSE(health.excluded("a", t0 + seconds(1)));
  EXPECT_EQ(health.failures("a"), 2);
  const auto t3 = t0 + seconds(2);
  EXPECT_TRUE(health.record_failure("a", t3));  // the third failure excludes
  EXPECT_EQ(health.failures("a"), 3);
  EXPECT_TRUE(health.excluded("a", t3));
  EXPECT_TRUE(health.excluded("a", t3 + seconds(59)));
  EXPECT_FALSE(health.excluded("a", t3 + seconds(60)));
  EXPECT_FALSE(health.excluded("a", t3 + seconds(3600)));
  // Other hosts are unaffected.
  EXPECT_FALSE(health.excluded("b", t3));
  EXPECT_EQ(health.failures("b"), 0);
}

TEST(HostHealth, FailuresWhileExcludedDoNotExtendTheCooldown) {
  using std::chrono::seconds;
  HostHealth health(1, std::chrono::milliseconds(10'000));
  const auto t0 = HostHealth::Clock::now();
  EXPECT_TRUE(health.record_failure("a", t0));
  EXPECT_FALSE(health.record_failure("a", t0 + seconds(5)));  // already excluded
  EXPECT_EQ(health.failures("a"), 2);
  EXPECT_TRUE(health.excluded("a", t0 + seconds(9)));
  EXPECT_FALSE(health.excluded("a", t0 + seconds(10)));
}

TEST(HostHealth, UsableFiltersExcludedAndReadmitsAfterCooldown) {
  using std::chrono::seconds;
  HostHealth health(2, std::chrono::milliseconds(30'000));
  const HostList hosts = {{"a", 2}, {"b", 1}, {"c", 4}};
  const auto t0 = HostHealth::Clock::now();
  EXPECT_EQ(health.usable(hosts, t0), hosts);
  health.record_failure("b", t0);
  EXPECT_EQ(health.usable(hosts, t0), hosts);  // one failure: still usable
  EXPECT_TRUE(health.record_failure("b", t0 + seconds(1)));
  EXPECT_EQ(health.usable(hosts, t0 + seconds(1)), (HostList{{"a", 2}, {"c", 4}}));
  EXPECT_EQ(health.usable(hosts, t0 + seconds(30)), (HostList{{"a", 2}, {"c", 4}}));
  EXPECT_EQ(health.failures("b"), 2);
  // Cool-down over (excluded until t0 + 31 s): admitted again with a fresh count.
  EXPECT_EQ(health.usable(hosts, t0 + seconds(31)), hosts);
  EXPECT_EQ(health.failures("b"), 0);
  EXPECT_FALSE(health.excluded("b", t0 + seconds(31)));
  // It takes blacklist_after failures again to exclude it.
  EXPECT_FALSE(health.record_failure("b", t0 + seconds(40)));
  EXPECT_TRUE(health.record_failure("b", t0 + seconds(41)));
  EXPECT_EQ(health.usable(hosts, t0 + seconds(41)), (HostList{{"a", 2}, {"c", 4}}));
}

TEST(HostHealth, BlacklistAfterZeroNeverExcludes) {
  HostHealth health(0, std::chrono::milliseconds(60'000));
  const auto t0 = HostHealth::Clock::now();
  for (int i = 0; i < 50; ++i) EXPECT_FALSE(health.record_failure("a", t0));
  EXPECT_EQ(health.failures("a"), 50);
  EXPECT_FALSE(health.excluded("a", t0));
  EXPECT_EQ(health.usable({{"a", 2}}, t0), (HostList{{"a", 2}}));
}

TEST(HostHealth, HostsWithoutSlotsAreDropped) {
  HostHealth health(3, std::chrono::milliseconds(1000));
  EXPECT_EQ(health.usable({{"a", 0}, {"b", 2}, {"c", 0}}), (HostList{{"b", 2}}));
  EXPECT_TRUE(health.usable({}).empty());
}

// ---- take_slots -----------------------------------------------------------------------

TEST(TakeSlots, FirstSlotsInHostOrder) {
  const HostList hosts = {{"a", 2}, {"b", 3}, {"c", 1}};
  EXPECT_EQ(launcher::take_slots(hosts, 0), HostList{});
  EXPECT_EQ(launcher::take_slots(hosts, 1), (HostList{{"a", 1}}));
  EXPECT_EQ(launcher::take_slots(hosts, 2), (HostList{{"a", 2}}));
  EXPECT_EQ(launcher::take_slots(hosts, 4), (HostList{{"a", 2}, {"b", 2}}));
  EXPECT_EQ(launcher::take_slots(hosts, 6), hosts);
  EXPECT_EQ(launcher::take_slots(hosts, 9), hosts);  // never more than there are
  // A host without slots is skipped, not listed with 0.
  EXPECT_EQ(launcher::take_slots({{"a", 1}, {"z", 0}, {"b", 2}}, 2),
            (HostList{{"a", 1}, {"b", 1}}));
}

// ---- is_local_host --------------------------------------------------------------------

TEST(IsLocalHost, LoopbackNamesAndThisMachine) {
  EXPECT_TRUE(launcher::is_local_host("localhost"));
  EXPECT_TRUE(launcher::is_local_host("127.0.0.1"));
  EXPECT_TRUE(launcher::is_local_host("127.1.2.3"));
  EXPECT_TRUE(launcher::is_local_host("::1"));
  char name[256] = {};
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  const std::string self(name);
  EXPECT_TRUE(launcher::is_local_host(self)) << self;
  if (const size_t dot = self.find('.'); dot != std::string::npos) {
    EXPECT_TRUE(launcher::is_local_host(self.substr(0, dot))) << self;  // the short name
  }
  EXPECT_FALSE(launcher::is_local_host("example.invalid"));
  EXPECT_FALSE(launcher::is_local_host("10.0.0.1"));
  EXPECT_FALSE(launcher::is_local_host(self + "-other"));
}

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
  const Args argv = launcher::mpirun_command(o, {{"localhost", 2}, {"127.0.0.1", 1}}, 3,
                                             {"ETR_RUN_DIR", "OMP_NUM_THREADS"});
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

TEST(MpirunCommand, RemoteHostLeavesOutLoopbackFlags) {
  auto o = valid_options();
  for (const HostList& hosts :
       {HostList{{"example.invalid", 2}}, HostList{{"localhost", 1}, {"example.invalid", 1}}}) {
    const Args argv = launcher::mpirun_command(o, hosts, 2, {});
    SCOPED_TRACE(joined(argv));
    EXPECT_EQ(find_seq(argv, {"pml"}), -1);
    EXPECT_EQ(find_seq(argv, {"btl"}), -1);
    EXPECT_EQ(find_seq(argv, {"oob_tcp_if_include"}), -1);
    EXPECT_EQ(find_seq(argv, {"btl_tcp_if_include"}), -1);
    EXPECT_EQ(find_seq(argv, {"--allow-run-as-root"}) >= 0, geteuid() == 0);
    EXPECT_GE(find_seq(argv, {"--host", launcher::format_hosts(hosts)}), 0);
    EXPECT_GE(find_seq(argv, {"-np", "2"}), 0);
    EXPECT_EQ(find_seq(argv, {"-x"}), -1);
    EXPECT_EQ(argv.back(), "c.pbtxt");
  }
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

// ---- runtime/elastic: the SIGUSR1 resize flag -----------------------------------------

TEST(ResizeSignal, Sigusr1SetsTheFlagUntilCleared) {
  install_resize_signal_handler();
  clear_resize_request();
  EXPECT_FALSE(resize_requested());
  ASSERT_EQ(std::raise(SIGUSR1), 0);  // would end the process without the handler
  EXPECT_TRUE(resize_requested());
  EXPECT_TRUE(resize_requested());  // stays set when read
  clear_resize_request();
  EXPECT_FALSE(resize_requested());
  ASSERT_EQ(std::raise(SIGUSR1), 0);
  EXPECT_TRUE(resize_requested());
  clear_resize_request();
}


// ---- fixes of what the first version of these tests found ------------------------------

TEST(HostSourceFile, DirectoryIsAnIoErrorNotZeroHosts) {
  TempDir dir;
  HostSource s(HostSource::Kind::kFile, dir.path().string());
  EXPECT_THROW(s.discover(), IoError);
}

TEST(HostSourceScript, BackgroundChildHoldingStdoutDoesNotTimeOut) {
  TempDir dir;
  const std::string path =
      dir.write("discover.sh", "#!/bin/sh\necho h1:2\nsleep 3 &\nexit 0\n", 0755);
  HostSource s(HostSource::Kind::kScript, path);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(s.discover(std::chrono::seconds(2)), (HostList{{"h1", 2}}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
}

TEST(HostSourceScript, TimeoutMessageKeepsFractionsOfASecond) {
  TempDir dir;
  const std::string path = dir.write("slow.sh", "#!/bin/sh\nexec sleep 5\n", 0755);
  HostSource s(HostSource::Kind::kScript, path);
  try {
    s.discover(std::chrono::milliseconds(300));
    ADD_FAILURE() << "no timeout";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("within 0.3 s"), std::string::npos) << e.what();
  }
}

TEST(KilledRankIn, NonNumericOrHugeRankIsMinusOne) {
  EXPECT_EQ(launcher::killed_rank_in("process rank x exited on signal 9"), -1);
  EXPECT_EQ(launcher::killed_rank_in("process rank 99999999999 with PID 1 exited on signal 9"), -1);
}

TEST(ParseHostList, ItemsAreTrimmed) {
  EXPECT_EQ(launcher::parse_host_list("h1:2, h2"), (HostList{{"h1", 2}, {"h2", 1}}));
}

TEST(HostHealth, FailureAfterTheCooldownStartsAFreshCount) {
  using C = launcher::HostHealth::Clock;
  launcher::HostHealth h(2, std::chrono::seconds(10));
  const C::time_point t0{};
  EXPECT_FALSE(h.record_failure("a", t0));
  EXPECT_TRUE(h.record_failure("a", t0));
  const C::time_point later = t0 + std::chrono::seconds(11);
  EXPECT_FALSE(h.record_failure("a", later));  // count 1 of a fresh start
  EXPECT_EQ(h.failures("a"), 1);
  EXPECT_TRUE(h.record_failure("a", later));
}

TEST(IsLocalHost, NamesStartingWith127AreNotLoopbackAddresses) {
  EXPECT_FALSE(launcher::is_local_host("127.example.com"));
  EXPECT_EQ(ElasticLaunch{}.host_of(-1), "");
}

}  // namespace
}  // namespace etr
