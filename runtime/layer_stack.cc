#include "runtime/layer_stack.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "runtime/error.h"
#include "runtime/state_names.h"

namespace etr {

// Activations: `in_flight` slots back to back, each holding every layer's activations
// (layer i at offsets[i] within the slot), then, planned with split, every layer's split
// storage (layer i at split_offsets[i]). Layers keep pointers into the slot they were
// last planned on; select(s) re-points them at slot s (pointer arithmetic only).
// weight_pending[s]: slot s ran backward_input and waits for its backward_weight.
// Planned with recompute, a recomputed layer i (recomputed[i]) has at offsets[i] only
// its output's copy, output_numel(B, T) elements, and is planned on the shared buffer
// after the last slot (the largest activation_numel of the recomputed layers), whatever
// the slot: its output() points there, so its output is read from output_of(i, slot).
// Scratch: two buffers for the gradient flowing between layers (the largest output but
// the last layer's: the loss layer's output gradient is never formed), then the largest
// scratch of any layer's backward.
template <typename Real>
struct LayerStack<Real>::Impl {
  Buffer activations, scratch;
  int64_t B = 0, T = 0;
  int in_flight = 0;
  int64_t slot_numel = 0;
  std::vector<int64_t> offsets;  // per layer, within a slot
  bool split = false;
  std::vector<int64_t> split_offsets;   // per layer, within a slot (planned with split)
  std::vector<uint8_t> weight_pending;  // per slot
  bool recompute = false;
  std::vector<uint8_t> recomputed;  // per layer: planned with recompute and recomputable()
  int64_t grad_numel = 0;        // one of the two inter-layer gradient buffers
  int current = -1;              // the slot the layers point into
  std::vector<const void*> inputs;  // per slot: the first layer's input of its forward
  std::vector<std::string> forward_names, backward_names, input_names, weight_names,
      recompute_names;

  void add_names(const std::string& layer) {
    forward_names.push_back("forward " + layer);
    recompute_names.push_back("recompute " + layer);
    backward_names.push_back("backward " + layer);
    input_names.push_back("backward_input " + layer);
    weight_names.push_back("backward_weight " + layer);
  }

  Real* slot(int s) const {
    return static_cast<Real*>(activations.data()) + static_cast<int64_t>(s) * slot_numel;
  }
  Real* shared() const { return slot(in_flight); }  // after the last slot
};

namespace {

// slot: activations (a recomputed layer's output only) + split storage; shared: the
// recomputed layers' activations.
struct Sizes {
  int64_t slot = 0, shared = 0, grad = 0, scratch = 0;
};

template <typename Real>
bool recomputed(const Layer<Real>& layer, bool recompute) {
  return recompute && layer.recomputable();
}

template <typename Real>
Sizes sizes_of(const std::vector<std::unique_ptr<Layer<Real>>>& layers, int64_t B, int64_t T,
               bool split, bool recompute) {
  Sizes s;
  // numel_as: every array 16-byte aligned under bf16 (a no-op for float and double).
  auto n = [](int64_t k) { return numel_as<Real>(k); };
  for (size_t i = 0; i < layers.size(); ++i) {
    if (recomputed(*layers[i], recompute)) {
      s.slot += n(layers[i]->output_numel(B, T));
      s.shared = std::max(s.shared, n(layers[i]->activation_numel(B, T)));
    } else {
      s.slot += n(layers[i]->activation_numel(B, T));
    }
    if (split) s.slot += n(layers[i]->split_numel(B, T));
    s.scratch = std::max(s.scratch, n(layers[i]->scratch_numel(B, T)));
    if (i + 1 < layers.size()) s.grad = std::max(s.grad, n(layers[i]->output_numel(B, T)));
  }
  return s;
}

// The last layer's per-position losses of the forward that just ran.
template <typename Real>
const accum_t<Real>* losses_of(const Layer<Real>& last) {
  const accum_t<Real>* l = last.losses();
  if (l == nullptr) throw InvalidArgument("the stack's last layer (" + last.name() + ") gives no losses");
  return l;
}

void check_plan(int in_flight, bool split, bool recompute) {
  if (in_flight < 1) {
    throw InvalidArgument("a layer stack needs at least 1 micro-batch in flight, not " +
                          std::to_string(in_flight));
  }
  if (split && recompute) {
    throw InvalidArgument(
        "activation recomputation does not combine with the split backward (ZB-H1) yet");
  }
}

}  // namespace

template <typename Real>
LayerStack<Real>::LayerStack(std::vector<std::unique_ptr<Layer<Real>>> layers)
    : layers_(std::move(layers)), impl_(std::make_unique<Impl>()) {
  if (layers_.empty()) throw InvalidArgument("a layer stack needs at least one layer");
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i]) throw InvalidArgument("layer " + std::to_string(i) + " of the stack is null");
    layers_[i]->declare(layout_, static_cast<int>(i));
    impl_->add_names(layers_[i]->name());
  }
  set_context(ExecContext<Real>{});
}

