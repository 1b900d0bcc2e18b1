// The ranks' heartbeats (runtime/heartbeat.h) and etr-run's watch over them
// (launcher/heartbeat_watch.h), on loopback: beats keep a rank alive, silence past the
// timeout is reported once, a goodbye is not silence, other launches' beats are ignored.
#include "launcher/heartbeat_watch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <atomic>
#include <string>
#include <thread>

#include "runtime/error.h"
#include "runtime/heartbeat.h"
#include "unit/heartbeat_datagram.h"

namespace etr::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = HeartbeatWatch::Clock;

HeartbeatTimeoutOptions fixed(std::chrono::milliseconds t) {
  HeartbeatTimeoutOptions o;
  o.fixed = t;
  return o;
}

std::string local_target(const HeartbeatWatch& w) { return w.target({{"localhost", 2}}); }

// Polls `w` for `span`, collecting what it reports.
std::vector<HeartbeatWatch::Silent> watch_for(HeartbeatWatch& w, std::chrono::milliseconds span) {
  std::vector<HeartbeatWatch::Silent> out;
  const auto end = Clock::now() + span;
  while (Clock::now() < end) {
    for (const auto& s : w.poll()) out.push_back(s);
    std::this_thread::sleep_for(10ms);
  }
  return out;
}

TEST(Heartbeat, BeatingRanksStayAliveAndAGoodbyeIsNotSilence) {
  HeartbeatWatch w(fixed(1000ms));
  w.begin_launch(4);
  const std::string target = local_target(w);
  ASSERT_EQ(target.rfind("127.0.0.1:", 0), 0u) << target;
  {
    Heartbeat a(target, 4, 0, 50ms), b(target, 4, 1, 50ms);
    EXPECT_TRUE(watch_for(w, 1500ms).empty()) << "beating every 50 ms, nobody is silent for 1 s";
    EXPECT_EQ(w.ranks_heard(), 2);
    EXPECT_GE(a.sent(), 5);
  }  // both say goodbye
  EXPECT_TRUE(watch_for(w, 1500ms).empty()) << "ranks that left normally are not silent";
}

TEST(Heartbeat, ASilentRankIsReportedOnceWithItsPid) {
  HeartbeatWatch w(fixed(1000ms));
  w.begin_launch(1);
  const std::string target = local_target(w);
  Heartbeat alive(target, 1, 0, 50ms);
  // Rank 1 beats once, then nothing (a stopped process never reaches its goodbye).
  send_datagram(target, "etr-hb 1 1 4242 h1 0 start");
  send_datagram(target, "etr-hb 2 3 4343 h1 0 start");  // another launch's rank 3: not this launch's
  send_datagram(target, "not a heartbeat");
  const auto got = watch_for(w, 1500ms);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 1);
  EXPECT_EQ(got[0].pid, 4242);
  EXPECT_EQ(got[0].host, "h1");
  EXPECT_TRUE(got[0].local) << "it beat from loopback: its pid is this machine's";
  EXPECT_GE(got[0].seconds, 1.0);
  EXPECT_EQ(w.ranks_heard(), 2);
  EXPECT_TRUE(watch_for(w, 300ms).empty()) << "each silent rank is reported once";
  // A new launch forgets the old one's ranks.
  w.begin_launch(2);
  EXPECT_EQ(w.ranks_heard(), 0);
}

// The learned timeout on loopback: ranks beating every 20 ms teach it a timeout far below
// the initial 3 s, and a rank that then stops is reported after that, not after 3 s.
TEST(Heartbeat, TheLearnedTimeoutFindsAStoppedRankSooner) {
  HeartbeatTimeoutOptions o;
  o.min_gaps = 60;
  o.floor = 150ms;
  HeartbeatWatch w(o);
  w.begin_launch(3);
  const std::string target = local_target(w);
  // Rank 1 beats as a rank's thread does, until it stops without a goodbye (a stopped
  // process); rank 0 beats through the runtime's Heartbeat.
  std::atomic<bool> stop{false};
  std::thread stopped([&] {
    while (!stop) {
      send_datagram(target, "etr-hb 3 1 4242 h1 0 compute");
      std::this_thread::sleep_for(20ms);
    }
  });
  Heartbeat alive(target, 3, 0, 20ms);
  EXPECT_EQ(w.timeout(), 3000ms) << "the initial timeout before any gap";
  EXPECT_TRUE(watch_for(w, 1200ms).empty());
  ASSERT_GE(w.timeout_model().gaps_seen(), 60) << "two ranks beating every 20 ms for 1.2 s";
  const double q = w.timeout_model().gap_quantile();
  EXPECT_GE(q, 0.015) << "the beats are 20 ms apart: the arrival gaps' high quantile is not below that";
  EXPECT_LT(w.timeout(), 3000ms) << w.timeout_model().describe();
  EXPECT_EQ(w.timeout().count(), std::max<int64_t>(150, static_cast<int64_t>(std::ceil(4 * q * 1000))))
      << w.timeout_model().describe();
  stop = true;
  stopped.join();
  const auto learned = w.timeout();
  const auto t0 = Clock::now();
  std::vector<HeartbeatWatch::Silent> got;
  while (got.empty() && Clock::now() - t0 < 3000ms) {
    got = w.poll();
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rank, 1);
  EXPECT_LT(Clock::now() - t0, learned + 400ms) << "found after the learned timeout, not the initial 3 s";
}

// A rank of a launch etr-run has ended (cut off by a partition, back after the relaunch)
// is told so by the watch when its beats arrive, and ends itself; a rank of the launch in
// flight is never told.
TEST(Heartbeat, ARankOfAnEndedLaunchIsToldToEnd) {
  HeartbeatWatch w(fixed(5000ms));
  w.begin_launch(1);
  const std::string target = local_target(w);
  std::atomic<int> ended{0};
  Heartbeat current(target, 1, 0, 20ms, [&] { ++ended; });
  EXPECT_TRUE(watch_for(w, 300ms).empty());
  EXPECT_EQ(ended.load(), 0) << "a rank of the launch in flight is not told to end";
  EXPECT_EQ(w.stale_told(), 0);
  w.begin_launch(2);  // etr-run ended launch 1 and started the next one
  const auto t0 = Clock::now();
  while (ended.load() == 0 && Clock::now() - t0 < 2000ms) {
    w.poll();
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(ended.load(), 1) << "the stale rank was told to end";
  EXPECT_LT(Clock::now() - t0, 500ms) << "within a beat or two";
  EXPECT_GE(w.stale_told(), 1);
  EXPECT_EQ(w.ranks_heard(), 0) << "the stale rank does not count as one of launch 2's";
}

TEST(Heartbeat, ATargetThatIsNotAnAddressIsRefusedWithASentence) {
  for (const std::string bad : {"localhost:80", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:99999", "x:1"}) {
    try {
      Heartbeat h(bad, 0, 0);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("ETR_RUN_HEARTBEAT='" + bad + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(Heartbeat("", 0, 0).active());
}

}  // namespace
}  // namespace etr::launcher
