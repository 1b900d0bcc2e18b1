#include "parallel/zero_engine.h"

#include <algorithm>
#include <cstring>

#include <unistd.h>

#include "checkpoint/shard_plan.h"
#include "parallel/device_comm.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/state_names.h"

namespace etr {

ZeroEngine::ZeroEngine(LayerStack<float>& stack, const ProcessGrid& grid, Allocator& alloc,
                       ZeroOptions options, Tracer* tracer, void* stream)
    : stack_(stack),
      grid_(grid),
      alloc_(alloc),
      host_alloc_(dynamic_cast<HostAllocator*>(&alloc)),
      options_(std::move(options)),
      ops_(device_ops(alloc.device())),
      stream_(stream),
      device_path_(!alloc.device().is_cpu() || options_.staged || host_alloc_ == nullptr),
      plan_(stack.layout(), grid.dp_size(), options_.dp.buckets),
      shard_(stack.layout(), alloc, plan_.held(grid.dp_rank())) {
  if (options_.stage < 1 || options_.stage > 3) {
    throw InvalidArgument("ZeroEngine runs stages 1, 2 and 3, not " + std::to_string(options_.stage));
  }
  require_shardable(plan_, options_.stage);
  build_storage();
  build_communication(tracer);
}

ZeroEngine::~ZeroEngine() {
  if (blocked_) stack_.set_grad_sink(nullptr);  // the layers outlive the engine
}

void ZeroEngine::build_storage() {
  const ParamLayout& layout = stack_.layout();
  const int s = options_.stage;
  if (s >= 3) {
    shard_.add(state::kParam);  // the rest after initialize_parameters: its window is 4 Psi
  } else {
    add_optimizer_states();
  }
  if (s <= 2) {
    replica_.emplace(layout, alloc_);
    replica_->add(state::kParam);
    if (s == 1) replica_->add(state::kGrad);
    full_params_ = replica_->data<float>(state::kParam);
  }
  if (s == 1) full_grads_ = replica_->data<float>(state::kGrad);
  if (s >= 2) {
    grad_window_ = make_window("gradient", 0);
    grad_page_ = grad_window_->page_bytes();
    full_grads_ = grad_window_->data();
    grad_held_.assign(plan_.buckets().size(), 0);
  }
  if (s == 3) {
    // 4 KiB pages: the gathered working set follows the buckets held closely (huge pages
    // would round each layer up to 2 MiB; first touch costs about 5 % here, etr-bench zero).
    param_window_ = make_window("parameter", static_cast<size_t>(sysconf(_SC_PAGESIZE)));
    full_params_ = param_window_->data();
  }
  stack_.bind(full_params_, full_grads_);
  const int r = grid_.dp_rank();
  held_index_.resize(plan_.buckets().size());
  for (size_t b = 0; b < plan_.buckets().size(); ++b) held_index_[b] = index_of(plan_.block(b, r));
  needed_ = buckets_read_by_layers(plan_, stack_);
}

// Paged on the host; on the device path the whole array (WholeWindow: a GPU has no paged
// window yet).
std::unique_ptr<MemoryWindow> ZeroEngine::make_window(const char* name, size_t page_bytes) {
  const int64_t n = stack_.layout().numel();
  if (!device_path_) return std::make_unique<HostWindow>(n, *host_alloc_, name, page_bytes);
  return std::make_unique<WholeWindow>(n, alloc_, stream_);
}

void ZeroEngine::build_communication(Tracer* tracer) {
  const CommOptions co = gradient_comm_options(options_.dp.comm);
  grad_comm_ = std::make_unique<HostCommunicator>(grid_.dp_group(), co);
  param_comm_ = std::make_unique<HostCommunicator>(grid_.dp_group(), co);
  if (device_path_) {
    const Device d = alloc_.device();
    grad_dev_ = make_device_communicator(grid_.dp_group(), d, stream_, *grad_comm_, options_.dp.nccl, co);
    param_dev_ = make_device_communicator(grid_.dp_group(), d, stream_, *param_comm_, options_.dp.nccl, co);
  }
  BucketOptions bo = options_.dp.buckets;
  bo.op = BucketOp::kReduceScatter;
  bo.shard_ranks = plan_.ranks();
  reducer_ = std::make_unique<BucketReducer>(stack_.layout(), full_grads_, grad_comm(), bo, tracer);
  if (device_path_) local_norm_ = std::make_unique<LocalNormMeter>(*reducer_, alloc_, stream_);
  // The norm's slots now, not in the first step (where an allocation could fail after the
  // step's work, out of the out-of-memory recovery's reach).
  const size_t slots = std::max<size_t>(plan_.norm_ranges(grid_.dp_rank()).size(), 1) * sizeof(double);
  norm_slots_ = Buffer(alloc_, slots);
  norm_host_ = PinnedBuffer(alloc_.device(), slots);
  if (options_.stage >= 2) {
    reducer_->set_scatter_output([this](size_t b) { return held(state::kGrad, b); });
  }
  reducer_->set_on_reduced([this](size_t b) { reduced(b); });
  const int r = grid_.dp_rank();
  gather_ = std::make_unique<ParamGather>(
      plan_, param_comm(), full_params_,
      [this, r](size_t b) -> const float* {
        return options_.stage == 3 ? held(state::kParam, b) : full_params_ + plan_.block(b, r).begin;
      },
      stream_);
  if (options_.stage == 3) {
    layers_ = std::make_unique<LayerGatherer>(plan_, stack_, *param_window_, *gather_, options_.log,
                                              options_.prefetch_bytes);
  }
}

void ZeroEngine::add_optimizer_states() {
  if (shard_.has(state::kAdamM)) return;
  shard_.add(state::kAdamM);
  shard_.add(state::kAdamV);
  if (options_.stage >= 2) shard_.add(state::kGrad);
}

float* ZeroEngine::held(std::string_view state, size_t bucket) {
  return shard_.range<float>(state, held_index_[bucket]);
}

size_t ZeroEngine::index_of(const HeldRange& r) const {
  const auto held = shard_.held();
  auto it = std::lower_bound(held.begin(), held.end(), r.begin,
                             [](const HeldRange& x, int64_t v) { return x.begin < v; });
  return static_cast<size_t>(it - held.begin());
}

float* ZeroEngine::grad_of(const HeldRange& r) {
  if (options_.stage == 1) return full_grads_ + r.begin;
  return shard_.range<float>(state::kGrad, index_of(r));
}

float* ZeroEngine::param_of(const HeldRange& r) {
  if (options_.stage < 3) return full_params_ + r.begin;
  return shard_.range<float>(state::kParam, index_of(r));
}

void ZeroEngine::initialize_parameters(
    const std::function<void(const ParamLayout&, float*)>& init) {
  const ParamLayout& layout = stack_.layout();
  const size_t bytes = static_cast<size_t>(layout.numel()) * sizeof(float);
  if (param_window_) param_window_->acquire(0, layout.numel());
  // Set on the host (the device path: a host copy, uploaded), rank 0's everywhere.
  std::vector<float> host;
  if (device_path_) host.assign(static_cast<size_t>(layout.numel()), 0.0f);
  float* full = device_path_ ? host.data() : full_params_;
  if (init) init(layout, full);
  if (plan_.ranks() > 1) {
    param_comm_->broadcast(TensorView::flat(full, layout.numel(), DType::kF32), 0)->wait();
  }
  if (device_path_) ops_.upload(full_params_, full, bytes, stream_);
  if (param_window_) {
    for (size_t i = 0; i < shard_.held().size(); ++i) {
      const HeldRange& h = shard_.held()[i];
      ops_.copy(shard_.range<float>(state::kParam, i), full_params_ + h.begin, h.numel() * sizeof(float),
                stream_);
    }
    gather_->forget_all();
    param_window_->drop_all();
    param_window_->reset_peak();  // the working set of training, not of the start
    add_optimizer_states();
  }
  ops_.synchronize(stream_);  // (the host copy goes out of scope)
}

float* ZeroEngine::parameters() {
  if (options_.stage < 3) gather_->wait_all();
  if (!device_path_) return full_params_;
  host_params_.resize(static_cast<size_t>(stack_.layout().numel()));
  ops_.download(host_params_.data(), full_params_, host_params_.size() * sizeof(float), stream_);
  ops_.synchronize(stream_);
  return host_params_.data();
}

void ZeroEngine::materialize_parameters() {
  if (layers_) {
    layers_->gather_all();
  } else {
    gather_->wait_all();
  }
}

std::vector<HeldState> ZeroEngine::held_states() {
  add_optimizer_states();
  gather_->wait_all();
  if (layers_) layers_->release_all();
  FlatState& shard = device_path_ ? mirror_shard() : shard_;
  FlatState* params = options_.stage == 3 ? &shard : device_path_ ? &mirror_replica() : &*replica_;
  return {{std::string(state::kParam), params},
          {std::string(state::kAdamM), &shard},
          {std::string(state::kAdamV), &shard}};
}

// The device path: the restore filled the host copies; they go to the device.
void ZeroEngine::restored() {
  if (!device_path_) return;
  const size_t shard_bytes = static_cast<size_t>(shard_.held_numel()) * sizeof(float);
  for (std::string_view s : {state::kParam, state::kAdamM, state::kAdamV}) {
    if (s == state::kParam && options_.stage < 3) continue;
    ops_.upload(shard_.data<float>(s), mirror_shard().data<float>(s), shard_bytes, stream_);
  }
  if (options_.stage < 3) {
    ops_.upload(full_params_, mirror_replica().data<float>(state::kParam),
                static_cast<size_t>(stack_.layout().numel()) * sizeof(float), stream_);
  }
  ops_.synchronize(stream_);
}

FlatState& ZeroEngine::mirror_shard() {
  if (!mirror_shard_) {
    mirror_shard_ = std::make_unique<FlatState>(stack_.layout(), mirror_alloc_, plan_.held(grid_.dp_rank()));
    if (options_.stage == 3) mirror_shard_->add(state::kParam);
    mirror_shard_->add(state::kAdamM);
    mirror_shard_->add(state::kAdamV);
  }
  return *mirror_shard_;
}

FlatState& ZeroEngine::mirror_replica() {
  if (!mirror_replica_) {
    mirror_replica_ = std::make_unique<FlatState>(stack_.layout(), mirror_alloc_);
    mirror_replica_->add(state::kParam);
  }
  return *mirror_replica_;
}

// A state of the shard (param at stage 3, adam.m, adam.v), or the whole parameters at
// stages 1-2, copied to the host (done when it returns).
void ZeroEngine::download_mirror(std::string_view s) {
  if (s == state::kParam && options_.stage < 3) {
    ops_.download(mirror_replica().data<float>(s), full_params_,
                  static_cast<size_t>(stack_.layout().numel()) * sizeof(float), stream_);
  } else {
    ops_.download(mirror_shard().data<float>(s), shard_.data<float>(s),
                  static_cast<size_t>(shard_.held_numel()) * sizeof(float), stream_);
  }
  ops_.synchronize(stream_);
}

const float* ZeroEngine::host_held(std::string_view s, size_t bucket) {
  if (!device_path_) return held(s, bucket);
  return mirror_shard().range<float>(s, held_index_[bucket]);
}

void ZeroEngine::gather_state(std::string_view name, float* out) {
  if (name == state::kParam && options_.stage < 3) {
    const float* p = parameters();
    std::copy(p, p + stack_.layout().numel(), out);
    return;
  }
  const int r = grid_.dp_rank();
  if (device_path_) download_mirror(name);
  for (size_t b = 0; b < plan_.buckets().size(); ++b) {
    const Bucket& k = plan_.buckets()[b];
    if (k.replicated || plan_.ranks() == 1) {
      std::memcpy(out + k.begin, host_held(name, b), k.numel() * sizeof(float));
      continue;
    }
    const HeldRange mine = plan_.block(b, r);
    param_comm_->allgather(TensorView::flat(const_cast<float*>(host_held(name, b)), mine.numel(), DType::kF32),
                           TensorView::flat(out + k.begin, k.numel(), DType::kF32))->wait();
  }
}

size_t ZeroEngine::largest_layer_bytes() const {
  int64_t most = 0;
  for (const std::vector<size_t>& buckets : needed_) {
    int64_t n = 0;
    for (size_t b : buckets) n += plan_.buckets()[b].numel();
    most = std::max(most, n);
  }
  return static_cast<size_t>(most) * sizeof(float);
}

EngineMemory ZeroEngine::memory() const {
  EngineMemory m;
  m.stage = options_.stage;
  m.ranks = plan_.ranks();
  m.psi = stack_.layout().param_count();
  const size_t shard = static_cast<size_t>(shard_.held_numel()) * sizeof(float);
  const size_t whole = static_cast<size_t>(stack_.layout().numel()) * sizeof(float);
  m.params = options_.stage == 3 ? shard : whole;
  m.grads = options_.stage == 1 ? whole : shard;
  m.optimizer = 2 * shard;
  m.unreduced_peak = grad_window_ ? grad_window_->peak_bytes() : 0;
  m.gathered_peak = param_window_ ? param_window_->peak_bytes() : 0;
  return m;
}

std::string ZeroEngine::describe() const {
  const BucketOptions& b = options_.dp.buckets;
  std::string s = "ZeRO stage " + std::to_string(options_.stage) + ": " +
                  std::to_string(plan_.buckets().size()) + " buckets (first " +
                  format_bytes(static_cast<double>(b.first_bucket_bytes)) + ", then " +
                  format_bytes(static_cast<double>(b.bucket_cap_bytes)) +
                  ") reduce-scattered, overlap " + (b.overlap ? "on" : "off") + "; this rank holds " +
                  format_bytes(static_cast<double>(shard_.held_numel()) * sizeof(float)) +
                  " of each sharded state";
  if (plan_.replicated_numel() > 0) {
    s += " (" + std::to_string(plan_.replicated_numel()) + " elements replicated)";
  }
  return s;
}

}  // namespace etr

