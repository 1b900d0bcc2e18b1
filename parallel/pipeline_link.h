// PipeLink: the point-to-point transfers between pipeline stages (parallel/pipeline_executor.h),
// posted and completed on the caller's thread with nonblocking MPI over a duplicate of the
// pp group.
//
// Why not a communicator's progress thread: in 1F1B's steady state every transfer is on
// the critical path with no slack (a stage's next action waits for the message its
// neighbour has just sent), so each hand-off between threads adds to every micro-batch
// (measured with etr-bench pipeline: about 1 ms a step at m = 16 on this machine). Here
// a receiver that waits is inside MPI when the bytes arrive (shared memory with CMA: the
// receiver copies them itself), and a sender's buffer is only waited for before reuse.
//
// Device memory (a link made with a PipeDevice: a GPU's memory, or in the tests host
// memory standing in for it, ETR_TEST_HOST_DEVICE_ENGINE): every transfer is staged
// through page-locked host buffers of the link's, still on the caller's thread and with
// no host wait for the device:
//   send   the bytes are downloaded on the compute stream, after the work that wrote them,
//          and an event recorded; the MPI send is posted once that event has passed,
//          which the link checks at each of its calls and while any request waits
//          (progress()). The device buffer may be written again once the request is done.
//   recv   the MPI receive lands in a staging buffer; wait() enqueues its upload into the
//          device buffer on the compute stream: after the work that read the buffer's
//          previous contents, before the work that reads these. The staging buffer is
//          taken again only once that upload has run.
// NCCL's send/recv would move the bytes without the host, but match in program order on
// one stream, where the schedules' early receives and their sends to the same peer
// deadlock unless both sides batch them; the staged path carries any number of ranks per
// GPU and is what runs on GPUs for now (docs/gpu.md).
//
// wait() polls MPI_Test, yielding the core between polls for 2 ms, then sleeping 50 us
// between them; after the collectives' timeout (ETR_COMM_TIMEOUT_S, runtime/mpi_wait.h)
// it throws CommError naming the transfer and the peer stage. The request then stays
// active (MPI cannot cancel it): the caller must keep the buffer alive (and the link keeps
// its staging buffer).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/group.h"

namespace etr {

class PipeLink;
struct PipeStaging;  // a page-locked host buffer of the link's (pipeline_link.cc)

class PipeRequest {
 public:
  PipeRequest(PipeLink* link, MPI_Request request, std::string what)
      : link_(link), request_(request), what_(std::move(what)) {}
  PipeRequest(const PipeRequest&) = delete;
  PipeRequest& operator=(const PipeRequest&) = delete;
  // An unfinished request is left to MPI (its buffer must outlive the process's use).
  ~PipeRequest() = default;
  // Returns once the transfer is over: a send's device buffer may be written again, a
  // receive's bytes are in its buffer (on a device: their upload is enqueued before any
  // later work of the compute stream).
  void wait();
  bool done() const { return done_; }

 private:
  friend class PipeLink;
  PipeLink* link_;
  MPI_Request request_;
  std::string what_;
  bool done_ = false;
  // Staged (device memory): the host buffer; a send not yet posted waits for `event`
  // (its download); a receive's bytes go to `upload_to` once received.
  PipeStaging* staging_ = nullptr;
  void* event_ = nullptr;
  bool posted_ = true;
  float* upload_to_ = nullptr;
  int64_t count_ = 0;
  int peer_ = 0, tag_ = 0;
};

using PipeRequestPtr = std::shared_ptr<PipeRequest>;

// The device a link's buffers are on and the stream that writes and reads them.
struct PipeDevice {
  Device device = Device::cpu();
  void* stream = nullptr;
};

class PipeLink {
 public:
  // Host memory: MPI straight from and into the callers' buffers. With `device`: every
  // buffer is memory of that device, staged (above).
  explicit PipeLink(const Group& pp, std::optional<PipeDevice> device = std::nullopt);
  ~PipeLink();
  PipeLink(const PipeLink&) = delete;
  PipeLink& operator=(const PipeLink&) = delete;

  // `what` names the transfer in a timeout's message ("activation of micro-batch 3").
  PipeRequestPtr send(const float* data, int64_t count, int peer, int tag, const std::string& what);
  PipeRequestPtr recv(float* data, int64_t count, int peer, int tag, const std::string& what);
  bool staged() const { return device_.has_value(); }
  // Posts the staged sends whose download has landed.
  void progress();
  // Bytes of page-locked staging the link holds.
  size_t staging_bytes() const;

 private:
  friend class PipeRequest;
  PipeStaging* acquire(size_t bytes);
  // The request's transfer is over: its staging goes back to the pool (after the upload of
  // a receive, which wait() enqueued, has run).
  void finish(PipeRequest& r);
  void post_send(PipeRequest& r);

  Group group_;
  std::optional<PipeDevice> device_;
  std::vector<std::unique_ptr<PipeStaging>> staging_;
  std::vector<PipeRequestPtr> unposted_;  // staged sends waiting for their download
};

}  // namespace etr
