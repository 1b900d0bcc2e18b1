// The CPU's bf16 kernel set: the reference the GPU's bf16 kernels are tested against, and
// what runtime.precision bf16 computes with on the host (its results, not its speed).
//
// Each kernel is the float kernel of its family (runtime/kernels/cpu/<family>.h) on the
// bf16 inputs widened to float, its bf16 outputs rounded to nearest even once at the end:
//
//   assigned bf16 output   out = bf16(float_kernel(float(inputs)))
//   accumulated bf16 (+=)  d = bf16(float(d) + float_kernel's contribution)
//   fp32 (Acc) outputs     the parameter gradients, LayerNorm's mean and rstd, the losses:
//                          the float kernel writes them directly
//
// so a bf16 GPU kernel that computes in fp32 and rounds once differs from it only by its
// summation order and its one rounding: relative L2 error around 2^-8 (the bar
// is 1e-2). Unlike the other kernels these allocate temporary float copies of their
// arguments (a reference, not a fast path), and attention_backward_scratch_size is 0:
// attention's backward takes its float scratch itself.
#pragma once

#include "runtime/dtype.h"
#include "runtime/kernels/dispatch.h"

namespace etr::cpu {

const KernelSet<bf16>& bf16_reference_set();

}  // namespace etr::cpu
