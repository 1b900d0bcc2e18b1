// LayerStack: runs an ordered stack of layers, or a contiguous range of them (a pipeline
// stage), over flat buffers (DESIGN.md, "The training engine": the stage seam).
//
//   LayerStack<float> stack(std::move(layers));       // declares the layout
//   stack.share("wte.weight", /*owner=*/0, /*user=*/L + 1);   // tied parameters
//   FlatState state(stack.layout(), alloc); state.add(kParam); state.add(kGrad);
//   stack.bind(state);                                  // layers point into it
//   stack.plan(alloc, B, T, /*in_flight=*/1);          // activations, allocated once
//   double loss = stack.forward(batch, hooks, slot);    // mean loss over B x T
//   stack.backward(batch, hooks, slot);                 // grads +=
//
// Activations: `in_flight` slots, each holding every layer's activations for one
// micro-batch of up to B x T, so a pipeline schedule may run forward of micro-batch
// k + 1 before backward of micro-batch k. activation_bytes(B, T, in_flight) is the
// memory plan() takes, known before the first step.
//
// Hooks: before each layer's forward and backward (a ZeRO-3 gather, a prefetch) and
// after its backward, once nothing in this call writes that layer's gradients again
// (a bucket launch). A parameter shared between layers (GPT-2's tied wte, read by the
// head and owned by the embedding) is declared with share(): its gradient is final only
// after the owner's backward (layers run backward in reverse, so the owner must come
// first), and a pipeline that splits owner and user knows to sum the two.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/exec_context.h"
#include "runtime/flat_state.h"
#include "runtime/layer.h"
#include "runtime/param_layout.h"

namespace etr {

struct StackHooks {
  std::function<void(int layer)> before_forward;
  std::function<void(int layer)> before_backward;
  std::function<void(int layer)> after_backward;  // layer's gradients final in this call
};

// A parameter read by a layer that does not own it.
struct SharedParam {
  std::string name;  // the tensor in the layout
  int owner = 0;     // the layer that declares it
  int user = 0;      // a later layer that reads it and accumulates into its gradient
};

template <typename Real>
class LayerStack {
 public:
  // Declares every layer's tensors into layout() as layers 0..n-1 (forward order).
  explicit LayerStack(std::vector<std::unique_ptr<Layer<Real>>> layers);
  // A pipeline stage (parallel/pipeline_stage.h): `borrowed` tensors, read by a layer of
  // this stage but owned by a layer of another (GPT-2's wte on the last stage), are
  // declared first, as part of layer 0 (so their gradients are final once every layer of
  // the stage has run backward), then the layers as layers 0..n-1. Each borrowed tensor's
  // name, shape and weight decay are the owner's; share() declares its users.
  LayerStack(std::vector<std::unique_ptr<Layer<Real>>> layers,
             const std::vector<TensorEntry>& borrowed);
  ~LayerStack();

  const ParamLayout& layout() const { return layout_; }
  int size() const { return static_cast<int>(layers_.size()); }
  Layer<Real>& layer(int i) { return *layers_.at(i); }
  // Moves the layers out, for a pipeline stage to take its range of them; the stack keeps
  // its layout() and shared(), and must not run afterwards.
  std::vector<std::unique_ptr<Layer<Real>>> release_layers() { return std::move(layers_); }
  const Layer<Real>& layer(int i) const { return *layers_.at(i); }

  // Declares that layer `user` reads tensor `name`, owned by layer `owner` < user.
  // InvalidArgument when there is no such tensor or it is not the owner's.
  void share(const std::string& name, int owner, int user);
  const std::vector<SharedParam>& shared() const { return shared_; }

  // Binds every layer to `state`'s "param" and "grad" (state::kParam, kGrad), which must
  // hold the whole layout. InvalidArgument otherwise.
  void bind(FlatState& state);
  // Binds to plain flat buffers of layout().numel() elements (tests, generation).
  void bind(Real* params, Real* grads);
  void set_context(const ExecContext<Real>& context);
  const ExecContext<Real>& context() const { return context_; }

  // Bytes of activations (every slot) + scratch for micro-batches of B x T (no
  // allocation).
  size_t activation_bytes(int64_t B, int64_t T, int in_flight = 1) const;
  // Allocates activations of `in_flight` slots and the scratch from `alloc` for
  // micro-batches of up to B x T (throws OutOfMemory).
  void plan(Allocator& alloc, int64_t B, int64_t T, int in_flight = 1);
  int in_flight() const;

  // Runs forward of micro-batch `batch` into slot `slot`; with targets returns the mean
  // of the last layer's output (the loss per position) over the batch's B x T positions.
  // `input`: the first layer's input (a pipeline stage's activations from the previous
  // stage; null for the model's first layer), read again by backward of the slot, so it
  // must stay unchanged until then.
  double forward(const Batch& batch, const StackHooks& hooks = {}, int slot = 0,
                 const Real* input = nullptr);
  // Backward of the micro-batch whose forward is in slot `slot` (with the same batch).
  // Parameter gradients accumulate (+=) into the bound gradients. `dout`: the gradient of
  // the last layer's output (from the next pipeline stage; null for a loss layer);
  // `din`: the gradient of the slot's input is added (+=) into it (to send to the previous
  // stage; null when nobody needs it).
  void backward(const Batch& batch, const StackHooks& hooks = {}, int slot = 0,
                const Real* dout = nullptr, Real* din = nullptr);
  // The last layer's output of slot `slot`'s last forward.
  const Real* output(int slot = 0) const;

 private:
  struct Impl;
  void select(int slot) const;  // points the layers at slot `slot`'s activations
  void check_fits(const Batch& batch) const;
  std::vector<std::unique_ptr<Layer<Real>>> layers_;
  ParamLayout layout_;
  std::vector<SharedParam> shared_;
  ExecContext<Real> context_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace etr
