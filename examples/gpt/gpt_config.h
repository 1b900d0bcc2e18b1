// GptConfig: the shape of a GPT-2 model (the example model every parallel mode trains).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/etr_config.pb.h"

namespace etr::gpt {

// GPT-2's LayerNorm epsilon (Hugging Face's layer_norm_epsilon).
inline constexpr double kLayerNormEps = 1e-5;

struct GptConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t d_model = 256;   // C
  int64_t seq_len = 128;   // maximum T (rows of the position embedding)
  int64_t vocab_size = 256;  // V

  // The LM head's rows are padded to a multiple of 64 (llm.c's Vp): the product runs on
  // aligned rows; the padding rows are never read as logits.
  int64_t padded_vocab() const { return (vocab_size + 63) / 64 * 64; }
  // Parameters that train (tensors only, no padding rows of the vocabulary).
  int64_t num_parameters() const;
  // Forward + backward FLOPs per token (6 N plus attention, as in PaLM's appendix B).
  double flops_per_token(int64_t T) const;
  // Elements of the model's flat parameter buffer (ParamLayout::numel(): padded vocabulary
  // rows, every tensor but the last rounded up to ParamLayout::kAlignElements), in double
  // so that no size overflows.
  double layout_numel() const;
  // Bytes training holds (float): `state` = parameters, gradients and AdamW's m and v
  // (4 x layout_numel()); `activations` = what GptModel::plan(micro_batch, seq_len)
  // allocates with `threads` threads (activations plus the backward's scratch). Computed
  // in double before anything is allocated: any model size gives a finite figure.
  struct Memory {
    double state = 0;
    double activations = 0;
  };
  Memory training_memory(int64_t micro_batch, int threads) const;
  // Throws ConfigError, one sentence naming the config fields and the budget, when
  // training_memory(micro_batch, threads) is more than `budget` bytes (micro_batch 0: the
  // state alone; the batch policy fits the activations). `state_share`: the
  // part of the 16 Psi of state one rank keeps (ZeRO: EngineMemory's analytic / 16 Psi).
  void require_fits(int64_t micro_batch, int threads, double budget,
                    double state_share = 1.0) const;
  // Throws ConfigError naming the first impossible value.
  void validate() const;
  std::string str() const;

  // The sizes of a resolved config's model section (etr-train and etr-ckpt build the
  // model from it); validated.
  static GptConfig from(const config::ModelConfig& model);
};

}  // namespace etr::gpt
