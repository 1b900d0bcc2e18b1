#include "parallel/device_engine.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "collectives/host_topology.h"
#include "parallel/device_comm.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/state_names.h"

namespace etr {
namespace {

constexpr std::string_view kSaved[] = {etr::state::kParam, etr::state::kAdamM, etr::state::kAdamV};

}  // namespace

template <typename Real>
DeviceEngine::DeviceEngine(LayerStack<Real>& stack, Allocator& alloc, void* stream,
                           DataParallelOptions options, const ProcessGrid* grid, Tracer* tracer)
    : ops_(device_ops(alloc.device())),
      layout_(stack.layout()),
      mixed_(std::is_same_v<Real, bf16>),
      stream_(stream),
      options_(std::move(options)),
      state_(stack.layout(), alloc),
      norm_sq_(alloc, sizeof(double)),
      norm_host_(alloc.device(), sizeof(double)) {
  for (std::string_view s : {etr::state::kParam, etr::state::kGrad, etr::state::kAdamM, etr::state::kAdamV}) {
    state_.add(s);
  }
  if (mixed_) state_.add(etr::state::kParamBf16, DType::kBF16);
  stack.bind(state_);
  if (grid && (grid->dp_size() > 1 || options_.nccl)) {
    ranks_ = grid->dp_size();
    options_.buckets.shard_ranks = grid->dp_size();  // DataParallelEngine's plan, bucket for bucket
    comm_ = std::make_unique<HostCommunicator>(grid->dp_group(), gradient_comm_options(options_.comm));
    device_comm_ = make_device_communicator(grid->dp_group(), alloc.device(), stream_, *comm_,
                                            options_.nccl, gradient_comm_options(options_.comm));
    reducer_ = std::make_unique<BucketReducer>(layout_, grads(), *device_comm_, options_.buckets, tracer);
    local_norm_ = std::make_unique<LocalNormMeter>(*reducer_, alloc, stream_);
  }
}

template DeviceEngine::DeviceEngine(LayerStack<float>&, Allocator&, void*, DataParallelOptions,
                                    const ProcessGrid*, Tracer*);
template DeviceEngine::DeviceEngine(LayerStack<bf16>&, Allocator&, void*, DataParallelOptions,
                                    const ProcessGrid*, Tracer*);

DeviceEngine::~DeviceEngine() = default;

void DeviceEngine::refresh_bf16() {
  if (!mixed_) return;
  ops_.to_bf16(state_.data<uint16_t>(etr::state::kParamBf16),
               state_.data<float>(etr::state::kParam), state_.held_numel(), stream_);
}

FlatState& DeviceEngine::host_mirror() {
  if (!mirror_) {
    mirror_ = std::make_unique<FlatState>(layout_, host_alloc_);
    for (std::string_view s : kSaved) mirror_->add(s);
  }
  return *mirror_;
}

void DeviceEngine::initialize_parameters(
    const std::function<void(const ParamLayout&, float*)>& init) {
  if (!init && !comm_) return;  // (the state starts at zero)
  FlatState& host = host_mirror();
  if (init) init(layout_, host.data<float>(etr::state::kParam));
  // The replicas start equal: rank 0's parameters.
  if (comm_) broadcast_parameters(*comm_, host.data<float>(etr::state::kParam), layout_.numel());
  ops_.upload(state_.data<float>(etr::state::kParam), host.data<float>(etr::state::kParam),
              static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
  refresh_bf16();
  ops_.synchronize(stream_);
}

float* DeviceEngine::parameters() {
  gather_state(etr::state::kParam, host_mirror().data<float>(etr::state::kParam));
  return host_mirror().data<float>(etr::state::kParam);
}

std::vector<HeldState> DeviceEngine::held_states() {
  std::vector<HeldState> out;
  for (std::string_view s : kSaved) out.push_back({std::string(s), &host_mirror()});
  return out;
}

void DeviceEngine::restored() {
  for (std::string_view s : kSaved) {
    ops_.upload(state_.data<float>(s), mirror_->data<float>(s),
                static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
  }
  refresh_bf16();
  ops_.synchronize(stream_);
}

void DeviceEngine::gather_state(std::string_view name, float* out) {
  ops_.download(out, state_.data<float>(name), static_cast<size_t>(layout_.numel()) * sizeof(float),
                stream_);
  ops_.synchronize(stream_);
}

EngineMemory DeviceEngine::memory() const {
  EngineMemory m = replica_memory(layout_, state_.held_numel(), ranks_);
  if (mixed_) m.params += static_cast<size_t>(state_.held_numel()) * sizeof(uint16_t);
  return m;
}

std::string DeviceEngine::describe() const {
  std::string s = "state on " + device().str() + " (" + format_bytes(static_cast<double>(state_.bytes())) +
                  " a rank" + (mixed_ ? ", bf16 parameter copy included" : "") + ")";
  if (!reducer_) return s + ", one rank, no gradient communication";
  const BucketOptions& b = reducer_->options();
  s += "; " + std::to_string(reducer_->buckets().size()) + " gradient buckets ";
  s += nccl() ? "summed by NCCL on the device" : "staged through the host";
  s += " (first " + format_bytes(static_cast<double>(b.first_bucket_bytes)) + ", then " +
       format_bytes(static_cast<double>(b.bucket_cap_bytes)) + "), overlap " + (b.overlap ? "on" : "off");
  if (!nccl()) s += ", allreduce on " + comm_->topology().str();
  return s;
}

void DeviceEngine::begin_backward(bool last) {
  if (last && reducer_) reducer_->begin_step();
}

void DeviceEngine::layer_grads_final(int layer) {
  // Only the last micro-batch armed the reducer; earlier ones just accumulate.
  if (reducer_ && reducer_->armed()) reducer_->layer_ready(layer);
}

ReduceStats DeviceEngine::end_backward() {
  // Waits for the last bucket: NCCL's event, or the staged upload's landing.
  return reducer_ ? reducer_->finish() : ReduceStats{};
}

void DeviceEngine::begin_step() {
  ops_.zero(grads(), static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
}

std::vector<GradRange> DeviceEngine::reduced_gradients(bool /*owned*/) {
  return {{HeldRange{0, layout_.numel()}, grads()}};
}

double DeviceEngine::grad_norm() {
  const int64_t begin = options_.norm_begin;
  double* d = static_cast<double*>(norm_sq_.data());
  ops_.grad_norm_squared(d, grads() + begin, layout_.numel() - begin, stream_);
  ops_.download(norm_host_.data(), d, sizeof(double), stream_);
  ops_.synchronize(stream_);
  norm_ = std::sqrt(*norm_host_.as<double>());
  return norm_;
}

void DeviceEngine::optimizer_step(const OptimizerStep& s) {
  // When the norm is the one grad_norm() returned, the clipping reads it on the device;
  // another (a pipeline's, over every stage) is clipped by from the host, with
  // etr::clip_grad_norm's rule and product.
  const int64_t n = layout_.numel();
  if (s.grad_norm == norm_) {
    ops_.clip_grad_norm(grads(), n, static_cast<const double*>(norm_sq_.data()), s.max_norm, stream_);
  } else if (s.max_norm > 0 && !(s.grad_norm <= s.max_norm)) {
    ops_.scale(grads(), n, static_cast<float>(s.max_norm / (s.grad_norm + 1e-6)), stream_);
  }
  uint16_t* p16 = mixed_ ? state_.data<uint16_t>(etr::state::kParamBf16) : nullptr;
  ops_.adamw_step(layout_, state_.data<float>(etr::state::kParam), grads(),
                  state_.data<float>(etr::state::kAdamM), state_.data<float>(etr::state::kAdamV), p16,
                  s.t, s.lr, options_.adamw, stream_);
}

std::vector<NamedState> DeviceEngine::states() {
  FlatState& host = host_mirror();
  for (std::string_view s : kSaved) {
    ops_.download(host.data<float>(s), state_.data<float>(s),
                  static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
  }
  ops_.synchronize(stream_);
  std::vector<NamedState> out;
  for (std::string_view s : kSaved) out.push_back({std::string(s), host.data<float>(s)});
  return out;
}

}  // namespace etr
