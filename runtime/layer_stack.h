// LayerStack: runs an ordered stack of layers, or a contiguous range of them (a pipeline
// stage), over flat buffers (docs/design.md, "The training engine": the stage seam).
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
// Split backward (zero-bubble schedules, ZB-H1; Layer's "Split backward"): a stack
// planned with split = true may run a slot's backward in two halves,
//   stack.backward_input(batch, hooks, slot, dout, din);  // B: din, critical path
//   ...                                                   // other micro-batches
//   stack.backward_weight(batch, hooks, slot);            // W: the weight gradients
// (plan(alloc, B, T, in_flight, /*split=*/true); activation_bytes(..., true) says how
// much). Each slot then also holds every layer's split storage (split_numel). A slot's
// activations, split storage and stage input are held from its forward until its
// backward_weight returns: no forward or backward_input into the slot in between. B then
// W equals backward() bitwise, and so do the B's of several slots followed by their W's
// in the same micro-batch order (W's in the order of their B's).
//
// Activation recomputation ("activation checkpointing"): planned with recompute = true
// (plan(alloc, B, T, in_flight, /*split=*/false, /*recompute=*/true)), each layer that
// says recomputable() (a transformer block) keeps in each slot only a copy of its output,
// output_numel(B, T) elements: the next layer's input, and its own backward's. Its other
// activations live in ONE buffer shared by every recomputable layer and every slot (the
// largest of their activation_numel(B, T)). Forward runs the layer with its activations
// in the shared buffer and copies its output into the slot; backward of the layer first
// runs its forward again from the input kept in the slot (after hooks.before_backward,
// so the layer's parameters are there), then its backward as usual. Other layers
// (embedding, head) keep all their activations in the slot as before. A recomputable
// layer's forward is a pure function of its input, parameters and batch, so the second
// run writes bitwise the activations of the first, and losses and gradients are bitwise
// those of the stack planned without recomputation. Cost: one extra forward per block
// per micro-batch (about a third more compute); saving: per slot, each block's
// activations but its output, less one shared buffer. activation_bytes(B, T, in_flight,
// false, true) says exactly how much plan() then takes. Recomputation with the split
// backward is refused (InvalidArgument) for now: W would need the activations again.
//
// Hooks: before each layer's forward and backward (a ZeRO-3 gather, a prefetch) and
// after its backward, once nothing in this call writes that layer's gradients again
// (a bucket launch). Split: before_backward before each layer's B and again before its W;
// after_backward after its W only (B leaves the matmul weight gradients to W). A parameter
// shared between layers (GPT-2's tied wte, read by the head and owned by the embedding) is
// declared with share(): its gradient is final only after the owner's backward (layers
// run backward in reverse, so the owner must come first), and a pipeline that splits
// owner and user knows to sum the two.
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

  using Acc = accum_t<Real>;
  // Binds every layer to `state`'s "param" and "grad" (state::kParam, kGrad), which must
  // hold the whole layout; a bf16 stack (mixed precision) to "param.bf16"
  // (state::kParamBf16, the copy it computes with) and the f32 "grad". InvalidArgument
  // otherwise.
  void bind(FlatState& state);
  // Binds to plain flat buffers of layout().numel() elements (tests, generation).
  void bind(Real* params, Acc* grads);
  void set_context(const ExecContext<Real>& context);
  // Hands every layer `sink` (nullptr: none) for its backward()'s parameter gradients
  // (runtime/grad_sink.h). grads_through_sink(): every layer writes them through it.
  void set_grad_sink(GradSink* sink);
  bool grads_through_sink() const;
  const ExecContext<Real>& context() const { return context_; }

  // Bytes of activations (every slot, with the layers' split storage when `split`, only
  // the recomputable layers' outputs and the shared buffer when `recompute`) + scratch
  // for micro-batches of B x T (no allocation): exactly what plan() with the same
  // arguments takes. InvalidArgument for split and recompute together.
  size_t activation_bytes(int64_t B, int64_t T, int in_flight = 1, bool split = false,
                          bool recompute = false) const;
  // Allocates activations of `in_flight` slots and the scratch from `alloc` for
  // micro-batches of up to B x T (throws OutOfMemory); with `split` each slot also holds
  // every layer's split storage, for backward_input() / backward_weight(); with
  // `recompute` the recomputable layers' activations are recomputed in backward (see
  // above). InvalidArgument for split and recompute together.
  void plan(Allocator& alloc, int64_t B, int64_t T, int in_flight = 1, bool split = false,
            bool recompute = false);
  // Gives the activations and the scratch back to their allocator: the stack is unplanned
  // (in_flight() 0) and runs again after the next plan(). Nothing else changes.
  void release();
  int in_flight() const;
  // Where the plan put the activations and the scratch (null when unplanned): what a
  // captured CUDA graph of the stack's work depends on besides its batch.
  const void* activations_data() const;
  const void* scratch_data() const;
  bool split() const;      // planned for the split backward
  bool recompute() const;  // planned with activation recomputation

  // Runs forward of micro-batch `batch` into slot `slot`; with targets returns the mean
  // of the last layer's output (the loss per position) over the batch's B x T positions.
  // `input`: the first layer's input (a pipeline stage's activations from the previous
  // stage; null for the model's first layer), read again by backward of the slot, so it
  // must stay unchanged until then.
  double forward(const Batch& batch, const StackHooks& hooks = {}, int slot = 0,
                 const Real* input = nullptr);
  // forward() of a batch with targets (the whole model, or a pipeline's last stage with
  // its `input`) without reading its loss on the host: *loss_sum += the mean loss x num /
  // den, where loss_sum is in the memory of the stack's device (a device double on a GPU),
  // so a training step reads it once. On the host the sum is forward()'s, bitwise:
  // *loss_sum += forward(batch) * num / den.
  void forward_accumulate(const Batch& batch, double* loss_sum, double num, double den,
                          const StackHooks& hooks = {}, int slot = 0, const Real* input = nullptr);
  // Backward of the micro-batch whose forward is in slot `slot` (with the same batch).
  // Parameter gradients accumulate (+=) into the bound gradients. `dout`: the gradient of
  // the last layer's output (from the next pipeline stage; null for a loss layer);
  // `din`: the gradient of the slot's input is added (+=) into it (to send to the previous
  // stage; null when nobody needs it).
  void backward(const Batch& batch, const StackHooks& hooks = {}, int slot = 0,
                const Real* dout = nullptr, Real* din = nullptr);
  // The split backward's first half B of slot `slot`: as backward() (same arguments;
  // `din` is complete when it returns), hooks.before_backward(i) before each layer i, but
  // every matmul weight gradient is left to backward_weight() and hooks.after_backward is
  // not called. `dout` is read during this call only (what W needs of it the layers keep
  // in their split storage). InvalidArgument unless planned with split, or if the slot's
  // previous B still waits for its W.
  void backward_input(const Batch& batch, const StackHooks& hooks = {}, int slot = 0,
                      const Real* dout = nullptr, Real* din = nullptr);
  // The second half W of slot `slot` (the same batch as its B): layers n-1..0, each
  // hooks.before_backward(i), the layer's W, hooks.after_backward(i) (layer i's gradients
  // of this micro-batch are final then). Frees the slot for the next forward.
  // InvalidArgument unless planned with split and the slot's B has run.
  void backward_weight(const Batch& batch, const StackHooks& hooks = {}, int slot = 0);
  // The last layer's output of slot `slot`'s last forward.
  const Real* output(int slot = 0) const;

 private:
  struct Impl;
  void select(int slot) const;  // points the layers at slot `slot`'s activations
  // The context's kernels bound to its stream.
  BoundKernels<Real> kernels() const {
    return BoundKernels<Real>(*context_.kernels, context_.stream);
  }
  void check_fits(const Batch& batch) const;
  // The layers' forward into slot `slot`; returns the last layer's output.
  const Real* run_forward(const Batch& batch, const StackHooks& hooks, int slot, const Real* input);
  // Throws unless planned with split and slot `slot`'s W is (`pending`) or is not waiting.
  void check_split(int slot, bool pending, const char* call) const;
  // Layer i's input in slot `slot` (the previous layer's output, or the stage input).
  const Real* input_of(int i, int slot) const;
  // Layer i's output in slot `slot`: the slot's copy for a recomputed layer.
  const Real* output_of(int i, int slot) const;
  // After layer i's forward into slot `slot`: a recomputed layer's output copied into the
  // slot. Returns output_of(i, slot).
  const Real* keep_output(int i, int slot, const Batch& batch);
  // backward() (split false) or backward_input() (split true), once checked.
  void run_backward(const Batch& batch, const StackHooks& hooks, int slot, const Real* dout,
                    Real* din, bool split);
  std::vector<std::unique_ptr<Layer<Real>>> layers_;
  ParamLayout layout_;
  std::vector<SharedParam> shared_;
  ExecContext<Real> context_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace etr
