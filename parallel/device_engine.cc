#include "parallel/device_engine.h"

#include <cmath>
#include <vector>

#include "runtime/bytes.h"
#include "runtime/state_names.h"

namespace etr {
namespace {

constexpr std::string_view kSaved[] = {etr::state::kParam, etr::state::kAdamM, etr::state::kAdamV};

}  // namespace

DeviceEngine::DeviceEngine(LayerStack<float>& stack, Allocator& alloc, void* stream,
                           DataParallelOptions options)
    : ops_(device_ops(alloc.device())),
      stack_(stack),
      stream_(stream),
      options_(std::move(options)),
      state_(stack.layout(), alloc),
      norm_sq_(alloc, sizeof(double)),
      norm_host_(alloc.device(), sizeof(double)) {
  for (std::string_view s : {etr::state::kParam, etr::state::kGrad, etr::state::kAdamM, etr::state::kAdamV}) {
    state_.add(s);
  }
  stack_.bind(state_);
}

DeviceEngine::~DeviceEngine() = default;

FlatState& DeviceEngine::host_mirror() {
  if (device().is_cpu()) return state_;
  if (!mirror_) {
    mirror_ = std::make_unique<FlatState>(stack_.layout(), host_alloc_);
    for (std::string_view s : kSaved) mirror_->add(s);
  }
  return *mirror_;
}

void DeviceEngine::initialize_parameters(
    const std::function<void(const ParamLayout&, float*)>& init) {
  if (!init) return;  // (the state starts at zero)
  FlatState& host = host_mirror();
  init(stack_.layout(), host.data<float>(etr::state::kParam));
  ops_.upload(state_.data<float>(etr::state::kParam), host.data<float>(etr::state::kParam),
              static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
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
  if (device().is_cpu()) return;
  for (std::string_view s : kSaved) {
    ops_.upload(state_.data<float>(s), mirror_->data<float>(s),
                static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
  }
  ops_.synchronize(stream_);
}

void DeviceEngine::gather_state(std::string_view name, float* out) {
  ops_.download(out, state_.data<float>(name), static_cast<size_t>(stack_.layout().numel()) * sizeof(float),
                stream_);
  ops_.synchronize(stream_);
}

EngineMemory DeviceEngine::memory() const {
  EngineMemory m;
  m.psi = stack_.layout().param_count();
  const size_t each = static_cast<size_t>(state_.held_numel()) * sizeof(float);
  m.params = each;
  m.grads = each;
  m.optimizer = 2 * each;
  return m;
}

std::string DeviceEngine::describe() const {
  return "one rank on " + device().str() + ": parameters, gradients and AdamW state in its memory (" +
         format_bytes(static_cast<double>(state_.bytes())) + "), no gradient communication";
}

void DeviceEngine::begin_step() {
  ops_.zero(grads(), static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
}

std::vector<GradRange> DeviceEngine::reduced_gradients(bool /*owned*/) {
  return {{HeldRange{0, stack_.layout().numel()}, grads()}};
}

double DeviceEngine::grad_norm() {
  const int64_t begin = options_.norm_begin;
  double* d = static_cast<double*>(norm_sq_.data());
  ops_.grad_norm_squared(d, grads() + begin, stack_.layout().numel() - begin, stream_);
  ops_.download(norm_host_.data(), d, sizeof(double), stream_);
  ops_.synchronize(stream_);
  return std::sqrt(*norm_host_.as<double>());
}

void DeviceEngine::optimizer_step(const OptimizerStep& s) {
  // The norm on the device is the one grad_norm() returned (`s.grad_norm`); the clipping
  // reads it there.
  const int64_t n = stack_.layout().numel();
  ops_.clip_grad_norm(grads(), n, static_cast<const double*>(norm_sq_.data()), s.max_norm, stream_);
  ops_.adamw_step(stack_.layout(), state_.data<float>(etr::state::kParam), grads(),
                  state_.data<float>(etr::state::kAdamM), state_.data<float>(etr::state::kAdamV), s.t, s.lr,
                  options_.adamw, stream_);
}

std::vector<NamedState> DeviceEngine::states() {
  FlatState& host = host_mirror();
  if (!device().is_cpu()) {
    for (std::string_view s : kSaved) {
      ops_.download(host.data<float>(s), state_.data<float>(s),
                    static_cast<size_t>(state_.held_numel()) * sizeof(float), stream_);
    }
    ops_.synchronize(stream_);
  }
  std::vector<NamedState> out;
  for (std::string_view s : kSaved) out.push_back({std::string(s), host.data<float>(s)});
  return out;
}

}  // namespace etr
