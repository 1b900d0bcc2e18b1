// Writes what tests/compat/gpt2_logits_compat.py compares against transformers: a GPT-2
// exported by etr (model.safetensors + config.json, examples/gpt/hf_weights.h), the
// tokens it was run on, and etr's logits for them.
//
//   gpt2_logits_fixture OUT_DIR
//   OUT_DIR/model/          the export, loadable by GPT2LMHeadModel.from_pretrained
//   OUT_DIR/tokens.bin      int32 [B, T]
//   OUT_DIR/logits.bin      f32 [B, T, V]  (V columns; etr's vocabulary padding dropped)
//   OUT_DIR/logits_bf16.bin f32 [B, T, V]  the same model in mixed precision (runtime.precision
//                           bf16: the bf16 stack on the CPU's bf16 kernels, parameters rounded)
//   OUT_DIR/shape.txt       "B T V"
#include <cstdio>
#include <fstream>
#include <random>
#include <vector>

#include "examples/gpt/gpt_model.h"
#include "examples/gpt/head_layer.h"
#include "examples/gpt/hf_weights.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"

// The logits [B, T, V] of `model`'s parameters rounded to bf16, run by the bf16 stack.
std::vector<float> bf16_logits(etr::gpt::GptModel<float>& model, const std::vector<int32_t>& tokens,
                               int64_t B, int64_t T) {
  const etr::gpt::GptConfig& c = model.config();
  auto stack = etr::gpt::build_stack<etr::bf16>(c);
  const int64_t n = stack->layout().numel();
  std::vector<etr::bf16> params(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) params[i] = etr::bf16(model.params()[i]);
  std::vector<float> grads(static_cast<size_t>(n), 0.f);
  stack->bind(params.data(), grads.data());
  etr::HostAllocator alloc;
  stack->plan(alloc, B, T);
  stack->forward(etr::Batch{tokens.data(), nullptr, B, T, 0});
  const auto& head = dynamic_cast<const etr::gpt::HeadLayer<etr::bf16>&>(stack->layer(stack->size() - 1));
  std::vector<float> out(static_cast<size_t>(B * T * c.vocab_size));
  for (int64_t r = 0; r < B * T; ++r) {
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      out[r * c.vocab_size + v] = static_cast<float>(head.logits()[r * c.padded_vocab() + v]);
    }
  }
  stack->release();
  return out;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path out = argv[1];
    etr::gpt::GptConfig c;
    c.n_layer = 2;
    c.n_head = 4;
    c.d_model = 64;
    c.seq_len = 32;
    c.vocab_size = 256;
    etr::HostAllocator alloc;
    etr::gpt::GptModel<float> model(c, alloc);
    model.init(2024);
    // Perturb every parameter, biases and LayerNorms included, so none of them is 0 or 1
    // and a mapping mistake in any tensor shows in the logits.
    std::mt19937_64 rng(7);
    std::normal_distribution<float> noise(0.f, 0.05f);
    for (const etr::TensorEntry& e : model.layout().entries()) {
      const int64_t n = e.name == "wte.weight" ? c.vocab_size * c.d_model : e.numel();
      for (int64_t i = 0; i < n; ++i) model.params()[e.offset + i] += noise(rng);
    }
    const int64_t B = 2, T = 32;
    std::vector<int32_t> tokens(B * T);
    std::uniform_int_distribution<int32_t> tok(0, 255);
    for (auto& t : tokens) t = tok(rng);
    model.plan(B, T);
    model.forward(etr::Batch{tokens.data(), nullptr, B, T, 0});
    std::vector<float> logits(B * T * c.vocab_size);
    for (int64_t r = 0; r < B * T; ++r) {
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        logits[r * c.vocab_size + v] = model.logits()[r * c.padded_vocab() + v];
      }
    }
    const std::vector<float> logits16 = bf16_logits(model, tokens, B, T);
    std::ofstream(out / "logits_bf16.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(logits16.data()), logits16.size() * 4);
    etr::gpt::export_hf(model, out / "model");
    std::ofstream(out / "tokens.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 4);
    std::ofstream(out / "logits.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(logits.data()), logits.size() * 4);
    std::ofstream(out / "shape.txt") << B << " " << T << " " << c.vocab_size << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2_logits_fixture: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
