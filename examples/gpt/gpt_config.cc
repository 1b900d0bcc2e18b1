#include "examples/gpt/gpt_config.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/attention.h"
#include "runtime/param_layout.h"

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

double GptConfig::layout_numel() const {
  const double align = static_cast<double>(ParamLayout::kAlignElements);
  auto aligned = [align](double n) { return std::ceil(n / align) * align; };
  const double C = static_cast<double>(d_model);
  // The tensors of one block, as TransformerBlock::declare adds them.
  const double block = 4 * aligned(C) + aligned(3 * C * C) + aligned(3 * C) + aligned(C * C) +
                       aligned(C) + aligned(4 * C * C) + aligned(4 * C) + aligned(4 * C * C) +
                       aligned(C);
  // wte (padded rows), wpe, the blocks, ln_f weight and bias (the last is not rounded up).
  return aligned(static_cast<double>(padded_vocab()) * C) +
         aligned(static_cast<double>(seq_len) * C) + static_cast<double>(n_layer) * block +
         aligned(C) + C;
}

GptConfig::Memory GptConfig::training_memory(int64_t micro_batch, int threads) const {
  const double B = static_cast<double>(micro_batch), T = static_cast<double>(seq_len);
  const double N = B * T, C = static_cast<double>(d_model);
  const double H = static_cast<double>(n_head), L = static_cast<double>(n_layer);
  // The layers' activation_numel (embedding, blocks, head) and the largest scratch_numel
  // (a block's, or the head's for a model without blocks) plus two [B, T, C] buffers.
  const double acts = N * C + L * (16 * N * C + 4 * N + B * H * T * T) + N * C + 3 * N +
                      N * static_cast<double>(padded_vocab());
  const double rows = std::min(T, static_cast<double>(cpu::kAttentionRows));
  const double block_scratch = 15 * N * C + std::max(1, threads) * rows * T;
  const double scratch = std::max(n_layer > 0 ? block_scratch : 0.0, N * C) + 2 * N * C;
  return Memory{4 * layout_numel() * sizeof(float), (acts + scratch) * sizeof(float)};
}

void GptConfig::require_fits(int64_t micro_batch, int threads, double budget,
                             double state_share) const {
  Memory m = training_memory(micro_batch, threads);
  m.state *= state_share;
  const std::string limit =
      ", more than the " + format_bytes(budget) +
      " host memory budget (runtime.memory_budget, ETR_HOST_MEMORY_BUDGET or the memory "
      "available); ";
  if (m.state > budget) {
    throw ConfigError("the model (model.n_layer = " + std::to_string(n_layer) +
                      ", model.d_model = " + std::to_string(d_model) +
                      ", model.seq_len = " + std::to_string(seq_len) +
                      ", model.vocab_size = " + std::to_string(vocab_size) + ") needs " +
                      format_bytes(m.state) + " for parameters, gradients and AdamW state" +
                      (state_share < 1 ? " (its share under parallel.zero_stage)" : "") + limit +
                      "make the model smaller or raise runtime.memory_budget.");
  }
  if (micro_batch > 0 && m.state + m.activations > budget) {
    throw ConfigError("batch.micro_batch = " + std::to_string(micro_batch) +
                      " with model.seq_len = " + std::to_string(seq_len) + " needs " +
                      format_bytes(m.activations) + " of activations on top of " +
                      format_bytes(m.state) + " of model state" + limit +
                      "lower batch.micro_batch or raise runtime.memory_budget.");
  }
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
