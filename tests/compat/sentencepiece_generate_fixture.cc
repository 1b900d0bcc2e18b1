// etr's side of tests/compat/sentencepiece_compat.py: greedy generation from a checkpoint
// of etr-train, with the tokenizer the checkpoint carries (its tokenizer.model
// attachment), through the function etr-train's sample uses (gpt::generate_tokens).
//
//   sentencepiece_generate_fixture CKPT PROMPT COUNT
//
// prints one JSON object: {"prompt_ids": [...], "ids": [... prompt and COUNT more ...],
// "text": "<the ids decoded>"}.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "examples/data/hf_tokenizer_files.h"
#include "examples/data/subword_tokenizer.h"
#include "examples/gpt/gpt_model.h"
#include "examples/train/gpt_program.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/state_names.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CKPT PROMPT COUNT\n", argv[0]);
    return 2;
  }
  try {
    etr::CheckpointReader reader(argv[1]);
    const etr::ckpt::Manifest& m = reader.manifest();
    const std::string* model_bytes = nullptr;
    for (const auto& a : m.attachments()) {
      if (a.name() == etr::data::kTokenizerModelFile) model_bytes = &a.data();
    }
    if (model_bytes == nullptr) throw etr::CheckpointError("the checkpoint carries no tokenizer");
    const auto tokenizer = etr::data::SubwordTokenizer::from_bytes(*model_bytes, "checkpoint");

    const etr::gpt::GptConfig c = etr::gpt::GptConfig::from(m.config().model());
    etr::HostAllocator alloc;
    etr::gpt::GptModel<float> model(c, alloc);
    reader.read_state(std::string(etr::state::kParam), model.layout(), model.params(), 0,
                      model.layout().numel());
    model.plan(1, c.seq_len);
    const std::vector<uint16_t> prompt = tokenizer.encode(argv[2]);
    const std::vector<uint16_t> ids =
        etr::gpt::generate_tokens(model.stack(), c, prompt, std::stoi(argv[3]), 0, true);
    const nlohmann::json out = {
        {"prompt_ids", prompt}, {"ids", ids}, {"text", tokenizer.decode(ids)}};
    std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sentencepiece_generate_fixture: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