template <typename Real>
LayerStack<Real>::LayerStack(std::vector<std::unique_ptr<Layer<Real>>> layers,
                             const std::vector<TensorEntry>& borrowed)
    : layers_(std::move(layers)), impl_(std::make_unique<Impl>()) {
  if (layers_.empty()) throw InvalidArgument("a layer stack needs at least one layer");
  for (const TensorEntry& e : borrowed) layout_.add(e.name, e.shape, 0, e.weight_decay, e.dtype);
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i]) throw InvalidArgument("layer " + std::to_string(i) + " of the stack is null");
    layers_[i]->declare(layout_, static_cast<int>(i));
    impl_->add_names(layers_[i]->name());
  }
  set_context(ExecContext<Real>{});
}

template <typename Real>
LayerStack<Real>::~LayerStack() = default;

template <typename Real>
void LayerStack<Real>::share(const std::string& name, int owner, int user) {
  const TensorEntry* e = layout_.find(name);
  if (!e) throw InvalidArgument("the layer stack has no tensor '" + name + "' to share");
  if (e->layer != owner) {
    throw InvalidArgument("tensor '" + name + "' belongs to layer " + std::to_string(e->layer) +
                          ", not to layer " + std::to_string(owner));
  }
  if (user <= owner || user >= size()) {
    throw InvalidArgument("tensor '" + name + "' can be shared with a later layer of the " +
                          "stack only, not with layer " + std::to_string(user));
  }
  shared_.push_back(SharedParam{name, owner, user});
}

template <typename Real>
void LayerStack<Real>::bind(FlatState& state) {
  if (&state.layout() != &layout_ && state.layout().numel() != layout_.numel()) {
    throw InvalidArgument("the state's layout is not the layer stack's");
  }
  if (!state.holds_all()) {
    throw InvalidArgument("layers bind to a state that holds the whole layout; this one holds " +
                          std::to_string(state.held_numel()) + " of " +
                          std::to_string(layout_.numel()) + " elements");
  }
  if constexpr (std::is_same_v<Real, bf16>) {
    bind(state.data<Real>(state::kParamBf16), state.data<Acc>(state::kGrad));
  } else {
    bind(state.data<Real>(state::kParam), state.data<Acc>(state::kGrad));
  }
}

template <typename Real>
void LayerStack<Real>::bind(Real* params, Acc* grads) {
  for (auto& layer : layers_) layer->bind(layout_, params, grads);
}

template <typename Real>
void LayerStack<Real>::set_context(const ExecContext<Real>& context) {
  context_ = context;
  if (!context_.kernels) context_.kernels = &kernels_for<Real>(context_.device);
  for (auto& layer : layers_) layer->set_context(context_);
}

template <typename Real>
void LayerStack<Real>::set_grad_sink(GradSink* sink) {
  for (auto& layer : layers_) layer->set_grad_sink(sink);
}

