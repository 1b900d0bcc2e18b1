// Tests of etr-run's host handling (launcher/hosts.h): host lists, hostfiles,
// discovery scripts, host health and slot assignment. Expected values are written out
// by hand; scripts and hostfiles are real files run and read by the code under test.
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

#include "launcher/elastic_driver.h"
#include "launcher/hosts.h"
#include "runtime/elastic.h"
#include "runtime/error.h"
#include "unit/launcher_test_util.h"
#include "unit/scoped_env.h"

namespace etr {
namespace {

using namespace launcher_test;  // NOLINT: the helpers of these tests

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

TEST(TakeSlots, TheLastLaunchsHostsFirstInTheirOrder) {
  // A relaunch on the same hosts keeps their order, whatever discovery's is.
  const HostList prev = {{"c", 1}, {"a", 1}, {"b", 1}};
  EXPECT_EQ(launcher::take_slots({{"a", 1}, {"b", 1}, {"c", 1}}, 3, prev), prev);
  // A spare host (more slots than ranks) is taken only for a host lost: d replaces b, the
  // survivors keep their places, and a returning host stays spare.
  const HostList spare = {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}};
  const HostList lost_b = launcher::take_slots({{"a", 1}, {"c", 1}, {"d", 1}}, 3,
                                               {{"a", 1}, {"b", 1}, {"c", 1}});
  EXPECT_EQ(lost_b, (HostList{{"a", 1}, {"c", 1}, {"d", 1}}));
  EXPECT_EQ(launcher::take_slots(spare, 3, lost_b), lost_b);
  // A grown job: the survivors first, the returning host after them.
  EXPECT_EQ(launcher::take_slots({{"a", 1}, {"b", 1}, {"c", 1}}, 3, {{"a", 1}, {"c", 1}}),
            (HostList{{"a", 1}, {"c", 1}, {"b", 1}}));
  // A shrunk job keeps the first of its hosts; slots are today's, not the last launch's.
  EXPECT_EQ(launcher::take_slots({{"a", 4}, {"b", 2}}, 3, {{"b", 1}, {"a", 1}}),
            (HostList{{"b", 2}, {"a", 1}}));
  // A host of the last launch that discovery no longer lists is not taken.
  EXPECT_EQ(launcher::take_slots({{"a", 1}}, 2, {{"z", 1}, {"a", 1}}), (HostList{{"a", 1}}));
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
}

}  // namespace
}  // namespace etr
