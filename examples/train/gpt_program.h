// The example GPT-2 as a program for etr's training loop (parallel/train_session.h): the
// model factory (GPT-2's layers from examples/gpt, its initialisation or Hugging Face
// weights), the data (examples/data/token_data_source.h), and the callbacks at the end of
// a run (a generated sample, an export of the weights). etr-train is this plus
// run_training_program (parallel/program.h).
#pragma once

#include <cstdint>
#include <string>

#include "examples/gpt/gpt_config.h"
#include "parallel/program.h"
#include "parallel/train_session.h"
#include "runtime/layer_stack.h"

namespace etr::gpt {

TrainProgram training_program();
ProgramInfo training_program_info();

// Continues `prompt` (bytes) by `tokens` byte tokens with the GPT-2 in `stack`, sampling
// at temperature 1 with `seed`. Needs activations planned for at least 1 x seq_len.
std::string generate(LayerStack<float>& stack, const GptConfig& config, const std::string& prompt,
                     int tokens, uint64_t seed);

}  // namespace etr::gpt