template <typename Real>
bool LayerStack<Real>::grads_through_sink() const {
  for (const auto& layer : layers_) {
    if (!layer->writes_grads_through_sink()) return false;
  }
  return !layers_.empty();
}

template <typename Real>
size_t LayerStack<Real>::activation_bytes(int64_t B, int64_t T, int in_flight, bool split,
                                          bool recompute) const {
  check_plan(in_flight, split, recompute);
  const Sizes s = sizes_of(layers_, B, T, split, recompute);
  const int64_t numel = s.slot * in_flight + s.shared + 2 * s.grad + s.scratch;
  return static_cast<size_t>(numel) * sizeof(Real);
}

template <typename Real>
void LayerStack<Real>::plan(Allocator& alloc, int64_t B, int64_t T, int in_flight, bool split,
                            bool recompute) {
  check_plan(in_flight, split, recompute);
  if (B < 1 || T < 1) {
    throw InvalidArgument("a micro-batch of " + std::to_string(B) + " x " + std::to_string(T) +
                          " has no positions");
  }
  const Sizes s = sizes_of(layers_, B, T, split, recompute);
  Impl& m = *impl_;
  m.activations.reset();
  m.scratch.reset();
  m.B = m.T = 0;
  m.activations = Buffer(alloc, static_cast<size_t>(s.slot * in_flight + s.shared) * sizeof(Real));
  m.scratch = Buffer(alloc, static_cast<size_t>(2 * s.grad + s.scratch) * sizeof(Real));
  m.offsets.clear();
  m.split_offsets.clear();
  m.recomputed.clear();
  int64_t offset = 0;
  for (auto& layer : layers_) {
    m.offsets.push_back(offset);
    m.recomputed.push_back(recomputed(*layer, recompute) ? 1 : 0);
    offset += numel_as<Real>(m.recomputed.back() ? layer->output_numel(B, T)
                                                  : layer->activation_numel(B, T));
  }
  for (auto& layer : layers_) {
    m.split_offsets.push_back(offset);
    if (split) offset += numel_as<Real>(layer->split_numel(B, T));
  }
  m.split = split;
  m.recompute = recompute;
  m.weight_pending.assign(static_cast<size_t>(in_flight), 0);
  m.B = B;
  m.T = T;
  m.in_flight = in_flight;
  m.slot_numel = s.slot;
  m.grad_numel = s.grad;
  m.current = -1;
  m.inputs.assign(static_cast<size_t>(in_flight), nullptr);
  select(0);
}

template <typename Real>
void LayerStack<Real>::release() {
  Impl& m = *impl_;
  m.activations.reset();
  m.scratch.reset();
  m.B = m.T = 0;
  m.in_flight = 0;
  m.slot_numel = m.grad_numel = 0;
  m.split = m.recompute = false;
  m.offsets.clear();
  m.split_offsets.clear();
  m.recomputed.clear();
  m.weight_pending.clear();
  m.inputs.clear();
  m.current = -1;
}

template <typename Real>
int LayerStack<Real>::in_flight() const {
  return impl_->in_flight;
}

template <typename Real>
const void* LayerStack<Real>::activations_data() const {
  return impl_->activations.data();
}

template <typename Real>
const void* LayerStack<Real>::scratch_data() const {
  return impl_->scratch.data();
}

template <typename Real>
bool LayerStack<Real>::split() const {
  return impl_->split;
}

template <typename Real>
bool LayerStack<Real>::recompute() const {
  return impl_->recompute;
}

template <typename Real>
void LayerStack<Real>::select(int slot) const {
  Impl& m = *impl_;
  if (slot < 0 || slot >= m.in_flight) {
    throw InvalidArgument("activation slot " + std::to_string(slot) + " is not one of the " +
                          std::to_string(m.in_flight) + " planned");
  }
  if (m.current == slot) return;
  Real* base = m.slot(slot);
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->plan(m.recomputed[i] ? m.shared() : base + m.offsets[i], m.B, m.T);
    if (m.split) layers_[i]->plan_split(base + m.split_offsets[i], m.B, m.T);
  }
  m.current = slot;
}

