#include "collectives/staged_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/mpi_wait.h"

namespace etr {
namespace {

class LandedFence final : public CopyFence {
 public:
  void wait(std::chrono::milliseconds) override {}
};

class HostCopier final : public StagedCopier {
 public:
  Device device() const override { return Device::cpu(); }
  void* host_alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw_out_of_memory(Device::cpu(), bytes, MemoryStats{}, "the system refused host staging memory");
    return p;
  }
  void host_free(void* p) noexcept override { std::free(p); }
  CopyFencePtr download(void* host_dst, const void* device_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host_dst, device_src, bytes);
    return std::make_unique<LandedFence>();
  }
  CopyFencePtr upload(void* device_dst, const void* host_src, size_t bytes) override {
    if (bytes > 0 && device_dst != host_src) std::memcpy(device_dst, host_src, bytes);
    return std::make_unique<LandedFence>();
  }
};

// Staging of at least one cache line, so that an empty operation still has a buffer.
size_t staging_size(size_t bytes) { return std::max<size_t>(bytes, 64); }

}  // namespace

std::unique_ptr<StagedCopier> make_host_copier() { return std::make_unique<HostCopier>(); }

#ifndef ETR_HAVE_CUDA
std::unique_ptr<StagedCopier> make_staged_copier(Device device, void* /*compute_stream*/) {
  if (device.is_cpu()) return make_host_copier();
  throw InvalidArgument("the staged communicator cannot copy " + device.str() +
                        " memory in a build without CUDA");
}
#endif

StagedCommunicator::StagedCommunicator(Communicator& host, std::unique_ptr<StagedCopier> copier)
    : host_(host),
      copier_(std::move(copier)),
      name_(host.name() + " (staged from " + copier_->device().str() + ")"),
      timeout_(collective_timeout()) {
  if (!host_.device().is_cpu()) {
    throw InvalidArgument("a staged communicator runs its collectives on a host communicator, not on " +
                          host_.device().str());
  }
  submitter_ = std::thread([this] { run_submitter(); });
  completer_ = std::thread([this] { run_completer(); });
}

StagedCommunicator::~StagedCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  submitter_.join();  // hands every queued operation to the completer first
  {
    std::lock_guard<std::mutex> lock(mu_);
    submitted_all_ = true;
  }
  cv_.notify_all();
  completer_.join();
  for (auto& s : staging_) copier_->host_free(s->data);
}

size_t StagedCommunicator::bytes_down() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_down_;
}

size_t StagedCommunicator::bytes_up() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_up_;
}

size_t StagedCommunicator::staging_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& s : staging_) n += s->bytes;
  return n;
}

// The smallest free buffer that holds `bytes`, else a new one (buckets recur in the same
// sizes every step, so the cache stops growing after the first).
StagedCommunicator::Staging* StagedCommunicator::acquire(size_t bytes) {
  bytes = staging_size(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    Staging* best = nullptr;
    for (auto& s : staging_) {
      if (!s->busy && s->bytes >= bytes && (!best || s->bytes < best->bytes)) best = s.get();
    }
    if (best) {
      best->busy = true;
      return best;
    }
  }
  auto s = std::make_unique<Staging>();
  s->data = copier_->host_alloc(bytes);
  s->bytes = bytes;
  s->busy = true;
  std::lock_guard<std::mutex> lock(mu_);
  staging_.push_back(std::move(s));
  return staging_.back().get();
}

void StagedCommunicator::release(const std::vector<Staging*>& staging) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Staging* s : staging) s->busy = false;
}

// A copy step that throws leaves the job's staging free again (the op never starts).
CopyFencePtr StagedCommunicator::download(Job& job, void* host, const TensorView& v) {
  CopyFencePtr f;
  try {
    f = copier_->download(host, v.data(), v.nbytes());
  } catch (...) {
    release(job.staging);
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  bytes_down_ += v.nbytes();
  return f;
}

WorkPtr StagedCommunicator::submit(std::unique_ptr<Job> job) {
  WorkPtr w = job->work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    to_submit_.push_back(std::move(job));
  }
  cv_.notify_all();
  return w;
}

void StagedCommunicator::fail(Job& job, std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_) broken_ = error;
  }
  release(job.staging);
  job.work->mark_failed(std::move(error));
}

void StagedCommunicator::run_submitter() {
  for (;;) {
    std::unique_ptr<Job> job;
    std::exception_ptr broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !to_submit_.empty(); });
      if (to_submit_.empty()) return;
      job = std::move(to_submit_.front());
      to_submit_.pop_front();
      broken = broken_;
    }
    if (broken) {
      fail(*job, broken);
      continue;
    }
    try {
      if (job->input) job->input->wait(timeout_);
      job->landed = std::chrono::steady_clock::now();
      job->host_work = job->launch();
    } catch (...) {
      fail(*job, std::current_exception());
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      to_complete_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
}

void StagedCommunicator::run_completer() {
  std::chrono::steady_clock::time_point previous{};
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Ends once the submitter has ended and nothing is left.
      cv_.wait(lock, [&] { return !to_complete_.empty() || submitted_all_; });
      if (to_complete_.empty()) return;
      job = std::move(to_complete_.front());
      to_complete_.pop_front();
    }
    try {
      job->host_work->wait();
      if (job->upload_bytes > 0) {
        copier_->upload(job->upload_dst, job->upload_src, job->upload_bytes)->wait(timeout_);
        std::lock_guard<std::mutex> lock(mu_);
        bytes_up_ += job->upload_bytes;
      }
    } catch (...) {
      fail(*job, std::current_exception());
      continue;
    }
    job->work->mark_started(std::max(job->landed, previous));
    release(job->staging);
    job->work->mark_done();
    previous = std::chrono::steady_clock::now();
  }
}

