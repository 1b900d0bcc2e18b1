// StagedCommunicator (collectives/staged_communicator.h) at np 1-4, with host memory
// standing in for the device through an injected copier that delays every copy on a thread
// of its own (DelayedCopier): a download the communicator did not wait for leaves stale
// staging bytes, an upload it did not wait for leaves a stale output, a staging buffer
// reused too early is overwritten by the next download. Each result is checked against
// the double-precision reference (exact fill: bitwise), against MPI's own MPI_Allreduce of
// the same inputs, and bitwise against the host communicator's own result.
#include "collectives/staged_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/host_communicator.h"
#include "mpi/collectives_test_util.h"
#include "mpi/mpi_test_main.h"
#include "parallel/bucket_reducer.h"
#include "runtime/error.h"

namespace etr::testing {
namespace {

using std::chrono::milliseconds;

// Copies run on a thread of their own, each after a random delay of 0-300 us, in the order
// issued; a fence waits until its copy has run. The bytes are read when the copy runs,
// as a GPU's copy engine reads them.
class DelayedCopier final : public StagedCopier {
 public:
  explicit DelayedCopier(uint64_t seed) : rng_(seed), worker_([this] { run(); }) {}
  ~DelayedCopier() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  Device device() const override { return Device::cpu(); }
  void* host_alloc(size_t bytes) override {
    allocations.fetch_add(1);
    return ::operator new(bytes);
  }
  void host_free(void* p) noexcept override { ::operator delete(p); }
  CopyFencePtr download(void* dst, const void* src, size_t bytes) override {
    downloads.fetch_add(1);
    return enqueue(dst, src, bytes);
  }
  CopyFencePtr upload(void* dst, const void* src, size_t bytes) override {
    uploads.fetch_add(1);
    return enqueue(dst, src, bytes);
  }
  std::atomic<int> allocations{0}, downloads{0}, uploads{0};
  // While held, no copy runs (so no operation completes): a test issues a batch of them
  // all in flight at once, whatever the machine's timing.
  void hold(bool on) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = on;
    }
    cv_.notify_all();
  }

 private:
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    std::shared_ptr<std::atomic<bool>> done;
  };
  class Fence final : public CopyFence {
   public:
    explicit Fence(std::shared_ptr<std::atomic<bool>> done) : done_(std::move(done)) {}
    void wait(milliseconds timeout) override {
      const auto start = std::chrono::steady_clock::now();
      while (!done_->load()) {
        if (std::chrono::steady_clock::now() - start > timeout) throw CommError("copy timed out");
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }

   private:
    std::shared_ptr<std::atomic<bool>> done_;
  };
  CopyFencePtr enqueue(void* dst, const void* src, size_t bytes) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({dst, src, bytes, done});
    }
    cv_.notify_all();
    return std::make_unique<Fence>(done);
  }
  void run() {
    for (;;) {
      Copy c;
      int delay_us;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (!held_ && !queue_.empty()); });
        if (queue_.empty()) return;
        c = queue_.front();
        queue_.pop_front();
        delay_us = static_cast<int>(rng_() % 300);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      if (c.bytes > 0) std::memcpy(c.dst, c.src, c.bytes);
      c.done->store(true);
    }
  }
  std::mt19937_64 rng_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Copy> queue_;
  bool stop_ = false, held_ = false;
  std::thread worker_;
};

// A host communicator and a staged one over it with a DelayedCopier.
struct Staged {
  HostCommunicator host{world().group(), test_options()};
  DelayedCopier* copier = nullptr;
  std::unique_ptr<StagedCommunicator> comm;
  Staged() {
    auto c = std::make_unique<DelayedCopier>(1234 + static_cast<uint64_t>(world().rank()));
    copier = c.get();
    comm = std::make_unique<StagedCommunicator>(host, std::move(c));
  }
};

void expect_same_bytes(const Buffer& a, const Buffer& b, const std::string& name) {
  ASSERT_EQ(a.nbytes(), b.nbytes());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << name << ": not the host communicator's bits";
}

constexpr int64_t kSizes[] = {0, 1, 1000, 65537};

