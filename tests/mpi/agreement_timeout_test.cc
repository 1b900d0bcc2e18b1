// The checkpoint agreement collectives (checkpoint/agreement.h):
//   - all_true, first_error, all_gather and broadcast give the values of MPI's own
//     blocking collectives (the reference), for every pattern of failing ranks, empty,
//     one-byte and long sentences
//   - a rank that joins late makes the waiting ranks throw CommError after
//     ETR_COMM_TIMEOUT_S (here 1 s), not wait forever; a cancelled wait
//     (WaitCancellation) throws at once
//
// Cleaning up after a timeout: rank 0's all_true is still outstanding on the group when
// it throws (MPI cannot cancel a collective), and agreement.h leaks its buffers for that
// reason. The late ranks' all_true then completes against rank 0's abandoned
// contribution (they see true, the value rank 0 sent), and every rank next joins one
// barrier on the same group, which matches in order after that all_true; so the test
// ends with no rank waiting and the group in step, and it frees the group normally.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/agreement.h"
#include "mpi/mpi_test_main.h"
#include "runtime/error.h"
#include "runtime/mpi_wait.h"

namespace etr::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Sets ETR_COMM_TIMEOUT_S for one test, on this rank (the agreement functions read it
// on every call), and unsets it afterwards.
class ScopedTimeout {
 public:
  explicit ScopedTimeout(const char* seconds) { setenv("ETR_COMM_TIMEOUT_S", seconds, 1); }
  ~ScopedTimeout() { unsetenv("ETR_COMM_TIMEOUT_S"); }
  ScopedTimeout(const ScopedTimeout&) = delete;
  ScopedTimeout& operator=(const ScopedTimeout&) = delete;
};

// A sentence of `length` bytes that says which rank wrote it.
std::string sentence(int rank, size_t length) {
  std::string s;
  while (s.size() < length) s += "rank " + std::to_string(rank) + " failed; ";
  s.resize(length);
  return s;
}

TEST(CollectiveTimeout, ParsesTheEnvironment) {
  unsetenv("ETR_COMM_TIMEOUT_S");
  EXPECT_EQ(collective_timeout().count(), 300'000);
  {
    ScopedTimeout t("");
    EXPECT_EQ(collective_timeout().count(), 300'000);
  }
  {
    ScopedTimeout t("2.5");
    EXPECT_EQ(collective_timeout().count(), 2500);
  }
  for (const char* bad : {"0", "-1", "abc", "5s"}) {
    ScopedTimeout t(bad);
    try {
      collective_timeout();
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("ETR_COMM_TIMEOUT_S='") + bad +
                                           "' is not a positive number of seconds");
    }
  }
}

TEST(Agreement, AllTrueMatchesMpiAllreduce) {
  ScopedTimeout t("30");
  Group group = world().group().dup("agreement");
  const int r = group.rank(), n = group.size();
  // Patterns: all true, all false, then rank k alone false, then rank k alone true.
  for (int pattern = 0; pattern < 2 + 2 * n; ++pattern) {
    bool flag = pattern == 0      ? true
                : pattern == 1    ? false
                : pattern < 2 + n ? r != pattern - 2
                                  : r == pattern - 2 - n;
    int mine = flag ? 1 : 0, expected = 0;
    MPI_Allreduce(&mine, &expected, 1, MPI_INT, MPI_LAND, group.comm());
    EXPECT_EQ(all_true(group, flag), expected != 0) << "pattern " << pattern;
  }
}

TEST(Agreement, FirstErrorMatchesMpiAllreduce) {
  ScopedTimeout t("30");
  Group group = world().group().dup("agreement");
  const int r = group.rank(), n = group.size();
  for (size_t length : {size_t{1}, size_t{37}, size_t{100'003}}) {
    // Every subset of failing ranks (a bit per rank).
    for (int failing = 0; failing < (1 << n); ++failing) {
      const bool fails = (failing >> r) & 1;
      // Each rank's sentence has its own length, so the wrong root shows up.
      const std::string local = fails ? sentence(r, length + static_cast<size_t>(r)) : "";
      int mine = fails ? r : n, first = n;
      MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, group.comm());
      const std::string expected =
          first == n ? "" : sentence(first, length + static_cast<size_t>(first));
      const std::string got = first_error(group, local);
      EXPECT_EQ(got.size(), expected.size()) << "failing 0x" << std::hex << failing;
      EXPECT_TRUE(got == expected) << "failing 0x" << std::hex << failing;
    }
  }
}

struct Record {
  int rank;
  double value;
  char tag[3];
};

TEST(Agreement, AllGatherAndBroadcastMatchMpi) {
  ScopedTimeout t("30");
  Group group = world().group().dup("agreement");
  const int r = group.rank(), n = group.size();
  const Record mine{r, 1.5 * r - 7, {'a', static_cast<char>('a' + r), 'z'}};
  std::vector<Record> expected(static_cast<size_t>(n));
  MPI_Allgather(&mine, sizeof(Record), MPI_BYTE, expected.data(), sizeof(Record), MPI_BYTE,
                group.comm());
  const std::vector<Record> got = all_gather(group, mine);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].rank, expected[i].rank);
    EXPECT_EQ(got[i].value, expected[i].value);
    EXPECT_EQ(std::string(got[i].tag, 3), std::string(expected[i].tag, 3));
  }
  for (int root = 0; root < n; ++root) {
    uint64_t value = 1000u + static_cast<uint64_t>(r), reference = value;
    MPI_Bcast(&reference, 1, MPI_UINT64_T, root, group.comm());
    EXPECT_EQ(broadcast(group, value, root), reference) << "root " << root;
  }
}

