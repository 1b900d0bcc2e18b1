// The staged communicator's copy step on a GPU (collectives/staged_communicator.h): copies
// on two non-blocking streams of its own, so that a bucket's result coming back never
// waits behind the next bucket's download (which waits for backward), and each download
// ordered after the caller's compute stream by an event, so the caller never waits.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <thread>

#include "collectives/staged_communicator.h"
#include "runtime/allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/cuda_device_guard.h"
#include "runtime/error.h"

namespace etr {
namespace {

class CudaFence final : public CopyFence {
 public:
  CudaFence(int device, cudaEvent_t event) : device_(device), event_(event) {}
  ~CudaFence() override { (void)cudaEventDestroy(event_); }
  CudaFence(const CudaFence&) = delete;
  CudaFence& operator=(const CudaFence&) = delete;

  // Polls (spin, then sleeps growing to 200 us) so that a device that never finishes the
  // copy becomes a CommError instead of a hang.
  void wait(std::chrono::milliseconds timeout) override {
    CudaDeviceGuard guard(device_);
    const auto start = std::chrono::steady_clock::now();
    auto sleep = std::chrono::microseconds(5);
    for (int polls = 0;; ++polls) {
      const cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) CUDA_CHECK(e);
      if (std::chrono::steady_clock::now() - start > timeout) {
        throw CommError("a staged copy between cuda:" + std::to_string(device_) +
                        " and the host did not land within " + std::to_string(timeout.count()) +
                        " ms (the GPU is stuck or lost)");
      }
      if (polls > 64) {
        std::this_thread::sleep_for(sleep);
        sleep = std::min(sleep * 2, std::chrono::microseconds(200));
      }
    }
  }

 private:
  int device_;
  cudaEvent_t event_;
};

class CudaCopier final : public StagedCopier {
 public:
  CudaCopier(int device, cudaStream_t compute) : device_(device), compute_(compute) {
    CudaDeviceGuard guard(device_);
    CUDA_CHECK(cudaStreamCreateWithFlags(&down_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&up_, cudaStreamNonBlocking));
  }
  ~CudaCopier() override {
    (void)cudaStreamSynchronize(down_);
    (void)cudaStreamSynchronize(up_);
    (void)cudaStreamDestroy(down_);
    (void)cudaStreamDestroy(up_);
  }
  CudaCopier(const CudaCopier&) = delete;
  CudaCopier& operator=(const CudaCopier&) = delete;

  Device device() const override { return Device::cuda(device_); }
  void* host_alloc(size_t bytes) override {
    void* p = nullptr;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      throw_out_of_memory(Device::cpu(), bytes, MemoryStats{},
                          "the system refused page-locked staging memory for the staged communicator");
    }
    return p;
  }
  void host_free(void* p) noexcept override { (void)cudaFreeHost(p); }

  CopyFencePtr download(void* host_dst, const void* device_src, size_t bytes) override {
    CudaDeviceGuard guard(device_);
    cudaEvent_t ready = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, compute_));
    CUDA_CHECK(cudaStreamWaitEvent(down_, ready, 0));
    CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait has consumed it
    return copy(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, down_);
  }
  CopyFencePtr upload(void* device_dst, const void* host_src, size_t bytes) override {
    CudaDeviceGuard guard(device_);
    return copy(device_dst, host_src, bytes, cudaMemcpyHostToDevice, up_);
  }

 private:
  CopyFencePtr copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
    cudaEvent_t done = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, s));
    return std::make_unique<CudaFence>(device_, done);
  }

  int device_;
  cudaStream_t compute_;
  cudaStream_t down_ = nullptr, up_ = nullptr;
};

}  // namespace

std::unique_ptr<StagedCopier> make_staged_copier(Device device, void* compute_stream) {
  if (device.is_cpu()) return make_host_copier();
  return std::make_unique<CudaCopier>(device.index, static_cast<cudaStream_t>(compute_stream));
}

}  // namespace etr
