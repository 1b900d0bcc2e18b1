// GPT-2's model presets (model.preset): the sizes etr-train, etr-bench and the tests name
// instead of listing n_layer, n_head, d_model, seq_len and vocab_size. The library's
// config has no sizes of its own; a program hands its table to resolve():
//
//   resolve(config, gpt::model_presets());
//
//   tiny        2 layers,  2 heads,   64 wide, context   64, vocabulary   256
//   small       4 layers,  4 heads,  256 wide, context  128, vocabulary   256
//   medium-cpu  6 layers,  6 heads,  384 wide, context  256, vocabulary   256
//   gpt2-124m  12 layers, 12 heads,  768 wide, context 1024, vocabulary 50257 (GPT-2 small)
//   gpt2-350m, gpt2-774m, gpt2-1558m: GPT-2 medium, large, XL
#pragma once

#include <span>
#include <string_view>

#include "runtime/config/train_config.h"

namespace etr::gpt {

std::span<const ModelPreset> model_presets();

// The preset called `name`, or nullptr.
const ModelPreset* find_model_preset(std::string_view name);

}  // namespace etr::gpt
