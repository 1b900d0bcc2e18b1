#include "parallel/pipeline_link.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "runtime/error.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"
#include "runtime/peer_wait.h"

namespace etr {

// A staging buffer: free again once not busy and, after a receive, its upload has run.
struct PipeStaging {
  PinnedBuffer host;
  bool busy = false;
  void* uploaded = nullptr;  // an event after the last upload from it (null: none yet)
  bool upload_pending = false;
};

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kYieldTime = std::chrono::milliseconds(2);
constexpr auto kSleep = std::chrono::microseconds(50);

int count_of(int64_t n) {
  if (n < 0 || n > INT_MAX) {
    throw InvalidArgument("a pipeline transfer of " + std::to_string(n) + " elements is more than MPI counts");
  }
  return static_cast<int>(n);
}

}  // namespace

void PipeRequest::wait() {
  if (done_) return;
  const PeerWaitScope waiting;
  const auto timeout = collective_timeout();
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (link_ && link_->staged()) link_->progress();
    int done = 0;
    if (posted_) MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    if (done) break;
    const auto waited = Clock::now() - start;
    if (waited >= timeout) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g s", static_cast<double>(timeout.count()) / 1000.0);
      throw CommError("pipeline: the " + what_ + " did not complete within the communicator timeout of " +
                      limit + (posted_ ? ": that stage's rank is stopped, dead or not calling it"
                                       : ": its copy from the GPU never landed") +
                      " (ETR_COMM_TIMEOUT_S sets the limit)");
    }
    if (waited < kYieldTime) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }
  if (staging_) link_->finish(*this);
  done_ = true;
}

PipeLink::PipeLink(const Group& pp, std::optional<PipeDevice> device)
    : group_(pp.dup(pp.name() + ".p2p")), device_(device) {}

PipeLink::~PipeLink() {
  if (!device_) return;
  const DeviceOps& ops = device_ops(device_->device);
  for (auto& s : staging_) {
    if (s->upload_pending) ops.event_wait(s->uploaded);
    ops.event_destroy(s->uploaded);
    // A busy buffer belongs to a transfer MPI may still complete: it is left allocated.
    if (s->busy) static_cast<void>(new PinnedBuffer(std::move(s->host)));
  }
  for (PipeRequestPtr& r : unposted_) device_ops(device_->device).event_destroy(r->event_);
}

size_t PipeLink::staging_bytes() const {
  size_t bytes = 0;
  for (const auto& s : staging_) bytes += s->host.size();
  return bytes;
}

PipeStaging* PipeLink::acquire(size_t bytes) {
  const DeviceOps& ops = device_ops(device_->device);
  PipeStaging* best = nullptr;
  for (auto& s : staging_) {
    if (s->busy || s->host.size() < bytes) continue;
    if (!best || s->host.size() < best->host.size()) best = s.get();
  }
  if (!best) {
    staging_.push_back(std::make_unique<PipeStaging>());
    best = staging_.back().get();
    best->host = PinnedBuffer(device_->device, std::max<size_t>(bytes, 1));
  }
  if (best->upload_pending) ops.event_wait(best->uploaded);  // its last upload has run
  best->upload_pending = false;
  best->busy = true;
  return best;
}

void PipeLink::finish(PipeRequest& r) {
  PipeStaging& s = *r.staging_;
  const DeviceOps& ops = device_ops(device_->device);
  if (r.upload_to_) {
    const size_t bytes = static_cast<size_t>(r.count_) * sizeof(float);
    ops.upload(r.upload_to_, s.host.data(), bytes, device_->stream);
    if (!s.uploaded) s.uploaded = ops.event_create();
    ops.event_record(s.uploaded, device_->stream);
    s.upload_pending = s.uploaded != nullptr;
  }
  s.busy = false;
  r.staging_ = nullptr;
}

void PipeLink::post_send(PipeRequest& r) {
  MPI_CHECK(MPI_Isend(r.staging_->host.data(), count_of(r.count_), MPI_FLOAT, r.peer_, r.tag_,
                      group_.comm(), &r.request_));
  r.posted_ = true;
}

void PipeLink::progress() {
  if (unposted_.empty()) return;
  const DeviceOps& ops = device_ops(device_->device);
  auto landed = [&](const PipeRequestPtr& r) {
    if (!ops.event_done(r->event_)) return false;
    ops.event_destroy(r->event_);
    r->event_ = nullptr;
    post_send(*r);
    return true;
  };
  unposted_.erase(std::remove_if(unposted_.begin(), unposted_.end(), landed), unposted_.end());
}

PipeRequestPtr PipeLink::send(const float* data, int64_t count, int peer, int tag,
                              const std::string& what) {
  const std::string name = what + " sent to pipeline stage " + std::to_string(peer);
  if (!device_) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Isend(data, count_of(count), MPI_FLOAT, peer, tag, group_.comm(), &r));
    return std::make_shared<PipeRequest>(this, r, name);
  }
  count_of(count);
  auto r = std::make_shared<PipeRequest>(this, MPI_REQUEST_NULL, name);
  const DeviceOps& ops = device_ops(device_->device);
  r->staging_ = acquire(static_cast<size_t>(count) * sizeof(float));
  r->count_ = count;
  r->peer_ = peer;
  r->tag_ = tag;
  ops.download(r->staging_->host.data(), data, static_cast<size_t>(count) * sizeof(float), device_->stream);
  r->event_ = ops.event_create();
  ops.event_record(r->event_, device_->stream);
  r->posted_ = false;
  unposted_.push_back(r);
  progress();
  return r;
}

PipeRequestPtr PipeLink::recv(float* data, int64_t count, int peer, int tag, const std::string& what) {
  const std::string name = what + " from pipeline stage " + std::to_string(peer);
  MPI_Request req = MPI_REQUEST_NULL;
  if (!device_) {
    MPI_CHECK(MPI_Irecv(data, count_of(count), MPI_FLOAT, peer, tag, group_.comm(), &req));
    return std::make_shared<PipeRequest>(this, req, name);
  }
  progress();
  PipeStaging* s = acquire(static_cast<size_t>(count) * sizeof(float));
  MPI_CHECK(MPI_Irecv(s->host.data(), count_of(count), MPI_FLOAT, peer, tag, group_.comm(), &req));
  auto r = std::make_shared<PipeRequest>(this, req, name);
  r->staging_ = s;
  r->upload_to_ = data;
  r->count_ = count;
  return r;
}

}  // namespace etr
