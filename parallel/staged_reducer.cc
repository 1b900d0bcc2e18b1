#include "parallel/staged_reducer.h"

#include <cstring>

namespace etr {

StagedReducer::StagedReducer(const ParamLayout& layout, float* device_grads, Device device,
                             void* stream, Communicator& comm, BucketOptions options,
                             Tracer* tracer)
    : layout_(layout),
      ops_(device_ops(device)),
      device_grads_(device_grads),
      stream_(stream),
      mirror_(device, static_cast<size_t>(layout.numel()) * sizeof(float)),
      reducer_(layout, mirror_.as<float>(), comm, std::move(options), tracer) {
  // The padding between tensors is never copied: it stays zero in the mirror, as on the device.
  std::memset(mirror_.data(), 0, mirror_.size());
  for (int l = 0; l < layout_.num_layers(); ++l) events_.push_back(ops_.event_create());
  worker_ = std::thread([this] { work(); });
}

StagedReducer::~StagedReducer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  for (void* e : events_) ops_.event_destroy(e);
}

void StagedReducer::begin_step() {
  reducer_.begin_step();
  armed_ = true;
}

void StagedReducer::layer_ready(int layer) {
  const auto [begin, end] = layout_.layer_range(layer);
  if (end > begin) {
    ops_.download(mirror_.as<float>() + begin, device_grads_ + begin,
                  static_cast<size_t>(end - begin) * sizeof(float), stream_);
  }
  ops_.event_record(events_.at(static_cast<size_t>(layer)), stream_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(layer);
    ++pending_;
  }
  cv_.notify_all();
}

void StagedReducer::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    const int layer = queue_.front();
    queue_.pop_front();
    lock.unlock();
    try {
      ops_.event_wait(events_[static_cast<size_t>(layer)]);  // the copy has landed
      if (!error_) reducer_.layer_ready(layer);
    } catch (...) {
      error_ = std::current_exception();  // (read by finish() after pending_ reaches 0)
    }
    lock.lock();
    --pending_;
    cv_.notify_all();
  }
}

ReduceStats StagedReducer::finish() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return pending_ == 0; });
  }
  armed_ = false;
  if (error_) {
    std::exception_ptr e = std::exchange(error_, nullptr);
    reducer_.finish();  // (what was launched completes, or fails alike)
    std::rethrow_exception(e);
  }
  const ReduceStats stats = reducer_.finish();
  ops_.upload(device_grads_, mirror_.as<float>(), mirror_.size(), stream_);
  return stats;
}

}  // namespace etr
