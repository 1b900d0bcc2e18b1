// The stalled-job timeout (launcher/heartbeat_watch.h): the ranks' beats carry how long
// their training thread has waited on its peers (runtime/peer_wait.h), and a silent rank
// on which every other rank waits is declared failed at half the learned timeout. A rank
// silent while the others do not all wait is declared at the full timeout, as before.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/heartbeat_watch.h"
#include "runtime/heartbeat.h"
#include "runtime/peer_wait.h"
#include "unit/heartbeat_datagram.h"

namespace etr::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = HeartbeatWatch::Clock;

TEST(PeerWait, OnlyTheReportingThreadsWaitsCountAndNestedScopesCountOnce) {
  report_peer_waits_of_this_thread();
  EXPECT_EQ(peer_wait_ms(), 0) << "not waiting";
  {
    const PeerWaitScope outer;
    std::this_thread::sleep_for(30ms);
    {
      const PeerWaitScope inner;  // a wait inside a wait: still the outer one's start
      EXPECT_GE(peer_wait_ms(), 25);
    }
    EXPECT_GE(peer_wait_ms(), 25) << "the inner scope's end does not end the outer wait";
  }
  EXPECT_EQ(peer_wait_ms(), 0) << "the wait ended";
  std::thread other([] {
    const PeerWaitScope elsewhere;  // another thread's waits (a checkpoint writer's) do not count
    std::this_thread::sleep_for(30ms);
    EXPECT_EQ(peer_wait_ms(), 0);
  });
  other.join();
}

// The last field of the datagrams a Heartbeat sends: its thread's wait on peers, in ms.
TEST(PeerWait, BeatsCarryTheTrainingThreadsWait) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::vector<long long> waits;
  auto drain = [&] {
    char buf[512];
    for (ssize_t n; (n = recv(fd, buf, sizeof buf - 1, 0)) > 0;) {
      buf[n] = '\0';
      std::istringstream in(buf);
      std::string kind, host, stage;
      long long launch, rank, pid, step, waited = -1;
      ASSERT_TRUE(in >> kind >> launch >> rank >> pid >> host >> step >> stage >> waited) << buf;
      waits.push_back(waited);
    }
  };
  {
    Heartbeat h("127.0.0.1:" + std::to_string(ntohs(addr.sin_port)), 1, 0, 20ms);
    std::this_thread::sleep_for(100ms);
    drain();
    ASSERT_FALSE(waits.empty());
    for (long long w : waits) EXPECT_EQ(w, 0) << "not waiting yet";
    waits.clear();
    {
      const PeerWaitScope waiting;
      std::this_thread::sleep_for(250ms);
    }
    drain();
    ASSERT_FALSE(waits.empty());
    long long most = 0;
    for (long long w : waits) most = std::max(most, w);
    EXPECT_GE(most, 150) << "a beat near the end of a 250 ms wait says so";
    std::this_thread::sleep_for(100ms);
    waits.clear();
    drain();
    ASSERT_FALSE(waits.empty());
    EXPECT_EQ(waits.back(), 0) << "the wait is over";
  }
  close(fd);
}

// Learning, still at its initial 1 s: the stalled timeout is 0.5 s.
HeartbeatTimeoutOptions learning_at_one_second() {
  HeartbeatTimeoutOptions o;
  o.initial = 1000ms;
  o.min_gaps = 100000;  // keep the initial timeout for the whole test
  return o;
}

// Ranks 0 and 1 beat every 20 ms saying they waited `waited` ms; rank 2 beats once and
// stops. Returns when rank 2 was declared silent and how.
struct Declared {
  double after = -1;  // seconds from rank 2's beat
  bool stalled = false;
};
Declared stop_rank_two(HeartbeatWatch& w, int ranks_told, int waited_of_rank1) {
  w.begin_launch(5, ranks_told);
  const std::string target = w.target({{"localhost", 3}});
  std::atomic<bool> stop{false};
  std::thread others([&] {
    while (!stop) {
      send_datagram(target, "etr-hb 5 0 100 h1 7 compute 300");
      send_datagram(target, "etr-hb 5 1 101 h1 7 compute " + std::to_string(waited_of_rank1));
      std::this_thread::sleep_for(20ms);
    }
  });
  std::this_thread::sleep_for(50ms);
  send_datagram(target, "etr-hb 5 2 102 h1 7 compute 0");
  const auto t0 = Clock::now();
  Declared d;
  while (Clock::now() - t0 < 2000ms && d.after < 0) {
    for (const auto& s : w.poll()) {
      EXPECT_EQ(s.rank, 2) << "only the stopped rank is silent";
      d = {std::chrono::duration<double>(Clock::now() - t0).count(), s.stalled};
    }
    std::this_thread::sleep_for(5ms);
  }
  stop = true;
  others.join();
  return d;
}

