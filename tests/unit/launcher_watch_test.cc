// etr-run's wait while a launch runs (launcher/launch_watch.h, heartbeat_watch.h): it
// ends when mpirun exits even while a process mpirun left behind holds its stderr open,
// when a beat arrives, and when the next thing is due (a rank's silence, the next signal
// to an mpirun being ended, the end of the drain), not a polling interval later.
#include "launcher/launch_watch.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "launcher/heartbeat_watch.h"
#include "launcher/job_process.h"
#include "unit/heartbeat_datagram.h"

namespace etr::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = Watch::Clock;

// etr-run decided to end the launch: SIGTERM at once, SIGKILL kDecidedKillAfter later
// (this mpirun ignores SIGTERM, as one waiting on a daemon it cannot reach may as well).
TEST(LaunchWatch, ADecidedEndSendsSigtermThenSigkillOnSchedule) {
  const JobProcess job = start_job({"/bin/sh", "-c", "trap '' TERM; sleep 2"}, {});
  Watch w(job);
  std::this_thread::sleep_for(200ms);  // (the trap is set)
  end_stuck_mpirun(w, {}, nullptr);
  EXPECT_EQ(w.stuck_signals, 0) << "nothing failed, nothing decided";
  w.end_at = Clock::now();
  end_stuck_mpirun(w, {}, nullptr);
  EXPECT_EQ(w.stuck_signals, 1) << "SIGTERM when decided";
  end_stuck_mpirun(w, {}, nullptr);
  EXPECT_EQ(w.stuck_signals, 1) << "no SIGKILL before kDecidedKillAfter";
  const auto kill_at = next_due(w, {});
  while (Clock::now() < kill_at) pump(w, 0, PumpWake{-1, kill_at});
  EXPECT_FALSE(w.reaped) << "SIGTERM is ignored";
  end_stuck_mpirun(w, {}, nullptr);
  EXPECT_EQ(w.stuck_signals, 2);
  while (!w.reaped) pump(w, 0, PumpWake{-1, Clock::now() + 1s});
  EXPECT_TRUE(WIFSIGNALED(w.status) && WTERMSIG(w.status) == SIGKILL);
  close(job.stderr_fd);
}

// mpirun exits 0.1 s after its start, leaving a child behind that holds stderr open for
// 4 s (a launch agent's connection to a host cut off does that), longer than the drain.
TEST(LaunchWatch, MpirunsExitEndsTheWaitWhileItsStderrIsHeldOpen) {
  const JobProcess job = start_job({"/bin/sh", "-c", "sleep 4 & sleep 0.1; exit 3"}, {});
  Watch w(job);
  ASSERT_GE(w.pidfd, 0) << "Linux 5.3 or later has pidfd_open";
  const auto t0 = Clock::now();
  while (!w.reaped && Clock::now() - t0 < 15s) pump(w, 0, PumpWake{-1, Clock::now() + 10s});
  const auto took = Clock::now() - t0;
  ASSERT_TRUE(w.reaped);
  EXPECT_LT(took, 5s) << "the wait ended at the exit, not at its 10 s limit";
  EXPECT_EQ(WEXITSTATUS(w.status), 3);
  EXPECT_FALSE(w.eof) << "the child left behind still holds stderr";
  // The drain is what is due next: kDrainAfterExit after the exit.
  EXPECT_EQ(next_due(w, {}), w.reaped_at + kDrainAfterExit);
  while (!w.eof) pump(w, 0, PumpWake{-1, next_due(w, {})});
  EXPECT_GE(Clock::now() - w.reaped_at, kDrainAfterExit);
  EXPECT_LT(Clock::now() - w.reaped_at, kDrainAfterExit + 2s) << "stopped reading once the drain ended";
  close(job.stderr_fd);
}

TEST(LaunchWatch, TheNextSignalToAnMpirunBeingEndedIsDue) {
  // (a child left behind holds stderr for 4 s after mpirun is killed)
  const JobProcess job = start_job({"/bin/sh", "-c", "sleep 4 & sleep 20"}, {});
  Watch w(job);
  EXPECT_EQ(next_due(w, {}), Clock::time_point::max()) << "nothing failed, nothing decided";
  const auto error = Clock::now();
  EXPECT_EQ(next_due(w, error), error + kStuckMpirunGrace);
  w.end_at = error + 1s;  // etr-run decided to end the launch
  EXPECT_EQ(next_due(w, error), w.end_at);
  w.stuck_signals = 1;
  EXPECT_EQ(next_due(w, error), w.end_at + kDecidedKillAfter);
  w.stuck_signals = 2;
  EXPECT_EQ(next_due(w, error), Clock::time_point::max());
  std::this_thread::sleep_for(300ms);  // (the shell has started its child)
  kill(job.pid, SIGKILL);
  while (!w.reaped) pump(w, 0, PumpWake{-1, Clock::now() + 1s});
  ASSERT_FALSE(w.eof);
  EXPECT_EQ(next_due(w, error), w.reaped_at + kDrainAfterKill) << "killed by etr-run: the short drain";
  close(job.stderr_fd);
}

TEST(LaunchWatch, ABeatWakesTheWaitAndTheNextSilenceIsDue) {
  HeartbeatTimeoutOptions o;
  o.fixed = 800ms;
  HeartbeatWatch hb(o);
  hb.begin_launch(1);
  const std::string target = hb.target({{"localhost", 1}});
  EXPECT_EQ(hb.next_silence(), HeartbeatWatch::Clock::time_point::max()) << "no rank heard yet";
  const JobProcess job = start_job({"/bin/sh", "-c", "sleep 20"}, {});
  Watch w(job);
  std::thread rank([&] {
    std::this_thread::sleep_for(200ms);
    send_datagram(target, "etr-hb 1 0 4242 h1 0 compute");
  });
  const auto t0 = Clock::now();
  pump(w, 0, PumpWake{hb.fd(), Clock::now() + 10s});
  const auto woke = Clock::now();
  rank.join();
  EXPECT_LT(woke - t0, 5s) << "the beat ended the wait, not its 10 s limit";
  EXPECT_TRUE(hb.poll().empty());
  const auto heard = Clock::now();
  const auto due = hb.next_silence();
  EXPECT_GE(due, woke + 800ms - 50ms);
  EXPECT_LE(due, heard + 800ms) << "silent 800 ms after the beat was read";
  // Waiting until then finds the rank silent at once.
  while (Clock::now() < due) pump(w, 0, PumpWake{hb.fd(), due});
  const auto silent = hb.poll();
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0].rank, 0);
  EXPECT_EQ(hb.next_silence(), HeartbeatWatch::Clock::time_point::max()) << "reported once, then not watched";
  kill(job.pid, SIGKILL);
  while (!w.reaped) pump(w, 0, PumpWake{-1, Clock::now() + 1s});
  close(job.stderr_fd);
}

}  // namespace
}  // namespace etr::launcher