TEST(StagedCommunicator, AllreduceIsTheHostCommunicatorsAndTheReference) {
  Staged s;
  const int r = s.comm->rank(), np = s.comm->size();
  for (DType t : kAllDTypes) {
    for (ReduceOp op : kAllOps) {
      if (t == DType::kI32 && op == ReduceOp::kAvg) continue;
      for (int64_t n : kSizes) {
        for (bool in_place : {true, false}) {
          const std::string name = label("staged allreduce", op, t, n, in_place, "", np);
          const std::vector<double> inputs = all_inputs(t, Fill::kExact, 11 + n, np, n);
          Buffer in(t, n), out(t, n), host_in(t, n);
          in.fill_from(inputs, r * n);
          host_in.fill_from(inputs, r * n);
          out.fill_sentinel();
          ASSERT_FALSE(run_op([&] { return s.comm->allreduce(in.view(), in_place ? in.view() : out.view(), op); }))
              << name;
          ASSERT_FALSE(run_op([&] { return s.host.allreduce(host_in.view(), op); })) << name;
          const Buffer& got = in_place ? in : out;
          const Reference ref = reduce_reference(inputs, np, n, 0, n, op);
          EXPECT_EQ(compare(t, got.data(), ref, tolerance(t, Fill::kExact, op, np)), "") << name;
          expect_same_bytes(got, host_in, name);
          EXPECT_TRUE(got.guard_intact()) << name;
        }
      }
    }
  }
}

TEST(StagedCommunicator, AllreduceMatchesMpiAllreduce) {
  Staged s;
  const int r = s.comm->rank(), np = s.comm->size();
  const int64_t n = 100003;
  const std::vector<double> inputs = all_inputs(DType::kF64, Fill::kExact, 5, np, n);
  std::vector<double> mine(inputs.begin() + r * n, inputs.begin() + (r + 1) * n), mpi(n);
  MPI_Allreduce(mine.data(), mpi.data(), static_cast<int>(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  ASSERT_FALSE(run_op([&] { return s.comm->allreduce(TensorView::flat(mine.data(), n, DType::kF64), ReduceOp::kSum); }));
  EXPECT_EQ(mine, mpi);  // exact fill: every order of the sum is exact
}

TEST(StagedCommunicator, ReduceScatterAllgatherBroadcast) {
  Staged s;
  const int r = s.comm->rank(), np = s.comm->size();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF64}) {
    for (int64_t m : {int64_t{0}, int64_t{3}, int64_t{20000}}) {
      const std::vector<double> inputs = all_inputs(t, Fill::kExact, 17 + m, np, np * m);
      // reduce_scatter, in place and out of place
      for (bool in_place : {true, false}) {
        const std::string name = label("staged reduce_scatter", ReduceOp::kSum, t, m, in_place, "", np);
        Buffer in(t, np * m), out(t, m), host_in(t, np * m);
        in.fill_from(inputs, r * np * m);
        host_in.fill_from(inputs, r * np * m);
        ASSERT_FALSE(run_op([&] {
          return s.comm->reduce_scatter(in.view(), in_place ? in.view(r * m, m) : out.view(), ReduceOp::kSum);
        })) << name;
        ASSERT_FALSE(run_op([&] { return s.host.reduce_scatter(host_in.view(), host_in.view(r * m, m), ReduceOp::kSum); }));
        const Reference ref = reduce_reference(inputs, np, np * m, r * m, m, ReduceOp::kSum);
        const void* got = in_place ? static_cast<const char*>(in.data()) + r * m * dtype_size(t) : out.data();
        EXPECT_EQ(compare(t, got, ref, tolerance(t, Fill::kExact, ReduceOp::kSum, np)), "") << name;
        EXPECT_EQ(std::memcmp(got, static_cast<const char*>(host_in.data()) + r * m * dtype_size(t),
                              static_cast<size_t>(m) * dtype_size(t)), 0) << name;
      }
      // allgather: block q = rank q's input
      {
        const std::string name = label("staged allgather", t, m, false, "", np);
        Buffer in(t, m), out(t, np * m);
        in.fill_from(inputs, r * np * m);
        out.fill_sentinel();
        ASSERT_FALSE(run_op([&] { return s.comm->allgather(in.view(), out.view()); })) << name;
        std::vector<double> expected(static_cast<size_t>(np * m));
        for (int q = 0; q < np; ++q)
          for (int64_t i = 0; i < m; ++i) expected[q * m + i] = inputs[q * np * m + i];
        EXPECT_EQ(compare_exact(t, out.data(), expected, 0, np * m), "") << name;
      }
      // broadcast from every root
      for (int root = 0; root < np; ++root) {
        const std::string name = label("staged broadcast", t, m, true, "root=" + std::to_string(root), np);
        Buffer b(t, m);
        b.fill_from(inputs, root == r ? r * np * m : ((r + 1) % np) * np * m);
        ASSERT_FALSE(run_op([&] { return s.comm->broadcast(b.view(), root); })) << name;
        EXPECT_EQ(compare_exact(t, b.data(), inputs, root * np * m, m), "") << name;
      }
    }
  }
}

