#include "examples/gpt/gpt_config.h"

#include <sstream>

#include "runtime/error.h"

namespace etr::gpt {

int64_t GptConfig::num_parameters() const {
  const int64_t C = d_model;
  const int64_t per_block = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C +
                            (C * 4 * C + 4 * C) + (4 * C * C + C);
  return vocab_size * C + seq_len * C + n_layer * per_block + 2 * C;
}

double GptConfig::flops_per_token(int64_t T) const {
  // 6 FLOPs per parameter per token (2 forward, 4 backward) plus attention's
  // QK^T and att.V: 12 n_layer C T (counting the full T x T, as PaLM does).
  return 6.0 * static_cast<double>(num_parameters()) +
         12.0 * static_cast<double>(n_layer * d_model * T);
}

void GptConfig::validate() const {
  auto fail = [](const std::string& s) { throw ConfigError(s); };
  if (n_layer < 1) fail("model.n_layer must be at least 1");
  if (n_head < 1) fail("model.n_head must be at least 1");
  if (d_model < 1) fail("model.d_model must be at least 1");
  if (d_model % n_head != 0) {
    fail("model.d_model (" + std::to_string(d_model) + ") must be a multiple of model.n_head (" +
         std::to_string(n_head) + ")");
  }
  if (seq_len < 1) fail("model.seq_len must be at least 1");
  if (vocab_size < 2) fail("model.vocab_size must be at least 2");
}

std::string GptConfig::str() const {
  std::ostringstream s;
  s << "GPT-2 n_layer=" << n_layer << " n_head=" << n_head << " d_model=" << d_model
    << " seq_len=" << seq_len << " vocab=" << vocab_size << " (" << num_parameters()
    << " parameters)";
  return s.str();
}

GptConfig GptConfig::from(const config::ModelConfig& model) {
  GptConfig g;
  g.n_layer = model.n_layer();
  g.n_head = model.n_head();
  g.d_model = model.d_model();
  g.seq_len = model.seq_len();
  g.vocab_size = model.vocab_size();
  g.validate();
  return g;
}

}  // namespace etr::gpt
