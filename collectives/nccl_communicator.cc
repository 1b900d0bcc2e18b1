// NcclCommunicator (set-up, op and teardown protocols at the top of the header).
#include "collectives/nccl_communicator.h"

#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "collectives/nccl_work.h"
#include "runtime/cuda_check.h"
#include "runtime/cuda_device_guard.h"
#include "runtime/error.h"
#include "runtime/mpi_check.h"

namespace etr {

namespace {

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kF64:
      return ncclFloat64;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
  }
  throw InvalidArgument("NcclCommunicator got an unknown dtype; use f32, f64, bf16, f16 or i32");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  throw InvalidArgument("NcclCommunicator got an unknown reduce op; use sum, avg, max or min");
}

size_t count_of(const TensorView& v) {
  return static_cast<size_t>(v.numel());
}

}  // namespace

NcclCommunicator::NcclCommunicator(const Group& group, int cuda_device, CommOptions options)
    : options_(options),
      name_(group.name()),
      rank_(group.rank()),
      size_(group.size()),
      device_(cuda_device) {
  // 1. Local set-up; then every rank learns whether every rank managed it, because a rank
  //    that fails here would otherwise leave the others hanging in ncclCommInitRank.
  ncclUniqueId id{};
  std::exception_ptr local_error;
  try {
    int count = cuda_device_count();
    if (cuda_device < 0 || cuda_device >= count) {
      throw InvalidArgument("NcclCommunicator for group '" + name_ + "' was given CUDA device " +
                            std::to_string(cuda_device) + " but rank " + std::to_string(rank_) +
                            " sees " + std::to_string(count) +
                            " CUDA devices; bind each rank to a visible GPU (e.g. local rank "
                            "modulo the device count)");
    }
    CUDA_CHECK(cudaSetDevice(device_));
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  } catch (...) {
    local_error = std::current_exception();
  }
  int ok = local_error ? 0 : 1;
  int all_ok = 0;
  MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, group.comm()));
  if (local_error) std::rethrow_exception(local_error);
  if (!all_ok) {
    throw CommError("another rank of group '" + name_ +
                    "' could not set up its CUDA device for NCCL (its own error says why); "
                    "every rank of an NcclCommunicator needs a visible GPU");
  }
  // 2. One NCCL clique over the group, bootstrapped through MPI.
  MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, group.comm()));
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, size_, id, rank_));
  state_ = std::make_shared<NcclCommState>();
  state_->comm = comm;
  state_->group = name_;
  state_->rank = rank_;
  state_->size = size_;
  state_->device = device_;
  state_->timeout = options_.timeout;
  // 3. The stream, the ordering event and the barrier's scratch int.
  try {
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    void* scratch = nullptr;
    CUDA_CHECK(cudaMallocAsync(&scratch, sizeof(int), stream_));
    barrier_scratch_ = static_cast<int*>(scratch);
    CUDA_CHECK(cudaMemsetAsync(barrier_scratch_, 0, sizeof(int), stream_));
    CUDA_CHECK(cudaEventCreate(&state_->anchor));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    CUDA_CHECK(cudaEventRecord(state_->anchor, stream_));
    CUDA_CHECK(cudaEventSynchronize(state_->anchor));
    state_->anchor_time = std::chrono::steady_clock::now();
  } catch (...) {
    release();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  release();
}

void NcclCommunicator::release() noexcept {
  int previous = 0;
  bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                  cudaSetDevice(device_) == cudaSuccess;
  // Drain queued ops for at most the timeout: a stuck peer must not hang the destructor.
  bool drained = false;
  if (stream_ && state_ && !broken()) {
    auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    while (true) {
      cudaError_t rc = cudaStreamQuery(stream_);
      if (rc == cudaSuccess) {
        drained = true;
        break;
      }
      if (rc != cudaErrorNotReady) {
        (void)cudaGetLastError();
        break;
      }
      ncclResult_t async = ncclSuccess;
      {
        std::lock_guard<std::mutex> lock(state_->mutex);
        if (state_->comm) (void)ncclCommGetAsyncError(state_->comm, &async);
      }
      if ((async != ncclSuccess && async != ncclInProgress) ||
          std::chrono::steady_clock::now() > deadline) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (state_) {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->comm && drained) {
      (void)ncclCommDestroy(state_->comm);
      state_->comm = nullptr;
    } else if (state_->comm) {
      state_->abort_locked("communicator for group '" + name_ +
                           "' was destroyed while operations were still queued");
    }
  }
  // Stream-ordered and non-blocking: nothing here waits for a device that may be stuck.
  if (barrier_scratch_) (void)cudaFreeAsync(barrier_scratch_, stream_);
  if (compute_ready_) (void)cudaEventDestroy(compute_ready_);
  if (stream_) (void)cudaStreamDestroy(stream_);
  barrier_scratch_ = nullptr;
  compute_ready_ = nullptr;
  stream_ = nullptr;
  if (switched) (void)cudaSetDevice(previous);
}

bool NcclCommunicator::broken() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->broken;
}

void NcclCommunicator::set_compute_stream(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  compute_stream_ = stream;
  has_compute_stream_ = true;
}

