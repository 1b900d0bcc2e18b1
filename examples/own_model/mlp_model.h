// A small language model that is not GPT-2, written against etr's layer interface
// (runtime/layer.h) and kernels (through this->k(), runtime/kernels/dispatch.h):
//
//   layer 0        Embedding   wte [V, C], wpe [T, C]            out = wte[token] + wpe[t]
//   layers 1..L    MlpBlock    ln [C], fc [H, C] + [H], proj [C, H] + [C], H = 2C
//                              out = x + proj(gelu(fc(layernorm(x))))   (no attention)
//   layer L+1      Head        out [V, C] + [V] (its own, untied)   per-position
//                              softmax cross-entropy
//
// Every gradient accumulates (+=), as etr's kernels do; a layer allocates nothing and
// says how much activation and scratch memory it needs, so the stack plans it.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/layer_stack.h"

namespace own {

struct MlpConfig {
  int64_t vocab = 256;   // V
  int64_t width = 64;    // C
  int64_t blocks = 2;    // L
  int64_t seq_len = 64;  // T
};

// The stack of layers above (etr declares their tensors into one flat layout).
std::unique_ptr<etr::LayerStack<float>> build_mlp_stack(const MlpConfig& config);

// Weights N(0, 0.02), biases 0, LayerNorm weights 1; deterministic in `seed`.
void init_mlp(const etr::ParamLayout& layout, float* params, uint64_t seed);

// Parameters of the model (for the FLOPs estimate: 6 per parameter per token).
int64_t mlp_parameters(const MlpConfig& config);

}  // namespace own