template <typename Real>
void LayerStack<Real>::check_fits(const Batch& b) const {
  const Impl& m = *impl_;
  if (b.B < 1 || b.T < 1 || b.B > m.B || b.T > m.T || b.B * b.T > m.B * m.T) {
    throw InvalidArgument("a micro-batch of " + std::to_string(b.B) + " x " + std::to_string(b.T) +
                          " does not fit the planned " + std::to_string(m.B) + " x " +
                          std::to_string(m.T) + "; call plan() first");
  }
}

template <typename Real>
const Real* LayerStack<Real>::run_forward(const Batch& b, const StackHooks& hooks, int slot,
                                          const Real* input) {
  check_fits(b);
  select(slot);
  if (impl_->weight_pending[static_cast<size_t>(slot)]) {
    throw InvalidArgument("activation slot " + std::to_string(slot) +
                          " is held until its backward_weight; no forward into it before");
  }
  impl_->inputs[static_cast<size_t>(slot)] = input;
  Tracer* tracer = context_.tracer;
  const Real* in = input;
  for (int i = 0; i < size(); ++i) {
    if (hooks.before_forward) hooks.before_forward(i);
    auto scope = tracer ? tracer->scope(TraceTrack::kCompute, impl_->forward_names[i], "forward")
                        : Tracer::Scope(nullptr, TraceTrack::kCompute, {}, nullptr);
    layers_[i]->forward(in, b);
    in = keep_output(i, slot, b);
  }
  return in;
}

template <typename Real>
double LayerStack<Real>::forward(const Batch& b, const StackHooks& hooks, int slot,
                                 const Real* input) {
  run_forward(b, hooks, slot, input);
  if (!b.targets) return 0;
  const Layer<Real>& last = *layers_.back();
  return kernels().sum(losses_of(last), last.output_numel(b.B, b.T)) /
         static_cast<double>(b.B * b.T);
}

template <typename Real>
void LayerStack<Real>::forward_accumulate(const Batch& b, double* loss_sum, double num, double den,
                                          const StackHooks& hooks, int slot, const Real* input) {
  if (!b.targets) throw InvalidArgument("forward_accumulate needs a batch with targets");
  run_forward(b, hooks, slot, input);
  const Layer<Real>& last = *layers_.back();
  kernels().accumulate_mean(loss_sum, losses_of(last), last.output_numel(b.B, b.T),
                            static_cast<double>(b.B * b.T), num, den);
}

template <typename Real>
void LayerStack<Real>::check_split(int slot, bool pending, const char* call) const {
  const Impl& m = *impl_;
  if (!m.split) {
    throw InvalidArgument(std::string(call) + " needs a layer stack planned for the split " +
                          "backward (plan(..., split = true))");
  }
  if (slot < 0 || slot >= m.in_flight) return;  // select() says so
  if (m.weight_pending[static_cast<size_t>(slot)] != (pending ? 1 : 0)) {
    throw InvalidArgument(std::string(call) + " of slot " + std::to_string(slot) +
                          (pending ? ": the slot has no backward_input waiting for it"
                                   : ": the slot's last backward_input still waits for its "
                                     "backward_weight"));
  }
}

template <typename Real>
const Real* LayerStack<Real>::input_of(int i, int slot) const {
  return i > 0 ? output_of(i - 1, slot)
               : static_cast<const Real*>(impl_->inputs[static_cast<size_t>(slot)]);
}

template <typename Real>
const Real* LayerStack<Real>::output_of(int i, int slot) const {
  const Impl& m = *impl_;
  return m.recomputed[i] ? m.slot(slot) + m.offsets[i] : layers_[i]->output();
}

template <typename Real>
const Real* LayerStack<Real>::keep_output(int i, int slot, const Batch& b) {
  Impl& m = *impl_;
  if (!m.recomputed[i]) return layers_[i]->output();
  Real* kept = m.slot(slot) + m.offsets[i];
  kernels().copy(kept, layers_[i]->output(), layers_[i]->output_numel(b.B, b.T));
  return kept;
}

