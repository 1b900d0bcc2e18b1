// GPT-2 weights in and out in Hugging Face's layout (docs/gpt2_weights.md is the
// contract): names prefixed "transformer.", the four Conv1D weights of each block
// transposed to [in, out], the tied lm_head omitted, F32.
//
//   export_hf(model, "out/gpt")   writes out/gpt/model.safetensors + out/gpt/config.json,
//                                 a directory GPT2LMHeadModel.from_pretrained loads
//   write_hf_safetensors(model, f)  just the weights, to the file f (etr-ckpt export)
//   import_hf(model, path)        path: a .safetensors file, or a directory holding
//                                 model.safetensors; accepts names with or without the
//                                 "transformer." prefix
#pragma once

#include <filesystem>

#include "examples/gpt/gpt_model.h"

namespace etr::gpt {

void export_hf(const GptModel<float>& model, const std::filesystem::path& dir);

// Only the weights file of export_hf, at `file` (durably; the directory must exist).
// The same parameters give the same bytes.
void write_hf_safetensors(const GptModel<float>& model, const std::filesystem::path& file);

// Overwrites every parameter; throws IoError naming the tensor for a missing, unknown,
// ambiguous or mis-shaped tensor, or an lm_head that is not tied to wte.
void import_hf(GptModel<float>& model, const std::filesystem::path& path);

}  // namespace etr::gpt
