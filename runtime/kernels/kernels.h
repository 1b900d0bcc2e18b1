// The kernels of the example GPT model, and how they are named so that a device dispatch
// can pick the CPU or the CUDA implementation of the same operation.
//
// One kernel family per file pair, e.g. runtime/kernels/cpu/layernorm.{h,cc}; each file
// starts with a comment giving the shape of every buffer (llm.c style). A family offers
//
//   <family>_forward(outputs..., inputs..., sizes...)
//   <family>_backward(input grads..., parameter grads..., dout, saved inputs..., sizes...)
//
// CPU:  namespace etr::cpu, runtime/kernels/cpu/<family>.h, templated on the element type
//       (`Real`, explicitly instantiated for float and double only: double is how the
//       tests check every backward against finite differences). Threaded with OpenMP;
//       matrix products through OpenBLAS. runtime/kernels/cpu/threads.h sets the threads.
// CUDA: namespace etr::cuda, runtime/kernels/cuda/<family>.h: the same function names and
//       arguments (float), device pointers, plus a trailing cudaStream_t on which the
//       kernel is enqueued; each header says where it departs (scratch sizes, what is
//       validated, summation order). Every CUDA kernel is tested against the CPU one
//       (tests/gpu/cuda_k_<family>_test.cc). Behind the dispatch as kernels_for<float> on a
//       CUDA device (runtime/kernels/cuda/kernel_set.h; layers pass their stream).
//
// Families: matmul, layernorm, gelu, attention, encoder, residual, softmax_xent.
//
// Conventions shared by all families:
// - Buffers are dense, row-major, and belong to the caller; a kernel allocates nothing.
//   The one kernel that needs temporary memory (attention_backward) takes it as an
//   argument and says how much it needs, so that peak memory is planned, not discovered.
// - Forward outputs are assigned (=).
// - Every gradient is ACCUMULATED (+=), of parameters and of inputs alike: parameter
//   gradients sum over the micro-batches of a gradient accumulation, and input gradients
//   sum over the branches that read an activation (the residual stream, the tied token
//   embedding). The caller zeroes parameter gradients at the start of an optimizer step
//   and activation gradients at the start of each backward. The one exception is the
//   fused softmax_xent_forward_backward, whose dlogits is ASSIGNED (it is the first
//   gradient of the backward, and it may overwrite the logits in place).
// - Gradient pointers may be nullptr where the gradient is not wanted (matmul's dinp
//   under the first layer, a bias that does not exist, matmul's dweight in the input half
//   of a split backward, runtime/layer.h); each header says which. Leaving one out never
//   changes the others.
// - Sizes are int64_t; a size of 0 does nothing. Arguments that would index out of range
//   (a token id >= V, a target >= V, C not divisible by NH) throw etr::InvalidArgument
//   before any thread starts; buffers are trusted to have the stated shapes.
// - Outputs must not overlap inputs unless a header says they may.
#pragma once

#include "runtime/kernels/cpu/attention.h"
#include "runtime/kernels/cpu/encoder.h"
#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/kernels/cpu/matmul.h"
#include "runtime/kernels/cpu/residual.h"
#include "runtime/kernels/cpu/softmax_xent.h"
#include "runtime/kernels/cpu/threads.h"
