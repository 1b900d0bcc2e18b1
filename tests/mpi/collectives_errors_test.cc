// HostCommunicator failure paths: bad arguments raise InvalidArgument with a sentence;
// Work::wait(timeout) gives up on a still-running op without harming it; a collective a
// rank never joins fails after CommOptions::timeout with a CommError naming the op, the
// group, the rank and the time waited, and leaves the communicator broken.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/host_communicator.h"
#include "mpi/collectives_test_util.h"
#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

int64_t ms_since(Clock::time_point t0) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t0).count();
}

std::string wait_for_barrier(HostCommunicator& comm) {
  std::exception_ptr e = run_op([&] { return comm.barrier(); }, milliseconds(30'000));
  return e ? what(e) : "";
}

// ---------------------------------------------------------------------------------------
// Bad arguments

// Expects `issue` (plus waiting for its Work, if it returns one) to raise
// InvalidArgument whose message is a sentence. A bad argument that is not rejected could
// start an op the other ranks do not join, so waits are capped at 5 s.
void expect_invalid(const std::string& what_case, const std::function<WorkPtr()>& issue) {
  std::exception_ptr e = run_op(issue, milliseconds(5000));
  EXPECT_TRUE(holds<InvalidArgument>(e))
      << what_case << ": expected InvalidArgument, got: " << what(e);
  if (!holds<InvalidArgument>(e)) return;
  const std::string msg = what(e);
  EXPECT_GE(msg.size(), 20u) << what_case << ": the message is not a sentence: '" << msg << "'";
  EXPECT_NE(msg.find(' '), std::string::npos) << what_case << ": '" << msg << "'";
  if (world().rank() == 0) std::printf("  %-44s -> %s\n", what_case.c_str(), msg.c_str());
}

TEST(BadArguments, RaiseInvalidArgumentWithASentence) {
  HostCommunicator comm(world().group(), test_options());
  const int r = comm.rank(), np = comm.size();
  const DType f32 = DType::kF32;
  std::vector<float> a(64, 1.0f), b(64 * 8, 1.0f);
  std::vector<double> d(64, 1.0);
  std::vector<int32_t> ints(64, 1);
  auto fv = [](std::vector<float>& v, int64_t n) {
    return TensorView::flat(v.data(), n, DType::kF32);
  };
  const Device gpu = Device::cuda(0);

  expect_invalid("allreduce in [10] out [11]",
                 [&] { return comm.allreduce(fv(a, 10), fv(b, 11), ReduceOp::kSum); });
  expect_invalid("allreduce in f32 out f64", [&] {
    return comm.allreduce(fv(a, 10), TensorView::flat(d.data(), 10, DType::kF64), ReduceOp::kSum);
  });
  expect_invalid("allreduce null in-place buffer of 10", [&] {
    return comm.allreduce(TensorView::flat(nullptr, 10, f32), ReduceOp::kSum);
  });
  expect_invalid("allreduce null output of 10", [&] {
    return comm.allreduce(fv(a, 10), TensorView::flat(nullptr, 10, f32), ReduceOp::kSum);
  });
  expect_invalid("allreduce avg on i32", [&] {
    return comm.allreduce(TensorView::flat(ints.data(), 10, DType::kI32), ReduceOp::kAvg);
  });
  expect_invalid("allreduce of a cuda:0 buffer", [&] {
    return comm.allreduce(TensorView::flat(a.data(), 10, f32, gpu), ReduceOp::kSum);
  });
  expect_invalid("allreduce cpu in, cuda:0 out", [&] {
    return comm.allreduce(fv(a, 10), TensorView::flat(b.data(), 10, f32, gpu), ReduceOp::kSum);
  });

  expect_invalid("reduce_scatter in [n*4+1] out [4]",
                 [&] { return comm.reduce_scatter(fv(b, np * 4 + 1), fv(a, 4), ReduceOp::kSum); });
  expect_invalid("reduce_scatter in [n*4] out [5]",
                 [&] { return comm.reduce_scatter(fv(b, np * 4), fv(a, 5), ReduceOp::kSum); });
  expect_invalid("reduce_scatter in f32 out f64", [&] {
    return comm.reduce_scatter(fv(b, np * 4), TensorView::flat(d.data(), 4, DType::kF64),
                               ReduceOp::kSum);
  });
  expect_invalid("reduce_scatter avg on i32", [&] {
    return comm.reduce_scatter(TensorView::flat(ints.data(), np * 4, DType::kI32),
                               TensorView::flat(ints.data() + r * 4, 4, DType::kI32),
                               ReduceOp::kAvg);
  });
  expect_invalid("reduce_scatter null input", [&] {
    return comm.reduce_scatter(TensorView::flat(nullptr, np * 4, f32), fv(a, 4), ReduceOp::kSum);
  });

  expect_invalid("allgather in [4] out [n*4+1]",
                 [&] { return comm.allgather(fv(a, 4), fv(b, np * 4 + 1)); });
  expect_invalid("allgather in f32 out f64", [&] {
    return comm.allgather(fv(a, 4), TensorView::flat(d.data(), np * 4, DType::kF64));
  });
  expect_invalid("allgather of a cuda:0 buffer", [&] {
    return comm.allgather(TensorView::flat(a.data(), 4, f32, gpu),
                          TensorView::flat(b.data(), np * 4, f32, gpu));
  });

  expect_invalid("broadcast root -1", [&] { return comm.broadcast(fv(a, 10), -1); });
  expect_invalid("broadcast root n", [&] { return comm.broadcast(fv(a, 10), np); });
  expect_invalid("broadcast null buffer of 10",
                 [&] { return comm.broadcast(TensorView::flat(nullptr, 10, f32), 0); });

  expect_invalid("send to self", [&] { return comm.send(fv(a, 10), r, 0); });
  expect_invalid("recv from self", [&] { return comm.recv(fv(a, 10), r, 0); });
  expect_invalid("send to peer -1", [&] { return comm.send(fv(a, 10), -1, 0); });
  expect_invalid("send to peer n", [&] { return comm.send(fv(a, 10), np, 0); });
  expect_invalid("recv from peer n", [&] { return comm.recv(fv(a, 10), np, 0); });
  expect_invalid("send of a null buffer of 10",
                 [&] { return comm.send(TensorView::flat(nullptr, 10, f32), (r + 1) % np, 0); });
  expect_invalid("send of a cuda:0 buffer", [&] {
    return comm.send(TensorView::flat(a.data(), 10, f32, gpu), (r + 1) % np, 0);
  });

  // Rejected calls leave the communicator usable (no rank started anything).
  std::fill(a.begin(), a.end(), static_cast<float>(r + 1));
  std::exception_ptr e =
      run_op([&] { return comm.allreduce(fv(a, 10), ReduceOp::kSum); }, milliseconds(30'000));
  EXPECT_FALSE(e) << "allreduce after the rejected calls: " << what(e);
  EXPECT_EQ(a[9], np * (np + 1) / 2.0f) << "allreduce after the rejected calls";
}

// A negative tag is not a valid MPI tag; passing it on would end in an MPI error.
TEST(BadArguments, NegativeTagIsRejected) {
  if (world().size() < 2) GTEST_SKIP() << "a 1-rank world has no peer";
  HostCommunicator comm(world().group(), test_options());
  std::vector<float> a(10, 1.0f);
  const int right = (comm.rank() + 1) % comm.size();
  expect_invalid("send with tag -1",
                 [&] { return comm.send(TensorView::flat(a.data(), 10, DType::kF32), right, -1); });
}

// A null pointer with no elements is a valid empty buffer.
TEST(BadArguments, NullPointerWithZeroElementsIsFine) {
  HostCommunicator comm(world().group(), test_options());
  const TensorView empty = TensorView::flat(nullptr, 0, DType::kF32);
  EXPECT_FALSE(run_op([&] { return comm.allreduce(empty, ReduceOp::kSum); }))
      << "allreduce of a null empty buffer";
  EXPECT_FALSE(run_op([&] { return comm.allgather(empty, empty); }))
      << "allgather of null empty buffers";
  EXPECT_FALSE(run_op([&] { return comm.broadcast(empty, 0); }))
      << "broadcast of a null empty buffer";
}

// ---------------------------------------------------------------------------------------
// Work::wait(timeout) on an op that is still running

void wait_timeout_then_complete(const CommOptions& o, int64_t n, const std::string& what_case) {
  HostCommunicator comm(world().group(), o);
  const int r = comm.rank(), np = comm.size();
  const auto inputs = all_inputs(DType::kF32, Fill::kExact, 55, np, n);
  Buffer buf(DType::kF32, n);
  buf.fill_from(inputs, r * n);
  ASSERT_EQ(wait_for_barrier(comm), "");
  if (r == 1) std::this_thread::sleep_for(milliseconds(1000));
  WorkPtr w = comm.allreduce(buf.view(), ReduceOp::kSum);
  if (r == 0) {
    const auto t0 = Clock::now();
    try {
      w->wait(milliseconds(100));
      ADD_FAILURE() << what_case << ": wait(100 ms) returned although rank 1 joins 1 s late";
    } catch (const CommError& e) {
      EXPECT_LT(ms_since(t0), 900) << what_case << ": wait(100 ms) gave up late";
      EXPECT_NE(std::string(e.what()).find("allreduce"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what_case
                    << ": wait(100 ms) threw something else than CommError: " << e.what();
    }
    EXPECT_FALSE(w->is_completed()) << what_case;
    EXPECT_EQ(w->error(), nullptr) << what_case << ": giving up waiting must not fail the op";
  }
  std::exception_ptr e;
  try {
    w->wait();
  } catch (...) {
    e = std::current_exception();
  }
  EXPECT_FALSE(e) << what_case << ": the op failed after a wait timed out: " << what(e);
  EXPECT_EQ(compare(DType::kF32, buf.data(), reduce_reference(inputs, np, n, 0, n, ReduceOp::kSum),
                    Tolerance{}),
            "")
      << what_case;
}

TEST(WorkWait, TimeoutOnARunningOpThrowsThenTheOpCompletes) {
  if (world().size() < 2) GTEST_SKIP() << "needs a rank 1 that joins late";
  CommOptions o = test_options();
  o.inline_bytes = 0;  // the op must run on the engine, not inside allreduce()
  wait_timeout_then_complete(o, 1000, "allreduce(f32, n=1000, inline off)");
  // Above the inline limit with default options: runs on the engine anyway.
  wait_timeout_then_complete(test_options(), 100000, "allreduce(f32, n=100000)");
}

// ---------------------------------------------------------------------------------------
// Communicator timeout: rank 1 never joins

void expect_timeout(int64_t n) {
  const int r = world().rank();
  const milliseconds timeout{2000};
  Group group = world().group().dup("timeout-test");
  {
    CommOptions o = test_options();
    o.timeout = timeout;
    HostCommunicator comm(group, o);
    if (r != 1) {
      const std::string what_case = "allreduce(f32, n=" + std::to_string(n) + ") without rank 1";
      Buffer buf(DType::kF32, n);
      buf.fill_from(all_inputs(DType::kF32, Fill::kExact, 77, world().size(), n), r * n);
      const auto t0 = Clock::now();
      std::exception_ptr e = run_op([&] { return comm.allreduce(buf.view(), ReduceOp::kSum); });
      const int64_t elapsed = ms_since(t0);
      EXPECT_TRUE(holds<CommError>(e)) << what_case << ": expected CommError, got: " << what(e);
      EXPECT_GE(elapsed, timeout.count() - 100) << what_case << ": failed before the timeout";
      EXPECT_LE(elapsed, timeout.count() + 5000) << what_case << ": failed too late";
      const std::string msg = what(e);
      if (r == 0)
        std::printf("  rank 0, n=%lld, after %lld ms: %s\n", static_cast<long long>(n),
                    static_cast<long long>(elapsed), msg.c_str());
      for (const std::string& part :
           {std::string("allreduce"), std::string("timeout-test"), "rank " + std::to_string(r)})
        EXPECT_NE(msg.find(part), std::string::npos)
            << what_case << ": the message lacks '" << part << "': " << msg;
      EXPECT_TRUE(std::regex_search(msg, std::regex(R"(\d+(\.\d+)? ?(ms|s)\b)")))
          << what_case << ": the message gives no elapsed time: " << msg;

      // The communicator is now broken: every further op fails at once.
      for (const char* op : {"allreduce", "barrier"}) {
        const auto t1 = Clock::now();
        std::exception_ptr again = run_op([&] {
          return std::string(op) == "barrier" ? comm.barrier()
                                              : comm.allreduce(buf.view(), ReduceOp::kSum);
        });
        EXPECT_TRUE(holds<CommError>(again))
            << what_case << ": " << op << " on the broken communicator: " << what(again);
        EXPECT_LT(ms_since(t1), 1000)
            << what_case << ": " << op << " on the broken communicator did not fail at once";
      }
    }
  }  // every rank destroys the communicator, rank 1's never having been used
  world().barrier();
}

TEST(CommTimeout, SmallAllreduceWithoutRankOneFailsNamingOpGroupRankAndTime) {
  if (world().size() < 2) GTEST_SKIP() << "needs a rank 1 that never joins";
  expect_timeout(16);
}

TEST(CommTimeout, MediumAllreduceWithoutRankOneFailsNamingOpGroupRankAndTime) {
  if (world().size() < 2) GTEST_SKIP() << "needs a rank 1 that never joins";
  expect_timeout(100000);
}

// Learned deadlines (collectives/learned_deadline.h): after 40 allreduces of a few
// milliseconds at most (learned from the first 32; the next recomputation is at 48), one that rank 1 joins 3 s late fails on the others at the learned
// deadline (here the floor, 300 ms), far below the fixed 60 s, and says how it was chosen.
TEST(CommTimeout, ALearnedDeadlineEndsAnAllreduceARankJoinsLate) {
  if (world().size() < 2) GTEST_SKIP() << "needs a rank 1 that joins late";
  const int r = world().rank();
  Group group = world().group().dup("learned-test");
  {
    CommOptions o = test_options();
    o.timeout = milliseconds(60'000);
    o.learned_timeout_multiple = 10;
    o.learned_timeout_floor = milliseconds(300);
    HostCommunicator comm(group, o);
    Buffer buf(DType::kF32, 16);
    for (int i = 0; i < 40; ++i) {
      std::exception_ptr e = run_op([&] { return comm.allreduce(buf.view(), ReduceOp::kSum); });
      ASSERT_FALSE(e) << what(e);
    }
    if (r == 1) std::this_thread::sleep_for(milliseconds(3000));
    const auto t0 = Clock::now();
    std::exception_ptr e = run_op([&] { return comm.allreduce(buf.view(), ReduceOp::kSum); });
    const int64_t elapsed = ms_since(t0);
    // (Rank 1 itself may complete it: the others' small messages were sent before they
    // gave up.)
    if (r != 1) {
      EXPECT_TRUE(holds<CommError>(e)) << "expected CommError, got: " << what(e);
      EXPECT_GE(elapsed, 250) << what(e);
      EXPECT_LE(elapsed, 2500) << "not the learned deadline: " << what(e);
      EXPECT_NE(what(e).find("the deadline learned from the last 32 allreduce/6 operations: 10 x their 99th percentile"), std::string::npos)
          << what(e);
      if (r == 0) std::printf("  rank 0, after %lld ms: %s\n", static_cast<long long>(elapsed), what(e).c_str());
    }
  }
  world().barrier();
}

// A recv whose sender never sends fails after the timeout too, naming the op and rank.
TEST(CommTimeout, RecvWithoutASenderFails) {
  if (world().size() < 2) GTEST_SKIP() << "a 1-rank world has no peer";
  const int r = world().rank();
  Group group = world().group().dup("timeout-test");
  {
    CommOptions o = test_options();
    o.timeout = milliseconds(1000);
    HostCommunicator comm(group, o);
    if (r == 0) {
      Buffer buf(DType::kF32, 16);
      const auto t0 = Clock::now();
      std::exception_ptr e = run_op([&] { return comm.recv(buf.view(), 1, 9); });
      const int64_t elapsed = ms_since(t0);
      EXPECT_TRUE(holds<CommError>(e)) << "recv from a rank that never sends: " << what(e);
      EXPECT_GE(elapsed, 900) << what(e);
      EXPECT_LE(elapsed, 6000) << what(e);
      for (const char* part : {"recv", "timeout-test", "rank 0"})
        EXPECT_NE(what(e).find(part), std::string::npos)
            << "the message lacks '" << part << "': " << what(e);
    }
  }
  world().barrier();
}

// Ops already queued behind the op that timed out must not each wait out a timeout of
// their own: the communicator is broken from the moment the first one fails.
TEST(CommTimeout, OpsQueuedBehindATimedOutOpFailPromptly) {
  if (world().size() < 2) GTEST_SKIP() << "needs a rank 1 that never joins";
  const int r = world().rank();
  const milliseconds timeout{2000};
  Group group = world().group().dup("timeout-test");
  {
    CommOptions o = test_options();
    o.timeout = timeout;
    HostCommunicator comm(group, o);
    if (r != 1) {
      Buffer first(DType::kF32, 100000), second(DType::kF32, 1000);
      first.fill_sentinel();
      second.fill_sentinel();
      const auto t0 = Clock::now();
      WorkPtr a = comm.allreduce(first.view(), ReduceOp::kSum);   // runs on the engine
      WorkPtr b = comm.allreduce(second.view(), ReduceOp::kSum);  // queued behind it
      std::exception_ptr ea, eb;
      try {
        a->wait();
      } catch (...) {
        ea = std::current_exception();
      }
      const int64_t a_failed = ms_since(t0);
      try {
        b->wait();
      } catch (...) {
        eb = std::current_exception();
      }
      const int64_t b_failed = ms_since(t0);
      EXPECT_TRUE(holds<CommError>(ea)) << "first allreduce: " << what(ea);
      EXPECT_TRUE(holds<CommError>(eb)) << "queued allreduce: " << what(eb);
      EXPECT_LT(b_failed - a_failed, 1000)
          << "rank " << r << ": the allreduce queued behind a timed-out one failed "
          << b_failed - a_failed << " ms after it (at " << b_failed
          << " ms) instead of at once; its error: " << what(eb);
    }
  }
  world().barrier();
}

}  // namespace
}  // namespace etr::testing
