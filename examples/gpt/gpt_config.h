// GptConfig: the shape of a GPT-2 model (the example model every parallel mode trains).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/config/etr_config.pb.h"

namespace etr::gpt {

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
  // Throws ConfigError naming the first impossible value.
  void validate() const;
  std::string str() const;

  // The sizes of a resolved config's model section (etr-train and etr-ckpt build the
  // model from it); validated.
  static GptConfig from(const config::ModelConfig& model);
};

}  // namespace etr::gpt