template <typename Real>
void LayerStack<Real>::backward(const Batch& b, const StackHooks& hooks, int slot,
                                const Real* dout, Real* din_stage) {
  check_fits(b);
  select(slot);
  run_backward(b, hooks, slot, dout, din_stage, false);
}

template <typename Real>
void LayerStack<Real>::backward_input(const Batch& b, const StackHooks& hooks, int slot,
                                      const Real* dout, Real* din_stage) {
  check_fits(b);
  check_split(slot, false, "backward_input");
  select(slot);
  run_backward(b, hooks, slot, dout, din_stage, true);
  impl_->weight_pending[static_cast<size_t>(slot)] = 1;
}

template <typename Real>
void LayerStack<Real>::run_backward(const Batch& b, const StackHooks& hooks, int slot,
                                    const Real* dout, Real* din_stage, bool split) {
  Impl& m = *impl_;
  Tracer* tracer = context_.tracer;
  const BoundKernels<Real> k = kernels();
  const std::vector<std::string>& names = split ? m.input_names : m.backward_names;
  Real* scratch = static_cast<Real*>(m.scratch.data());
  Real* dcur = scratch;                // gradient of the current layer's output
  Real* dnext = scratch + m.grad_numel;  // gradient of its input, accumulated by the layer
  Real* layer_scratch = scratch + 2 * m.grad_numel;
  const int last = size() - 1;
  for (int i = last; i >= 0; --i) {
    if (hooks.before_backward) hooks.before_backward(i);
    const Real* in = input_of(i, slot);
    Real* din = i > 0 ? dnext : din_stage;
    const Real* dlayer = i == last ? dout : dcur;
    if (m.recomputed[i]) {  // its activations again, bitwise, in the shared buffer
      auto scope = tracer ? tracer->scope(TraceTrack::kCompute, m.recompute_names[i], "recompute")
                          : Tracer::Scope(nullptr, TraceTrack::kCompute, {}, nullptr);
      layers_[i]->forward(in, b);
    }
    {
      auto scope = tracer ? tracer->scope(TraceTrack::kCompute, names[i], "backward")
                          : Tracer::Scope(nullptr, TraceTrack::kCompute, {}, nullptr);
      if (i > 0) k.fill(din, Real(0), layers_[i - 1]->output_numel(b.B, b.T));
      if (split) {
        layers_[i]->backward_input(in, dlayer, din, layer_scratch, b);
      } else {
        layers_[i]->backward(in, dlayer, din, layer_scratch, b);
      }
    }
    if (!split && hooks.after_backward) hooks.after_backward(i);
    std::swap(dcur, dnext);
  }
}

template <typename Real>
void LayerStack<Real>::backward_weight(const Batch& b, const StackHooks& hooks, int slot) {
  check_fits(b);
  check_split(slot, true, "backward_weight");
  select(slot);
  Impl& m = *impl_;
  Tracer* tracer = context_.tracer;
  Real* layer_scratch = static_cast<Real*>(m.scratch.data()) + 2 * m.grad_numel;
  for (int i = size() - 1; i >= 0; --i) {
    if (hooks.before_backward) hooks.before_backward(i);
    {
      auto scope = tracer ? tracer->scope(TraceTrack::kCompute, m.weight_names[i], "backward")
                          : Tracer::Scope(nullptr, TraceTrack::kCompute, {}, nullptr);
      layers_[i]->backward_weight(input_of(i, slot), layer_scratch, b);
    }
    if (hooks.after_backward) hooks.after_backward(i);
  }
  m.weight_pending[static_cast<size_t>(slot)] = 0;
}

template <typename Real>
const Real* LayerStack<Real>::output(int slot) const {
  select(slot);
  return output_of(size() - 1, slot);
}

template class LayerStack<float>;
template class LayerStack<double>;
template class LayerStack<bf16>;

}  // namespace etr