// ---- the operations --------------------------------------------------------------------

WorkPtr StagedCommunicator::allreduce(TensorView in, TensorView out, ReduceOp op) {
  check_args::allreduce(*this, in, out, op);
  auto job = std::make_unique<Job>();
  job->work = std::make_shared<HostWork>(
      OpDescription{"allreduce", dtype_name(in.dtype()).data(), in.numel(), reduce_op_name(op), nullptr, -1, -1, &name_});
  Staging* s = acquire(in.nbytes());
  job->staging = {s};
  job->input = download(*job, s->data, in);
  const TensorView v = TensorView::flat(s->data, in.numel(), in.dtype());
  job->launch = [this, v, op] { return host_.allreduce(v, v, op); };
  job->upload_dst = out.data();
  job->upload_src = s->data;
  job->upload_bytes = out.nbytes();
  return submit(std::move(job));
}

WorkPtr StagedCommunicator::reduce_scatter(TensorView in, TensorView out, ReduceOp op) {
  check_args::reduce_scatter(*this, in, out, op);
  auto job = std::make_unique<Job>();
  job->work = std::make_shared<HostWork>(OpDescription{
      "reduce_scatter", dtype_name(in.dtype()).data(), in.numel(), reduce_op_name(op), nullptr, -1, -1, &name_});
  Staging* s = acquire(in.nbytes());
  job->staging = {s};
  job->input = download(*job, s->data, in);
  const TensorView v = TensorView::flat(s->data, in.numel(), in.dtype());
  const TensorView mine = v.slice(rank() * out.numel(), out.numel());
  job->launch = [this, v, mine, op] { return host_.reduce_scatter(v, mine, op); };
  job->upload_dst = out.data();
  job->upload_src = mine.data();
  job->upload_bytes = out.nbytes();
  return submit(std::move(job));
}

WorkPtr StagedCommunicator::allgather(TensorView in, TensorView out) {
  check_args::allgather(*this, in, out);
  auto job = std::make_unique<Job>();
  job->work = std::make_shared<HostWork>(
      OpDescription{"allgather", dtype_name(in.dtype()).data(), in.numel(), nullptr, nullptr, -1, -1, &name_});
  Staging* s = acquire(out.nbytes());
  job->staging = {s};
  const TensorView v = TensorView::flat(s->data, out.numel(), out.dtype());
  const TensorView mine = v.slice(rank() * in.numel(), in.numel());
  job->input = download(*job, mine.data(), in);
  job->launch = [this, v, mine] { return host_.allgather(mine, v); };
  job->upload_dst = out.data();
  job->upload_src = s->data;
  job->upload_bytes = out.nbytes();
  return submit(std::move(job));
}

WorkPtr StagedCommunicator::broadcast(TensorView inout, int root) {
  check_args::broadcast(*this, inout, root);
  auto job = std::make_unique<Job>();
  job->work = std::make_shared<HostWork>(
      OpDescription{"broadcast", dtype_name(inout.dtype()).data(), inout.numel(), nullptr, "root", root, -1, &name_});
  Staging* s = acquire(inout.nbytes());
  job->staging = {s};
  const TensorView v = TensorView::flat(s->data, inout.numel(), inout.dtype());
  if (rank() == root) {
    job->input = download(*job, s->data, inout);  // the root's bytes stay as they are
  } else {
    job->upload_dst = inout.data();
    job->upload_src = s->data;
    job->upload_bytes = inout.nbytes();
  }
  job->launch = [this, v, root] { return host_.broadcast(v, root); };
  return submit(std::move(job));
}

WorkPtr StagedCommunicator::send(TensorView in, int peer, int tag) {
  check_args::point_to_point(*this, in, peer, tag, "send");
  auto job = std::make_unique<Job>();
  job->work = std::make_shared<HostWork>(
      OpDescription{"send", dtype_name(in.dtype()).data(), in.numel(), nullptr, "to rank", peer, tag, &name_});
  Staging* s = acquire(in.nbytes());
  job->staging = {s};
  job->input = download(*job, s->data, in);
  const TensorView v = TensorView::flat(s->data, in.numel(), in.dtype());
  job->launch = [this, v, peer, tag] { return host_.send(v, peer, tag); };
  return submit(std::move(job));
}

WorkPtr StagedCommunicator::recv(TensorView out, int peer, int tag) {
  check_args::point_to_point(*this, out, peer, tag, "recv");
  auto job = std::make_unique<Job>();
  job->work = std::make_shared<HostWork>(
      OpDescription{"recv", dtype_name(out.dtype()).data(), out.numel(), nullptr, "from rank", peer, tag, &name_});
  Staging* s = acquire(out.nbytes());
  job->staging = {s};
  const TensorView v = TensorView::flat(s->data, out.numel(), out.dtype());
  job->launch = [this, v, peer, tag] { return host_.recv(v, peer, tag); };
  job->upload_dst = out.data();
  job->upload_src = s->data;
  job->upload_bytes = out.nbytes();
  return submit(std::move(job));
}

WorkPtr StagedCommunicator::barrier() {
  auto job = std::make_unique<Job>();
  job->work = std::make_shared<HostWork>(OpDescription{"barrier", "", 0, nullptr, nullptr, -1, -1, &name_});
  job->launch = [this] { return host_.barrier(); };
  return submit(std::move(job));
}

}  // namespace etr
