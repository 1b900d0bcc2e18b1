// The names of the flat state buffers of a training job (docs/design.md, "The training
// engine"): spelled here only. A checkpoint stores each by this name, FlatState holds
// them under it, and etr-ckpt reads and exports them by it.
#pragma once

#include <string_view>

namespace etr::state {

inline constexpr std::string_view kParam = "param";   // the model's parameters
inline constexpr std::string_view kGrad = "grad";     // their gradients (never saved)
inline constexpr std::string_view kAdamM = "adam.m";  // AdamW's first moment
inline constexpr std::string_view kAdamV = "adam.v";  // AdamW's second moment
// Mixed precision: the bf16 copy of "param" the layers compute with, rewritten from the
// fp32 master by every optimizer step (never saved: a checkpoint holds the master).
inline constexpr std::string_view kParamBf16 = "param.bf16";

}  // namespace etr::state
