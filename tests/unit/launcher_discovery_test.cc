// Tests of a discovery script's run (launcher/discovery_script.h, issue 13 case
// 8): the script and every process it started are gone after a timeout, after it exits
// leaving a child behind, when the run is abandoned (etr-run ending) or cancelled (a
// signal to etr-run), also when they ignore SIGTERM. The scripts write their own pids and
// their children's to files; "gone" is checked with kill(pid, 0) and kill(-pgid, 0).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "launcher/discovery_script.h"
#include "launcher/hosts.h"
#include "runtime/error.h"
#include "unit/launcher_test_util.h"

namespace etr {
namespace {

using namespace launcher_test;  // NOLINT: the helpers of these tests
using std::chrono::milliseconds;

// A pid written by a script: waits (up to 10 s) for the file to hold a whole line.
pid_t pid_in(const fs::path& file) {
  for (int i = 0; i < 1000; ++i) {
    const std::string text = read_file(file);
    if (!text.empty() && text.back() == '\n') return static_cast<pid_t>(std::stol(text));
    std::this_thread::sleep_for(milliseconds(10));
  }
  ADD_FAILURE() << "no pid in " << file;
  return -1;
}

// The state letter of process `pid` in /proc/<pid>/stat; 0 when there is no such process.
char state_of(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? 0 : stat[close + 2];
}

// True when process `pid` no longer runs: it does not exist or is a zombie (dead, its
// parent or init not having reaped it yet). Allows up to 5 s for a signal to land.
bool gone(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    const char s = state_of(pid);
    if (s == 0 || s == 'Z') return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

// True when no process of group `pgid` runs (kill(-pgid, 0) fails, or every member left
// is a zombie).
bool group_gone(pid_t pgid) {
  for (int i = 0; i < 500; ++i) {
    if (::kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    bool running = false;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const pid_t pid = static_cast<pid_t>(std::stol(name));
      if (::getpgid(pid) == pgid && state_of(pid) != 'Z' && state_of(pid) != 0) running = true;
    }
    if (!running) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

// A script that writes its pid to <dir>/script.pid, starts `sleep 300` in the background
// (its pid to <dir>/child.pid), prints a host, then does `tail`.
std::string script_with_child(const TempDir& dir, const std::string& tail,
                              const std::string& head = "") {
  const std::string d = dir.path().string();
  return dir.write("discover.sh",
                   "#!/bin/sh\n" + head + "echo $$ >" + d + "/script.pid\nsleep 300 &\necho $! >" +
                       d + "/child.pid\necho h1:2\n" + tail + "\n",
                   0755);
}

TEST(DiscoveryScript, HangingScriptAndItsChildAreEndedAtTheTimeout) {
  TempDir dir;
  const std::string path = script_with_child(dir, "wait");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg =
      io_error([&] { HostSource(HostSource::Kind::kScript, path).discover(milliseconds(300)); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::seconds(100));  // not the sleep's 300
  EXPECT_EQ(msg, "the host discovery script " + path +
                     " did not finish within 0.3 s (--discovery-timeout) and was ended");
  const pid_t script = pid_in(dir.path() / "script.pid");
  EXPECT_TRUE(group_gone(script)) << "the script's process group is still there";
  EXPECT_TRUE(gone(pid_in(dir.path() / "child.pid"))) << "the script's child is still running";
}

TEST(DiscoveryScript, ProcessesIgnoringSigtermAreKilled) {
  TempDir dir;
  // trap '' TERM: the shell and the sleep it starts (ignored signals are inherited)
  // ignore SIGTERM; only SIGKILL, kKillGrace later, ends them.
  const std::string path = script_with_child(dir, "wait", "trap '' TERM\n");
  EXPECT_THAT(
      io_error([&] { HostSource(HostSource::Kind::kScript, path).discover(milliseconds(300)); }),
      HasSubstr("did not finish"));
  EXPECT_TRUE(group_gone(pid_in(dir.path() / "script.pid")));
  EXPECT_TRUE(gone(pid_in(dir.path() / "child.pid")));
}

TEST(DiscoveryScript, ChildLeftBehindByAScriptThatExitedIsEnded) {
  TempDir dir;
  const std::string path = script_with_child(dir, "exit 0");
  EXPECT_EQ(HostSource(HostSource::Kind::kScript, path).discover(milliseconds(10'000)),
            (HostList{{"h1", 2}}));
  EXPECT_TRUE(gone(pid_in(dir.path() / "child.pid")));
  EXPECT_TRUE(group_gone(pid_in(dir.path() / "script.pid")));
}

TEST(DiscoveryScript, AbandonedRunIsEndedWithItsGroup) {
  TempDir dir;
  const std::string path = script_with_child(dir, "wait");
  pid_t pgid = -1;
  {
    launcher::DiscoveryScript run(path, std::chrono::seconds(60));
    pgid = run.pid();
    EXPECT_FALSE(run.poll(milliseconds(200)));
    EXPECT_EQ(pid_in(dir.path() / "script.pid"), pgid);  // the script leads its own group
    EXPECT_EQ(::getpgid(pgid), pgid);
    EXPECT_NE(::getpgid(pgid), ::getpgrp());
  }  // etr-run ending: the destructor
  EXPECT_TRUE(group_gone(pgid));
  EXPECT_TRUE(gone(pid_in(dir.path() / "child.pid")));
}

TEST(DiscoveryScript, CancelledDiscoveryEndsTheScriptAtOnce) {
  TempDir dir;
  const std::string path = script_with_child(dir, "wait");
  const auto t0 = std::chrono::steady_clock::now();
  auto cancelled = [&] { return std::chrono::steady_clock::now() - t0 > milliseconds(300); };
  EXPECT_THAT(
      io_error([&] {
        HostSource(HostSource::Kind::kScript, path).discover(std::chrono::seconds(60), cancelled);
      }),
      HasSubstr("was ended: etr-run is stopping"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));  // not the 60 s
  EXPECT_TRUE(group_gone(pid_in(dir.path() / "script.pid")));
  EXPECT_TRUE(gone(pid_in(dir.path() / "child.pid")));
}

TEST(DiscoveryScript, EndlessOutputIsCutAtOneMiB) {
  TempDir dir;
  const std::string d = dir.path().string();
  const std::string path =
      dir.write("yes.sh", "#!/bin/sh\necho $$ >" + d + "/script.pid\nexec yes h1:1\n", 0755);
  EXPECT_THAT(io_error([&] {
                HostSource(HostSource::Kind::kScript, path).discover(std::chrono::seconds(60));
              }),
              HasSubstr("printed more than 1 MiB and was ended"));
  EXPECT_TRUE(group_gone(pid_in(dir.path() / "script.pid")));
}

TEST(DiscoveryScript, PollWithoutWaitingReportsARunningScript) {
  TempDir dir;
  const std::string path = dir.write("slow.sh", "#!/bin/sh\nsleep 0.3\necho h2:3\n", 0755);
  launcher::Discovery d = HostSource(HostSource::Kind::kScript, path).start(milliseconds(10'000));
  EXPECT_FALSE(d.poll(milliseconds(0)));
  int polls = 0;
  while (!d.poll(milliseconds(0)) && polls < 100'000) {
    std::this_thread::sleep_for(milliseconds(1));
    ++polls;
  }
  EXPECT_EQ(d.result(), (HostList{{"h2", 3}}));
}

TEST(DiscoveryScript, StdinIsNotInherited) {
  TempDir dir;
  // A script reading its standard input gets end-of-file at once (/dev/null), not
  // etr-run's terminal.
  // etr-run's stdin here: a pipe nobody writes to, on which a read would wait forever.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDIN_FILENO);
  ::dup2(fds[0], STDIN_FILENO);
  const std::string path = dir.write("read.sh", "#!/bin/sh\ncat\necho h3\n", 0755);
  std::optional<HostList> hosts;
  try {
    hosts = HostSource(HostSource::Kind::kScript, path).discover(std::chrono::seconds(5));
  } catch (const Error& e) {
    ADD_FAILURE() << e.what();
  }
  ::dup2(saved, STDIN_FILENO);
  for (int fd : {saved, fds[0], fds[1]}) ::close(fd);
  EXPECT_EQ(hosts, (HostList{{"h3", 1}}));
}

}  // namespace
}  // namespace etr
