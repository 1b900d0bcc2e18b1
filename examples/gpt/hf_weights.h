// GPT-2 weights in and out in Hugging Face's layout (docs/gpt2_weights.md is the
// contract): names prefixed "transformer.", the four Conv1D weights of each block
// transposed to [in, out], the tied lm_head omitted, F32.
//
//   export_hf(config, layout, params, "out/gpt")  (or export_hf(model, ...)) writes out/gpt/model.safetensors + out/gpt/config.json,
//                                 a directory GPT2LMHeadModel.from_pretrained loads
//   write_hf_safetensors(model, f)  just the weights, to the file f (etr-ckpt export)
//   import_hf(model, path)        path: a .safetensors file, or a directory holding
//                                 model.safetensors; accepts names with or without the
//                                 "transformer." prefix
#pragma once

#include <filesystem>

#include "examples/gpt/gpt_model.h"

namespace etr::gpt {

// The weights `params` (in `layout`, the GPT-2 of `config`) as a Hugging Face directory.
void export_hf(const GptConfig& config, const ParamLayout& layout, const float* params,
               const std::filesystem::path& dir);

// Only the weights file of export_hf, at `file` (durably; the directory must exist).
// The same parameters give the same bytes.
void write_hf_safetensors(const GptConfig& config, const ParamLayout& layout,
                          const float* params, const std::filesystem::path& file);

// Overwrites every parameter; throws IoError naming the tensor for a missing, unknown,
// ambiguous or mis-shaped tensor, or an lm_head that is not tied to wte.
void import_hf(const GptConfig& config, const ParamLayout& layout, float* params,
               const std::filesystem::path& path);

inline void export_hf(const GptModel<float>& model, const std::filesystem::path& dir) {
  export_hf(model.config(), model.layout(), model.params(), dir);
}
inline void write_hf_safetensors(const GptModel<float>& model, const std::filesystem::path& file) {
  write_hf_safetensors(model.config(), model.layout(), model.params(), file);
}
inline void import_hf(GptModel<float>& model, const std::filesystem::path& path) {
  import_hf(model.config(), model.layout(), model.params(), path);
}

}  // namespace etr::gpt
