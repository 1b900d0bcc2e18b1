// The ranks' heartbeats (runtime/heartbeat.h) and etr-run's watch over them
// (launcher/heartbeat_watch.h), on loopback: beats keep a rank alive, silence past the
// timeout is reported once, a goodbye is not silence, other launches' beats are ignored.
#include "launcher/heartbeat_watch.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "runtime/error.h"
#include "runtime/heartbeat.h"

namespace etr::launcher {
namespace {

using namespace std::chrono_literals;
using Clock = HeartbeatWatch::Clock;

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
  HeartbeatWatch w(1000ms);
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

// One datagram to the watch's port on loopback, as a rank's heartbeat thread sends it.
void send_raw(const std::string& target, const std::string& text) {
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(std::stoi(target.substr(target.rfind(':') + 1))));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  ASSERT_EQ(sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
            static_cast<ssize_t>(text.size()));
  close(fd);
}

TEST(Heartbeat, ASilentRankIsReportedOnceWithItsPid) {
  HeartbeatWatch w(1000ms);
  w.begin_launch(1);
  const std::string target = local_target(w);
  Heartbeat alive(target, 1, 0, 50ms);
  // Rank 1 beats once, then nothing (a stopped process never reaches its goodbye).
  send_raw(target, "etr-hb 1 1 4242 h1 0 start");
  send_raw(target, "etr-hb 2 3 4343 h1 0 start");  // another launch's rank 3: not this launch's
  send_raw(target, "not a heartbeat");
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
