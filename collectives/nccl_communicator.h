// NcclCommunicator: the collectives over CUDA device memory, one GPU per rank, through
// NCCL on a dedicated stream (docs/design.md, "Collectives", device backend).
//
//   World world(&argc, &argv);
//   NcclCommunicator comm(world.group(), world.local_rank() % cuda_device_count());
//   comm.set_compute_stream(compute);               // order ops after queued compute
//   WorkPtr w = comm.allreduce(grads, ReduceOp::kAvg);
//   ... more compute ...
//   w->wait();                                      // or NcclWork::make_stream_wait
//
// Set-up (collective over the group): every rank selects its device (cudaSetDevice, left
// current afterwards) and all ranks agree that this worked (MPI_Allreduce), so that one
// bad rank fails everyone with a message instead of hanging them in NCCL; rank 0 makes
// the ncclUniqueId, MPI_Bcast carries it over group.comm(); ncclCommInitRank.
//
// Each op: check_args:: its arguments (which also rejects buffers that are not on this
// device with InvalidArgument); make the comm stream wait for an event recorded on the compute
// stream (when one is set); enqueue the NCCL call on the comm stream; record a
// completion event; return an NcclWork (the watchdog: see nccl_work.h). Ops of zero
// elements enqueue no NCCL call, only the event. Ops run in issue order (one stream).
//
// NCCL has no message tags: send/recv take tag 0 only, and match by program order.
// DTypes: f32 f64 bf16 f16 i32. ReduceOp::kAvg is ncclAvg (not for i32: check_args:: says no).
//
// Destruction waits up to CommOptions::timeout for queued ops, then ncclCommDestroy;
// a communicator that was aborted (timeout, NCCL error) or does not drain in time is
// ncclCommAbort'ed instead. Its Works stay valid afterwards.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "collectives/comm_options.h"
#include "collectives/communicator.h"
#include "runtime/group.h"

namespace etr {

struct NcclCommState;

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `group`: every member must construct it, each with its own device.
  NcclCommunicator(const Group& group, int cuda_device,
                   CommOptions options = CommOptions::from_env());
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  Device device() const override { return Device::cuda(device_); }
  const CommOptions& options() const { return options_; }

  // Every later op starts only after the work queued on `stream` so far (the default
  // stream 0 is allowed). Without a call, ops are ordered only among themselves.
  void set_compute_stream(cudaStream_t stream);
  // The stream NCCL runs on (non-blocking with respect to the legacy default stream).
  cudaStream_t stream() const { return stream_; }
  // True once the communicator was aborted; every later op throws CommError.
  bool broken() const;

  WorkPtr allreduce(TensorView in, TensorView out, ReduceOp op) override;
  using Communicator::allreduce;
  WorkPtr reduce_scatter(TensorView in, TensorView out, ReduceOp op) override;
  WorkPtr allgather(TensorView in, TensorView out) override;
  WorkPtr broadcast(TensorView inout, int root) override;
  WorkPtr send(TensorView in, int peer, int tag = 0) override;
  WorkPtr recv(TensorView out, int peer, int tag = 0) override;
  WorkPtr barrier() override;

 private:
  // Runs `launch(comm, stream)` (which enqueues NCCL calls) in the protocol above.
  template <typename Launch>
  WorkPtr enqueue(std::string description, bool empty, Launch&& launch);
  void check_tag(int tag, const char* op) const;
  std::string describe(const char* op, const TensorView& v, const char* extra) const;
  void release() noexcept;

  CommOptions options_;
  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  std::shared_ptr<NcclCommState> state_;
  cudaStream_t stream_ = nullptr;          // NCCL's stream
  cudaStream_t compute_stream_ = nullptr;  // valid when has_compute_stream_
  bool has_compute_stream_ = false;
  cudaEvent_t compute_ready_ = nullptr;  // recorded on compute_stream_ before each op
  int* barrier_scratch_ = nullptr;       // [1] int32 on the device, for barrier()
};

}  // namespace etr