TEST(Agreement, ALateRankTurnsIntoCommErrorAfterTheTimeout) {
  if (world().size() < 2) GTEST_SKIP() << "needs a second rank to be late";
  ScopedTimeout t("1");
  Group group = world().group().dup("agreement-timeout");
  MPI_Barrier(group.comm());  // start together
  if (group.rank() == 0) {
    const Clock::time_point t0 = Clock::now();
    std::string message;
    try {
      all_true(group, true);
      ADD_FAILURE() << "all_true returned although the other ranks were asleep";
    } catch (const CommError& e) {
      message = e.what();
    }
    const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("  rank 0 gave up after %.3f s: %s\n", elapsed, message.c_str());
    EXPECT_GE(elapsed, 0.9);
    EXPECT_LT(elapsed, 2.4);
    EXPECT_NE(message.find("ETR_COMM_TIMEOUT_S"), std::string::npos) << message;
    EXPECT_NE(message.find("all_true"), std::string::npos) << message;
    EXPECT_NE(message.find("agreement-timeout"), std::string::npos) << message;
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    // Rank 0 is in the barrier below by now, which drives its abandoned all_true on.
    EXPECT_TRUE(all_true(group, true));
  }
  // Matches after the all_true on every rank (see the top of the file). Generous limit:
  // the late ranks arrive here about 1.5 s after rank 0.
  setenv("ETR_COMM_TIMEOUT_S", "30", 1);
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Ibarrier(group.comm(), &request), MPI_SUCCESS);
  EXPECT_NO_THROW(wait_with_timeout(request, "cleanup barrier"));
}

// A wait on a thread with a WaitCancellation ends with a CommError once its flag is set
// (a checkpoint writer being destroyed), long before the timeout; the collective stays
// outstanding and completes when the late ranks join, as after a timeout.
TEST(Agreement, ACancelledWaitEndsAtOnceNotAtTheTimeout) {
  if (world().size() < 2) GTEST_SKIP() << "needs a second rank to be late";
  ScopedTimeout t("30");
  Group group = world().group().dup("agreement-cancel");
  MPI_Barrier(group.comm());
  if (group.rank() == 0) {
    std::atomic<bool> abandon{false};
    std::string message;
    double elapsed = 0;
    std::thread waiter([&] {
      const WaitCancellation cancel(&abandon);
      const Clock::time_point t0 = Clock::now();
      try {
        all_true(group, true);
        ADD_FAILURE() << "all_true returned although the other ranks were asleep";
      } catch (const CommError& e) {
        message = e.what();
      }
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    abandon.store(true);
    waiter.join();
    EXPECT_GE(elapsed, 0.25);
    EXPECT_LT(elapsed, 1.5);  // the timeout is 30 s
    EXPECT_NE(message.find("abandoned"), std::string::npos) << message;
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // well after 1.5 s
    EXPECT_TRUE(all_true(group, true));
  }
  MPI_Request request = MPI_REQUEST_NULL;
  ASSERT_EQ(MPI_Ibarrier(group.comm(), &request), MPI_SUCCESS);
  EXPECT_NO_THROW(wait_with_timeout(request, "cleanup barrier"));
}

}  // namespace
}  // namespace etr::testing
