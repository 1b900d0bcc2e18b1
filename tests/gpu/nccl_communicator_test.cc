// NcclCommunicator under etr-mpirun (one GPU per rank; ctest runs it at np 1): every
// collective for every dtype against a double-precision reference, argument errors,
// ordering against a compute stream, and the watchdog (timeout -> abort -> CommError).
// Skipped when no CUDA device is visible.
#include "collectives/nccl_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/nccl_work.h"
#include "mpi/mpi_test_main.h"
#include "runtime/cuda_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/elementwise.h"

namespace etr {
namespace {

using testing::world;

constexpr DType kDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};
constexpr int64_t kCounts[] = {0, 1, 7, 1000003};

int my_device() {
  return world().local_rank() % cuda_device_count();
}

// Element i of rank r: a small integer, exact in every dtype and in sums over few ranks.
double value_of(int rank, int64_t i) {
  return static_cast<double>((i * 7 + rank * 13) % 31 - 15);
}

std::vector<char> encode(const std::vector<double>& v, DType t) {
  std::vector<char> bytes(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    char* p = bytes.data() + i * dtype_size(t);
    float f = static_cast<float>(v[i]);
    uint16_t h = 0;
    int32_t k = static_cast<int32_t>(v[i]);
    switch (t) {
      case DType::kF32:
        std::memcpy(p, &f, 4);
        break;
      case DType::kF64:
        std::memcpy(p, &v[i], 8);
        break;
      case DType::kBF16:
        h = f32_to_bf16(f);
        std::memcpy(p, &h, 2);
        break;
      case DType::kF16:
        h = f32_to_f16(f);
        std::memcpy(p, &h, 2);
        break;
      case DType::kI32:
        std::memcpy(p, &k, 4);
        break;
    }
  }
  return bytes;
}

std::vector<double> decode(const std::vector<char>& bytes, DType t) {
  std::vector<double> v(bytes.size() / dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) {
    const char* p = bytes.data() + i * dtype_size(t);
    float f;
    double d;
    uint16_t h;
    int32_t k;
    switch (t) {
      case DType::kF32:
        std::memcpy(&f, p, 4);
        v[i] = f;
        break;
      case DType::kF64:
        std::memcpy(&d, p, 8);
        v[i] = d;
        break;
      case DType::kBF16:
        std::memcpy(&h, p, 2);
        v[i] = bf16_to_f32(h);
        break;
      case DType::kF16:
        std::memcpy(&h, p, 2);
        v[i] = f16_to_f32(h);
        break;
      case DType::kI32:
        std::memcpy(&k, p, 4);
        v[i] = k;
        break;
    }
  }
  return v;
}

double tolerance(DType t) {
  switch (t) {
    case DType::kBF16:
      return 0.15;  // an ulp at 8..16 is 1/16; avg rounds per rank
    case DType::kF16:
      return 0.02;
    case DType::kF32:
      return 1e-5;
    default:
      return 1e-12;
  }
}

double reduce_reference(ReduceOp op, int64_t i, int n) {
  double acc = value_of(0, i);
  for (int r = 1; r < n; ++r) {
    double x = value_of(r, i);
    acc = op == ReduceOp::kMax   ? std::max(acc, x)
          : op == ReduceOp::kMin ? std::min(acc, x)
                                 : acc + x;
  }
  return op == ReduceOp::kAvg ? acc / n : acc;
}

class NcclCommunicatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0) return;
    alloc_ = new CudaCachingAllocator(my_device());
    comm_ = new NcclCommunicator(world().group(), my_device());
  }
  static void TearDownTestSuite() {
    delete comm_;
    delete alloc_;
    comm_ = nullptr;
    alloc_ = nullptr;
  }
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  }

  // A device buffer of `v` encoded as `t`.
  static Buffer upload(const std::vector<double>& v, DType t) {
    std::vector<char> bytes = encode(v, t);
    Buffer b(*alloc_, bytes.size());
    if (!bytes.empty()) {
      CUDA_CHECK(cudaMemcpy(b.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
      // From pageable memory cudaMemcpy returns once the data is staged, before the DMA
      // has landed; NCCL's stream does not wait for it (seen on an H200 at np 1: the tail
      // of a 1000003-element input read stale).
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    return b;
  }
  static std::vector<double> download(const Buffer& b, DType t) {
    std::vector<char> bytes(b.size());
    if (!bytes.empty())
      CUDA_CHECK(cudaMemcpy(bytes.data(), b.data(), bytes.size(), cudaMemcpyDeviceToHost));
    return decode(bytes, t);
  }
  static std::vector<double> rank_values(int rank, int64_t offset, int64_t count) {
    std::vector<double> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = value_of(rank, offset + i);
    return v;
  }
  static void expect_near_all(const std::vector<double>& got, const std::vector<double>& want,
                              DType t, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::fabs(got[i] - want[i]) <= tolerance(t)) continue;
      if (bad++ < 5)
        ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
    }
    EXPECT_EQ(bad, 0u) << what;
  }

  static CudaCachingAllocator* alloc_;
  static NcclCommunicator* comm_;
};