TEST(StalledJob, ASilentRankOnWhichEveryOtherRankWaitsIsDeclaredAtHalfTheTimeout) {
  HeartbeatWatch w(learning_at_one_second());
  EXPECT_EQ(w.timeout_model().stalled(), 500ms);
  const Declared d = stop_rank_two(w, 3, 300);
  EXPECT_TRUE(d.stalled);
  EXPECT_GE(d.after, 0.45);
  EXPECT_LT(d.after, 0.9) << "declared at the stalled timeout (0.5 s), not the full one (1 s)";
}

TEST(StalledJob, ASilentRankIsDeclaredAtTheFullTimeoutUnlessAllTheOthersWait) {
  HeartbeatWatch w(learning_at_one_second());
  const Declared d = stop_rank_two(w, 3, 20);  // rank 1 waited only 20 ms: the job trains on
  EXPECT_FALSE(d.stalled);
  EXPECT_GE(d.after, 0.95);
  // Nor when the launch's size is not known (a rank might not have beaten yet).
  HeartbeatWatch unsized(learning_at_one_second());
  const Declared u = stop_rank_two(unsized, 0, 300);
  EXPECT_FALSE(u.stalled);
  EXPECT_GE(u.after, 0.95);
}

TEST(StalledJob, AFixedTimeoutHasNoShorterForm) {
  HeartbeatTimeoutOptions o;
  o.fixed = 800ms;
  HeartbeatWatch w(o);
  EXPECT_EQ(w.timeout_model().stalled(), 800ms);
  const Declared d = stop_rank_two(w, 3, 300);
  EXPECT_FALSE(d.stalled);
  EXPECT_GE(d.after, 0.75);
}

TEST(StalledJob, TheStalledTimeoutFollowsTheLearnedGapsWithinItsFloor) {
  HeartbeatTimeoutOptions o;
  o.min_gaps = 4;
  o.floor = 100ms;
  HeartbeatTimeout t(o);
  t.observe_gap(0.5);
  EXPECT_EQ(t.stalled(), 1500ms) << "before min_gaps: half the initial 3 s";
  for (int i = 0; i < 8; ++i) t.observe_gap(0.5);  // learned: 4 x 0.5 s = 2 s
  EXPECT_EQ(t.current(), 2000ms);
  EXPECT_EQ(t.stalled(), 1250ms) << "2.5 x the gaps' 99.9th percentile (0.5 s)";
  HeartbeatTimeout beats(o);
  for (int i = 0; i < 8; ++i) beats.observe_gap(0.12);  // beats that arrive late
  EXPECT_EQ(beats.current(), 480ms);
  EXPECT_EQ(beats.stalled(), 300ms);
  HeartbeatTimeout quick(o);
  for (int i = 0; i < 8; ++i) quick.observe_gap(0.04);  // 2.5 x 0.04 s is below the 0.125 s floor
  EXPECT_EQ(quick.current(), 160ms);
  EXPECT_EQ(quick.stalled(), 125ms);
  HeartbeatTimeout quicker(o);
  for (int i = 0; i < 8; ++i) quicker.observe_gap(0.02);  // the timeout: its 0.1 s floor
  EXPECT_EQ(quicker.current(), 100ms);
  EXPECT_EQ(quicker.stalled(), 100ms) << "never longer than the timeout itself";
  o.stalled_floor = 50ms;
  HeartbeatTimeout low(o);
  for (int i = 0; i < 8; ++i) low.observe_gap(0.05);
  EXPECT_EQ(low.stalled(), 125ms);
  EXPECT_NE(low.describe().find("s for a rank on which every other rank waits"), std::string::npos)
      << low.describe();
}

TEST(StalledJob, TheNextSilenceIsAtTheStalledTimeoutWhileTheOthersWait) {
  HeartbeatWatch w(learning_at_one_second());
  w.begin_launch(6, 2);
  const std::string target = w.target({{"localhost", 2}});
  send_datagram(target, "etr-hb 6 0 100 h1 3 compute 0");
  send_datagram(target, "etr-hb 6 1 101 h1 3 compute 0");
  std::this_thread::sleep_for(20ms);
  const auto t0 = Clock::now();
  EXPECT_TRUE(w.poll(t0).empty());
  EXPECT_GT(w.next_silence() - t0, 900ms) << "nobody waits: the full timeout";
  send_datagram(target, "etr-hb 6 1 101 h1 3 compute 250");  // rank 1 waits on rank 0
  std::this_thread::sleep_for(20ms);
  const auto t1 = Clock::now();
  EXPECT_TRUE(w.poll(t1).empty());
  EXPECT_LT(w.next_silence() - t1, 500ms) << "rank 0, silent for ~40 ms, is due at 0.5 s";
}

}  // namespace
}  // namespace etr::launcher