void NcclCommunicator::check_tag(int tag, const char* op) const {
  if (tag == 0) return;
  throw InvalidArgument(std::string("NcclCommunicator::") + op + " got tag " + std::to_string(tag) +
                        " but NCCL has no message tags; pass tag 0 and match sends with "
                        "receives by program order");
}

std::string NcclCommunicator::describe(const char* op, const TensorView& v,
                                       const char* extra) const {
  return std::string(op) + "(" + extra + std::string(dtype_name(v.dtype())) + " x " +
         std::to_string(v.numel()) + ") on group '" + name_ + "'";
}

template <typename Launch>
WorkPtr NcclCommunicator::enqueue(std::string description, bool empty, Launch&& launch) {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->broken) {
    throw CommError("cannot start " + description +
                    ": the NCCL communicator was aborted "
                    "because " +
                    state_->broken_reason +
                    "; create a new communicator (restart from the last checkpoint)");
  }
  CudaDeviceGuard guard(device_);
  // Timing events (WorkTiming): the start after the wait for the compute stream, so that
  // the operation's time is its own.
  cudaEvent_t start = nullptr, done = nullptr;
  CUDA_CHECK(cudaEventCreate(&start));
  if (cudaEventCreate(&done) != cudaSuccess) {
    (void)cudaEventDestroy(start);
    CUDA_CHECK(cudaGetLastError());
  }
  try {
    if (has_compute_stream_) {
      CUDA_CHECK(cudaEventRecord(compute_ready_, compute_stream_));
      CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
    }
    CUDA_CHECK(cudaEventRecord(start, stream_));
    if (!empty) launch(state_->comm, stream_);
    CUDA_CHECK(cudaEventRecord(done, stream_));
  } catch (...) {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(done);
    throw;
  }
  return std::make_shared<NcclWork>(state_, std::move(description), start, done);
}

WorkPtr NcclCommunicator::allreduce(TensorView in, TensorView out, ReduceOp op) {
  check_args::allreduce(*this, in, out, op);
  std::string extra = std::string(reduce_op_name(op)) + ", ";
  return enqueue(describe("allreduce", in, extra.c_str()), in.numel() == 0,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   NCCL_CHECK(ncclAllReduce(in.data(), out.data(), count_of(in),
                                            nccl_dtype(in.dtype()), nccl_op(op), comm, stream));
                 });
}

WorkPtr NcclCommunicator::reduce_scatter(TensorView in, TensorView out, ReduceOp op) {
  check_args::reduce_scatter(*this, in, out, op);
  std::string extra = std::string(reduce_op_name(op)) + ", ";
  return enqueue(describe("reduce_scatter", in, extra.c_str()), out.numel() == 0,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), count_of(out),
                                                nccl_dtype(in.dtype()), nccl_op(op), comm, stream));
                 });
}

WorkPtr NcclCommunicator::allgather(TensorView in, TensorView out) {
  check_args::allgather(*this, in, out);
  return enqueue(describe("allgather", in, ""), in.numel() == 0,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   NCCL_CHECK(ncclAllGather(in.data(), out.data(), count_of(in),
                                            nccl_dtype(in.dtype()), comm, stream));
                 });
}

WorkPtr NcclCommunicator::broadcast(TensorView inout, int root) {
  check_args::broadcast(*this, inout, root);
  std::string extra = "from rank " + std::to_string(root) + ", ";
  return enqueue(describe("broadcast", inout, extra.c_str()), inout.numel() == 0,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   NCCL_CHECK(ncclBroadcast(inout.data(), inout.data(), count_of(inout),
                                            nccl_dtype(inout.dtype()), root, comm, stream));
                 });
}

WorkPtr NcclCommunicator::send(TensorView in, int peer, int tag) {
  check_tag(tag, "send");
  check_args::point_to_point(*this, in, peer, tag, "send");
  std::string extra = "to rank " + std::to_string(peer) + ", ";
  return enqueue(
      describe("send", in, extra.c_str()), in.numel() == 0,
      [&](ncclComm_t comm, cudaStream_t stream) {
        NCCL_CHECK(ncclSend(in.data(), count_of(in), nccl_dtype(in.dtype()), peer, comm, stream));
      });
}

WorkPtr NcclCommunicator::recv(TensorView out, int peer, int tag) {
  check_tag(tag, "recv");
  check_args::point_to_point(*this, out, peer, tag, "recv");
  std::string extra = "from rank " + std::to_string(peer) + ", ";
  return enqueue(describe("recv", out, extra.c_str()), out.numel() == 0,
                 [&](ncclComm_t comm, cudaStream_t stream) {
                   NCCL_CHECK(ncclRecv(out.data(), count_of(out), nccl_dtype(out.dtype()), peer,
                                       comm, stream));
                 });
}

WorkPtr NcclCommunicator::barrier() {
  return enqueue(
      "barrier on group '" + name_ + "'", false, [&](ncclComm_t comm, cudaStream_t stream) {
        NCCL_CHECK(
            ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclInt32, ncclSum, comm, stream));
      });
}

}  // namespace etr