TEST(StagedCommunicator, SendRecvAroundTheRing) {
  Staged s;
  const int r = s.comm->rank(), np = s.comm->size();
  if (np == 1) GTEST_SKIP() << "no peer at np 1";
  const int64_t n = 30000;
  for (int tag : {0, 5}) {
    std::vector<float> out(n), in(n, -1.0f);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(r * 100000 + i + tag);
    WorkPtr rw = s.comm->recv(TensorView::flat(in.data(), n, DType::kF32), (r + np - 1) % np, tag);
    WorkPtr sw = s.comm->send(TensorView::flat(out.data(), n, DType::kF32), (r + 1) % np, tag);
    sw->wait(milliseconds(60000));
    rw->wait(milliseconds(60000));
    const int left = (r + np - 1) % np;
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(in[i], static_cast<float>(left * 100000 + i + tag)) << i;
  }
}

// Buckets issued back to back without waiting, as a reducer issues them during backward:
// each result is right (no staging buffer reused while in use), the timings do not
// overlap, and a second round of the same sizes allocates no staging.
TEST(StagedCommunicator, ManyInFlightReuseStagingAndTimeInOrder) {
  Staged s;
  const int r = s.comm->rank(), np = s.comm->size();
  const std::vector<int64_t> sizes = {4096, 65536, 65536, 1000, 262144, 65536, 7};
  for (int round = 0; round < 2; ++round) {
    const int allocations_before = s.copier->allocations.load();
    std::vector<std::vector<float>> bufs;
    std::vector<WorkPtr> works;
    for (size_t k = 0; k < sizes.size(); ++k) {
      bufs.emplace_back(sizes[k]);
      for (int64_t i = 0; i < sizes[k]; ++i) bufs[k][i] = static_cast<float>((r + 1) * (i % 97) + k);
    }
    s.copier->hold(true);  // every op in flight at once, in both rounds
    for (size_t k = 0; k < sizes.size(); ++k) {
      works.push_back(s.comm->allreduce(TensorView::flat(bufs[k].data(), sizes[k], DType::kF32), ReduceOp::kSum));
    }
    s.copier->hold(false);
    for (auto& w : works) w->wait(milliseconds(60000));
    const float ranks_sum = static_cast<float>(np * (np + 1) / 2);
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (int64_t i = 0; i < sizes[k]; ++i) {
        ASSERT_EQ(bufs[k][i], ranks_sum * static_cast<float>(i % 97) + static_cast<float>(np * k))
            << "round " << round << " bucket " << k << " element " << i;
      }
    }
    for (size_t k = 0; k < works.size(); ++k) {
      const WorkTiming t = works[k]->timing();
      EXPECT_LE(t.started, t.finished) << k;
      if (k > 0) {
        EXPECT_GE(t.started, works[k - 1]->timing().finished) << "op " << k << " overlaps op " << k - 1;
      }
    }
    if (round == 1) {
      EXPECT_EQ(s.copier->allocations.load(), allocations_before) << "the second round allocated staging";
    }
  }
  EXPECT_GT(s.comm->bytes_down(), 0u);
  EXPECT_EQ(s.comm->bytes_down(), s.comm->bytes_up());
}

