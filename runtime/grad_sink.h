// GradSink: where a layer's backward hands its parameter gradients a block at a time, so
// that an engine can reduce each block as soon as it is final (ZeRO-2/3 reducing each
// micro-batch: parallel/zero_engine.h, "blocked gradients").
//
// Without a sink (the default) a layer computes each gradient whole, as it always has.
// With one, the layer wraps every write of a gradient in rows():
//
//   sink->rows(dweight, OC, C, [&](int64_t o0, int64_t o1) {
//     k.matmul_backward_rows(dweight, nullptr, dout, inp, N, C, OC, o0, o1);
//   });
//
// and the sink calls `compute` over disjoint row ranges that cover [0, rows), from the
// last rows to the first, each once, doing its own work (holding the memory a block
// writes, reducing what became final, waiting for reductions) between the calls. A layer
// that writes all its gradients this way says so (Layer::writes_grads_through_sink()) and
// hands them over in decreasing offset order: its own tensors from the highest to the
// lowest, so that everything above the last block handed over is final. A tensor the
// layer reads but another layer owns (the LM head's tied wte) may be handed over at any
// point: the sink reduces it on its own (layer_stack.h, "shared").
//
// `grad` is an address in the gradient buffer the stack is bound to; `rows` x `cols`
// contiguous elements of Acc. A 1-D tensor, or a range of several written together (a
// LayerNorm's weight and bias), is one row.
#pragma once

#include <cstdint>
#include <functional>

namespace etr {

class GradSink {
 public:
  virtual ~GradSink() = default;
  using Compute = std::function<void(int64_t row_begin, int64_t row_end)>;
  virtual void rows(const void* grad, int64_t rows, int64_t cols, const Compute& compute) = 0;
};

}  // namespace etr