namespace etr {

// In whole window pages. The gradient window: all of it while a step accumulates several
// micro-batches and only the last one reduces (`each` off); else the cap backward keeps it under once a
// layer is done (layer_grads_final), plus the next layer's buckets taken before its
// backward. The parameter window: the layer in use and the next one's prefetch, which is
// at most a layer (all of it when a pipeline gathers once per step).
Engine::WindowBytes ZeroEngine::predicted_windows(int micro_batches) const {
  return predicted_windows_if(micro_batches, each_);
}

Engine::WindowBytes ZeroEngine::predicted_windows_if(int micro_batches, bool each) const {
  const size_t whole = static_cast<size_t>(stack_.layout().numel()) * sizeof(float);
  auto in_pages = [](size_t page, size_t bytes) { return (bytes + page - 1) / page * page; };
  auto pages = [&](const MemoryWindow* w, size_t bytes) { return in_pages(w ? w->page_bytes() : 1, bytes); };
  WindowBytes p;
  if (grad_window_) {
    // Blocked, the window counts system pages (set_reduce_each_micro_batch).
    const size_t page = blocks_gradients_if(each) ? static_cast<size_t>(sysconf(_SC_PAGESIZE)) : grad_page_;
    const size_t all = in_pages(grad_page_, whole);
    // Blocked (each micro-batch reduced, the layers writing through the sink): the cap and
    // one block; else the cap and a layer. (A held range that does not start on a page
    // boundary touches one page more.)
    const bool blocked = blocks_gradients_if(each);
    const size_t held = blocked ? blocked_window_cap() + largest_block_bytes()
                                : grad_window_cap() + largest_layer_bytes();
    p.grads = micro_batches > 1 && !each
                  ? all
                  : std::min(all, in_pages(page, held) + page);
  }
  if (param_window_) {
    // The prefetch takes the next layer's buckets up to prefetch_bytes, and one at least.
    size_t bucket = 0;
    for (const Bucket& k : plan_.buckets()) bucket = std::max(bucket, static_cast<size_t>(k.numel()) * sizeof(float));
    const size_t prefetched = std::max(options_.prefetch_bytes, bucket);
    const size_t all = pages(param_window_.get(), whole);
    p.params = options_.gather_once_per_step
                   ? all
                   : std::min(all, pages(param_window_.get(),
                                         largest_layer_bytes() + std::min(prefetched, largest_layer_bytes())));
  }
  return p;
}

}  // namespace etr
