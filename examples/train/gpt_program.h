// The example GPT-2 as a program for etr's training loop (parallel/train_session.h): the
// model factory (GPT-2's layers from examples/gpt, its initialisation or Hugging Face
// weights), the data (examples/data/token_data_source.h), and the callbacks at the end of
// a run (a generated sample, an export of the weights). etr-train is this plus
// run_training_program (parallel/program.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "examples/gpt/gpt_config.h"
#include "examples/train/training_tokenizer.h"
#include "parallel/program.h"
#include "parallel/train_session.h"
#include "runtime/layer_stack.h"

namespace etr::gpt {

// What the user's config gave before a preset completed it: model.vocab_size set in the
// file, the environment or --set is the vocabulary of an llm.c or nanoGPT token file
// (which record none of their own); a preset's is not. training_program_info's
// complete_config writes it, training_program's data reads it: pass both the same one.
struct GivenSizes {
  std::optional<uint32_t> vocab_size;
};

// Without `given`, a foreign token file's vocabulary is its default (llm.c: GPT-2's;
// nanoGPT: none, refused).
TrainProgram training_program(std::shared_ptr<const GivenSizes> given = nullptr);
ProgramInfo training_program_info(std::shared_ptr<GivenSizes> given = nullptr);

// Continues `tokens` by `count` tokens with the GPT-2 in `stack`: sampling at temperature
// 1 with `seed`, or (greedy) always the most likely token, the first of equals. Needs
// activations planned for at least 1 x seq_len. Returns prompt and continuation.
std::vector<uint16_t> generate_tokens(LayerStack<float>& stack, const GptConfig& config,
                                      std::vector<uint16_t> tokens, int count, uint64_t seed,
                                      bool greedy = false);

// Continues `prompt` (encoded with `tokenizer`; "" = a newline) by `tokens` sampled tokens
// and returns the whole text decoded for display.
std::string generate(LayerStack<float>& stack, const GptConfig& config,
                     const TrainingTokenizer& tokenizer, const std::string& prompt, int tokens,
                     uint64_t seed);

}  // namespace etr::gpt
