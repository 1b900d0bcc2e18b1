// Layer: one stage of a model, computing forward and backward over the flat buffers
// (docs/design.md, "Core data layout" and "Execution of one optimizer step").
//
// A model is an ordered stack of layers. Each layer
//   - declares its parameter tensors into the model's ParamLayout (forward order), so its
//     parameters and gradients are one contiguous range of the flat buffers: the unit a
//     gradient bucket is made of, final as soon as the layer's backward returns (its
//     backward_weight, when the backward is split in two halves: see below);
//   - states how much activation memory it keeps from forward to backward, and how much
//     scratch its backward needs, for a micro-batch of B x T, so peak memory is planned
//     from the configuration before a step, never discovered;
//   - computes on views it is given: it allocates nothing;
//   - computes through the execution context its stack gives it (context()): its kernels
//     come from context().kernels, the device dispatch, never from cpu:: directly.
// The template parameter is the compute type: float for training, bf16 for mixed-precision
// training (bf16 activations and parameter copy, with fp32 gradients, LayerNorm statistics
// and losses: Acc = accum_t<Real>, runtime/dtype.h), double for the gradient checks
// against finite differences. Arrays of Acc inside a layer's Real activations are carved
// with ActivationCarver (below), which keeps them aligned.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "runtime/dtype.h"
#include "runtime/exec_context.h"
#include "runtime/grad_sink.h"
#include "runtime/kernels/dispatch.h"
#include "runtime/param_layout.h"

namespace etr {

// One micro-batch as the layers see it.
struct Batch {
  const int32_t* tokens = nullptr;   // [B, T] inputs
  const int32_t* targets = nullptr;  // [B, T] next tokens; nullptr: no loss (generation)
  int64_t B = 0;
  int64_t T = 0;
  // d(training loss) / d(each position's loss): 1 / (tokens in the global batch) for a
  // mean over the global batch; 0 for evaluation (no backward follows).
  double dloss = 0;
};

// Elements of Real that hold n values of T (T is Real or accum_t<Real>): n for float and
// double (T is Real), and for 2-byte Real rounded up to 16 bytes, so that every array
// carved after it starts 16-byte aligned (the GPU's vector loads; fp32 statistics among
// bf16 activations).
template <typename Real, typename T = Real>
constexpr int64_t numel_as(int64_t n) {
  if constexpr (sizeof(Real) >= 4) {
    static_assert(sizeof(T) == sizeof(Real));
    return n;
  } else {
    const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
    return (bytes + 15) / 16 * (16 / static_cast<int64_t>(sizeof(Real)));
  }
}

// Carves a layer's activations, planned in elements of Real, into typed arrays in order:
//   ActivationCarver<Real> c(p);  out = c.take(N * C);  mean = c.take<Acc>(N);
// Each take of n values advances numel_as<Real, T>(n) elements.
template <typename Real>
class ActivationCarver {
 public:
  explicit ActivationCarver(Real* p) : p_(p) {}
  template <typename T = Real>
  T* take(int64_t n) {
    T* r = reinterpret_cast<T*>(p_);
    p_ += numel_as<Real, T>(n);
    return r;
  }

 private:
  Real* p_;
};

template <typename Real>
class Layer {
 public:
  using Acc = accum_t<Real>;
  virtual ~Layer() = default;
  virtual std::string name() const = 0;

  // Adds this layer's tensors to `layout` as layer `index`.
  virtual void declare(ParamLayout& layout, int index) = 0;
  // Points the layer at the flat parameter and gradient buffers (both in `layout`): the
  // parameters it computes with (the bf16 copy under mixed precision) and the gradients
  // (fp32 under mixed precision).
  virtual void bind(const ParamLayout& layout, Real* params, Acc* grads) = 0;

  // Elements of output() for a micro-batch of B x T (the gradient the next layer's backward
  // hands back has as many).
  virtual int64_t output_numel(int64_t B, int64_t T) const = 0;
  // Elements kept from forward to backward for micro-batches of up to B x T, output
  // included.
  virtual int64_t activation_numel(int64_t B, int64_t T) const = 0;
  // Elements of temporary memory backward needs (shared by all layers).
  virtual int64_t scratch_numel(int64_t B, int64_t T) const = 0;
  // Hands the layer activation_numel(B, T) elements for micro-batches of up to B x T.
  virtual void plan(Real* activations, int64_t B, int64_t T) = 0;

  // The last forward's output: [B, T, C], or the loss layer's per-position losses [B, T].
  virtual const Real* output() const = 0;
  // The loss layer's per-position losses [B, T] of the last forward, in Acc; a loss layer
  // whose Acc is not Real (bf16) overrides it. The stack sums the last layer's.
  virtual const Acc* losses() const {
    if constexpr (std::is_same_v<Acc, Real>) {
      return output();
    } else {
      return nullptr;
    }
  }
  // `in` is the previous layer's output (nullptr for the first layer).
  virtual void forward(const Real* in, const Batch& batch) = 0;
  // dout: gradient of the loss with respect to output() (the loss layer ignores it);
  // din: += gradient with respect to `in` (nullptr for the first layer). Parameter
  // gradients are accumulated (+=) into the bound gradient buffer.
  virtual void backward(const Real* in, const Real* dout, Real* din, Real* scratch,
                        const Batch& batch) = 0;