CudaCachingAllocator* NcclCommunicatorTest::alloc_ = nullptr;
NcclCommunicator* NcclCommunicatorTest::comm_ = nullptr;

TEST_F(NcclCommunicatorTest, AllreduceEveryDtypeAndOp) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  const int n = comm_->size(), r = comm_->rank();
  for (DType t : kDTypes) {
    for (ReduceOp op : kOps) {
      if (t == DType::kI32 && op == ReduceOp::kAvg) continue;  // rejected by check_args::
      for (int64_t count : kCounts) {
        Buffer in = upload(rank_values(r, 0, count), t);
        Buffer out(*alloc_, in.size());
        comm_->allreduce(in.view(t), out.view(t), op)->wait();
        comm_->allreduce(in.view(t), op)->wait();  // in place
        std::vector<double> want(static_cast<size_t>(count));
        for (int64_t i = 0; i < count; ++i)
          want[static_cast<size_t>(i)] = reduce_reference(op, i, n);
        std::string what = "allreduce " + std::string(reduce_op_name(op)) + " " +
                           std::string(dtype_name(t)) + " x " + std::to_string(count);
        expect_near_all(download(out, t), want, t, what);
        expect_near_all(download(in, t), want, t, what + " (in place)");
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, ReduceScatterEveryDtype) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  const int n = comm_->size(), r = comm_->rank();
  for (DType t : kDTypes) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int64_t block : kCounts) {
        Buffer in = upload(rank_values(r, 0, block * n), t);
        Buffer out(*alloc_, static_cast<size_t>(block) * dtype_size(t));
        comm_->reduce_scatter(in.view(t), out.view(t), op)->wait();
        std::vector<double> want(static_cast<size_t>(block));
        for (int64_t i = 0; i < block; ++i)
          want[static_cast<size_t>(i)] = reduce_reference(op, r * block + i, n);
        expect_near_all(
            download(out, t), want, t,
            "reduce_scatter " + std::string(dtype_name(t)) + " block " + std::to_string(block));
      }
    }
  }
}

TEST_F(NcclCommunicatorTest, AllgatherAndBroadcastEveryDtype) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  const int n = comm_->size(), r = comm_->rank();
  for (DType t : kDTypes) {
    for (int64_t count : kCounts) {
      std::string suffix = std::string(dtype_name(t)) + " x " + std::to_string(count);
      Buffer in = upload(rank_values(r, 0, count), t);
      Buffer out(*alloc_, in.size() * static_cast<size_t>(n));
      comm_->allgather(in.view(t), out.view(t))->wait();
      std::vector<double> want;
      for (int q = 0; q < n; ++q) {
        std::vector<double> part = rank_values(q, 0, count);
        want.insert(want.end(), part.begin(), part.end());
      }
      expect_near_all(download(out, t), want, t, "allgather " + suffix);

      const int root = n - 1;
      Buffer data = upload(rank_values(r, 0, count), t);
      comm_->broadcast(data.view(t), root)->wait();
      expect_near_all(download(data, t), rank_values(root, 0, count), t, "broadcast " + suffix);
    }
  }
  comm_->barrier()->wait();
}