// The data-parallel path: a BucketReducer over the staged communicator adds the same bits
// as over the host communicator on host memory, for allreduce and reduce-scatter buckets.
TEST(StagedCommunicator, BucketReducerAddsTheHostReducersBits) {
  Staged s;
  const int r = s.comm->rank(), np = s.comm->size();
  ParamLayout layout;
  for (int i = 0; i < 6; ++i) layout.add("t" + std::to_string(i), Shape{64 * 97}, i, true);
  for (BucketOp op : {BucketOp::kAllreduce, BucketOp::kReduceScatter}) {
    BucketOptions o;
    o.first_bucket_bytes = 16 << 10;
    o.bucket_cap_bytes = 32 << 10;
    o.op = op;
    o.shard_ranks = np;
    std::vector<float> staged(layout.numel()), host(layout.numel());
    std::mt19937 rng(77 + r);
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto& x : staged) x = u(rng);
    host = staged;
    BucketReducer a(layout, staged.data(), *s.comm, o), b(layout, host.data(), s.host, o);
    for (BucketReducer* red : {&a, &b}) {
      red->begin_step();
      for (int l = layout.num_layers() - 1; l >= 0; --l) red->layer_ready(l);
      const ReduceStats st = red->finish();
      EXPECT_GE(st.hidden_fraction(), 0.0);
    }
    EXPECT_EQ(std::memcmp(staged.data(), host.data(), staged.size() * sizeof(float)), 0)
        << (op == BucketOp::kAllreduce ? "allreduce" : "reduce-scatter") << " buckets differ";
  }
}

// A copier whose copies fail on every rank: the operation fails with the copier's error,
// and every later one with the same error instead of hanging.
class FailingCopier final : public StagedCopier {
 public:
  Device device() const override { return Device::cpu(); }
  void* host_alloc(size_t bytes) override { return ::operator new(bytes); }
  void host_free(void* p) noexcept override { ::operator delete(p); }
  CopyFencePtr download(void*, const void*, size_t) override { return std::make_unique<Broken>(); }
  CopyFencePtr upload(void*, const void*, size_t) override { return std::make_unique<Broken>(); }

 private:
  struct Broken final : CopyFence {
    void wait(milliseconds) override { throw CommError("the test's copy engine failed"); }
  };
};

TEST(StagedCommunicator, FailedCopyFailsThisAndLaterOperations) {
  HostCommunicator host(world().group(), test_options());
  StagedCommunicator comm(host, std::make_unique<FailingCopier>());
  std::vector<float> v(100, 1.0f);
  for (int k = 0; k < 2; ++k) {
    std::exception_ptr e = run_op([&] { return comm.allreduce(TensorView::flat(v.data(), 100, DType::kF32), ReduceOp::kSum); },
                                  milliseconds(30000));
    ASSERT_TRUE(holds<CommError>(e)) << what(e);
    EXPECT_NE(what(e).find("the test's copy engine failed"), std::string::npos) << what(e);
  }
  // The host communicator took no part: it still works.
  ASSERT_FALSE(run_op([&] { return host.allreduce(TensorView::flat(v.data(), 100, DType::kF32), ReduceOp::kSum); }));
  EXPECT_EQ(v[0], static_cast<float>(host.size()));
}

TEST(StagedCommunicator, RefusesMemoryOfAnotherDevice) {
  Staged s;
  std::vector<float> v(8);
  std::exception_ptr e =
      run_op([&] { return s.comm->allreduce(TensorView::flat(v.data(), 8, DType::kF32, Device::cuda(0)), ReduceOp::kSum); });
  EXPECT_TRUE(holds<InvalidArgument>(e)) << what(e);
  EXPECT_EQ(s.comm->device(), Device::cpu());
  EXPECT_NE(s.comm->name().find("staged"), std::string::npos);
}

}  // namespace
}  // namespace etr::testing