  // Split backward, for zero-bubble pipeline schedules (ZB-H1, Qi et al. 2023): the input
  // half B is on the pipeline's critical path, the weight half W fills its bubbles.
  //
  //   backward_input(in, dout, din, scratch, batch)   B: din += d/d(in), and the cheap
  //       parameter gradients (LayerNorm); keeps in its split storage what W needs (the
  //       gradients of its matrix products' outputs; `dout` itself if W needs it).
  //   backward_weight(in, scratch, batch)              W: the weight (and bias) gradients
  //       of its matrix products, from its activations and its split storage.
  //
  // Protocol: forward, B, then W of the same micro-batch with the same `batch` and `in`;
  // the activations and the split storage must stay unchanged from forward until W
  // returns (LayerStack holds the slot), so W needs no `dout`: whatever it reads of it B
  // copied. B then W accumulates into every gradient bitwise what backward() does, and
  // W's of different micro-batches in the order of their B's give bitwise backward()'s
  // accumulation (each gradient is written by only one of the halves).
  //
  // Storage: split_numel(B, T) elements per micro-batch of up to B x T, handed by
  // plan_split() (pointer arithmetic only, like plan()). A layer that cannot split returns
  // false from supports_split_backward(): its backward_input() is the whole backward()
  // and its backward_weight() does nothing.
  virtual bool supports_split_backward() const { return false; }
  virtual int64_t split_numel(int64_t /*B*/, int64_t /*T*/) const { return 0; }
  virtual void plan_split(Real* /*storage*/, int64_t /*B*/, int64_t /*T*/) {}
  virtual void backward_input(const Real* in, const Real* dout, Real* din, Real* scratch,
                              const Batch& batch) {
    backward(in, dout, din, scratch, batch);
  }
  virtual void backward_weight(const Real* /*in*/, Real* /*scratch*/, const Batch& /*batch*/) {}

  // Activation recomputation (LayerStack's plan(..., recompute = true)): a layer that
  // returns true keeps only a copy of its output from forward to backward (the stack makes
  // it); the rest of its activations live in one buffer shared with the other recomputable
  // layers, and the stack runs its forward again, from the same input, just before its
  // backward. So its forward must be a pure function of `in`, its parameters and `batch`
  // (no randomness, nothing carried over from an earlier call, nothing read that the same
  // call did not write), and its backward must need nothing but what that forward writes:
  // the second forward then writes bitwise the activations of the first.
  virtual bool recomputable() const { return false; }

  // Blocked gradients (runtime/grad_sink.h): a layer whose backward() writes every
  // parameter gradient through grad_sink() when one is set returns true. Only backward()
  // (not the split halves) uses the sink; LayerStack::set_grad_sink sets it.
  virtual bool writes_grads_through_sink() const { return false; }
  void set_grad_sink(GradSink* sink) { sink_ = sink; }
  GradSink* grad_sink() const { return sink_; }

  // Where the layer computes; LayerStack sets it. A layer built alone computes on the CPU.
  void set_context(const ExecContext<Real>& context) { context_ = context; }
  const ExecContext<Real>& context() const { return context_; }

 protected:
  // The kernels of the layer's device, bound to its stream (each call passes it).
  BoundKernels<Real> k() const { return BoundKernels<Real>(*context_.kernels, context_.stream); }

  // A linear layer's dweight [OC, C] and dbias [OC] (either nullptr: not needed) from dout
  // [N, OC] and inp [N, C]: one matmul_backward without a sink (bitwise the three-in-one
  // call's), else through `sink` (grad_sink() in backward(), null in the split halves) in
  // blocks of rows, the bias first (it lies above).
  void linear_param_grads(GradSink* sink, Acc* dweight, Acc* dbias, const Real* dout, const Real* inp,
                          const Real* weight, int64_t N, int64_t C, int64_t OC) const {
    const auto k = this->k();
    if (!sink || (!dweight && !dbias)) {
      k.matmul_backward(static_cast<Real*>(nullptr), dweight, dbias, dout, inp, weight, N, C, OC);
      return;
    }
    if (dbias) {
      sink->rows(dbias, OC, 1, [&](int64_t o0, int64_t o1) {
        k.matmul_backward_rows(static_cast<Acc*>(nullptr), dbias, dout, inp, N, C, OC, o0, o1);
      });
    }
    if (dweight) {
      sink->rows(dweight, OC, C, [&](int64_t o0, int64_t o1) {
        k.matmul_backward_rows(dweight, static_cast<Acc*>(nullptr), dout, inp, N, C, OC, o0, o1);
      });
    }
  }
  // `write()` writes the gradients [begin, end) (Acc elements) at once (a LayerNorm's weight
  // and bias): through `sink` as one row when there is one.
  template <typename Write>
  static void whole_param_grads(GradSink* sink, const Acc* begin, const Acc* end, Write&& write) {
    if (!sink) return write();
    sink->rows(begin, 1, end - begin, [&](int64_t, int64_t) { write(); });
  }

 private:
  GradSink* sink_ = nullptr;
  ExecContext<Real> context_{Device::cpu(), nullptr, nullptr, nullptr,
                             &kernels_for<Real>(Device::cpu())};
};

}  // namespace etr