TEST_F(NcclCommunicatorTest, RejectsHostBuffersTagsAndBadPeers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  std::vector<float> host(8);
  TensorView cpu = TensorView::flat(host.data(), 8, DType::kF32);
  EXPECT_THROW(comm_->allreduce(cpu, ReduceOp::kSum), InvalidArgument);
  Buffer dev(*alloc_, 32);
  EXPECT_THROW(comm_->allreduce(dev.view(DType::kI32), ReduceOp::kAvg), InvalidArgument);
  for (int tag : {1, 3}) {
    try {
      comm_->send(dev.view(DType::kF32), (comm_->rank() + 1) % comm_->size(), tag);
      FAIL() << "a non-zero tag must be rejected";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("no message tags"), std::string::npos) << e.what();
    }
    EXPECT_THROW(comm_->recv(dev.view(DType::kF32), 0, tag), InvalidArgument);
  }
  EXPECT_THROW(comm_->send(dev.view(DType::kF32), comm_->rank(), 0), InvalidArgument);
  EXPECT_FALSE(comm_->broken());
}

TEST_F(NcclCommunicatorTest, OpsWaitForTheComputeStream) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  NcclCommunicator comm(world().group(), my_device());
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  const int64_t count = 1 << 16;
  Buffer buf = upload(std::vector<double>(count, 1.0), DType::kF32);
  // Hold the compute stream for 200 ms, then scale by 3: the allreduce must see the 3s.
  CUDA_CHECK(cudaLaunchHostFunc(
      compute, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); },
      nullptr));
  cuda_scale(buf.data(), DType::kF32, count, 3.0, compute);
  comm.set_compute_stream(compute);
  Buffer out(*alloc_, buf.size());
  WorkPtr w = comm.allreduce(buf.view(DType::kF32), out.view(DType::kF32), ReduceOp::kSum);
  w->wait();
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(w->error(), nullptr);
  expect_near_all(download(out, DType::kF32), std::vector<double>(count, 3.0 * comm.size()),
                  DType::kF32, "allreduce after compute");
  CUDA_CHECK(cudaStreamDestroy(compute));
}

TEST_F(NcclCommunicatorTest, WatchdogAbortsAStuckOperation) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  CommOptions options;
  options.timeout = std::chrono::milliseconds(1000);
  NcclCommunicator comm(world().group(), my_device(), options);
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  static std::atomic<bool> release;  // static: the host function may poll it after a FAIL()
  release = false;
  // The compute stream is stuck until `release`; an op ordered after it cannot finish.
  // The op has zero elements so that no NCCL kernel is queued behind the abort. The
  // stream is let go after 3 s in any case, in case ncclCommAbort waits for the device.
  CUDA_CHECK(cudaLaunchHostFunc(
      compute,
      [](void* flag) {
        while (!static_cast<std::atomic<bool>*>(flag)->load())
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      &release));
  std::jthread releaser([] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    release = true;
  });
  comm.set_compute_stream(compute);
  WorkPtr w =
      comm.allreduce(TensorView::flat(nullptr, 0, DType::kF32, comm.device()), ReduceOp::kSum);
  EXPECT_FALSE(w->is_completed());
  EXPECT_THROW(w->wait(std::chrono::milliseconds(50)), CommError);  // caller's own limit
  EXPECT_FALSE(comm.broken());
  try {
    w->wait();
    FAIL() << "a stuck operation must fail after the communicator timeout";
  } catch (const CommError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("allreduce"), std::string::npos) << msg;
    EXPECT_NE(msg.find("group '" + world().group().name() + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(comm.rank())), std::string::npos) << msg;
    EXPECT_NE(msg.find("did not finish within"), std::string::npos) << msg;
  }
  EXPECT_TRUE(comm.broken());
  EXPECT_TRUE(w->is_completed());
  EXPECT_NE(w->error(), nullptr);
  EXPECT_THROW(comm.barrier(), CommError);
  releaser.join();
  CUDA_CHECK(cudaStreamSynchronize(compute));
  CUDA_CHECK(cudaStreamDestroy(compute));
}

}  // namespace
}  // namespace etr
