// hf_import_check CKPT FILE: loads FILE (Hugging Face GPT-2 safetensors, as etr-ckpt export
// writes it) with import_hf into a GPT-2 built from CKPT's saved configuration, and checks
// that every parameter equals, bit for bit, the "param" state CKPT holds. Exit 0 when they
// match; 1 with a sentence naming the first differing tensor otherwise.
#include <cstdio>
#include <cstring>
#include <exception>

#include "checkpoint/checkpoint_reader.h"
#include "examples/gpt/hf_weights.h"
#include "runtime/host_allocator.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: hf_import_check CKPT FILE\n");
    return 2;
  }
  try {
    etr::CheckpointReader reader(argv[1]);
    const auto c = etr::gpt::GptConfig::from(reader.manifest().config().model());
    etr::HostAllocator alloc;
    etr::gpt::GptModel<float> saved(c, alloc), loaded(c, alloc);
    reader.read_state("param", saved.layout(), saved.params(), 0, saved.layout().numel());
    etr::gpt::import_hf(loaded, argv[2]);
    for (const etr::TensorEntry& e : saved.layout().entries()) {
      if (std::memcmp(saved.params() + e.offset, loaded.params() + e.offset,
                      static_cast<size_t>(e.numel()) * sizeof(float)) != 0) {
        std::fprintf(stderr, "hf_import_check: tensor %s of %s differs from %s\n", e.name.c_str(),
                     argv[2], argv[1]);
        return 1;
      }
    }
    std::printf("hf_import_check: %s loads and equals the parameters of %s (%zu tensors)\n",
                argv[2], argv[1], saved.layout().entries().size());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hf_import_check: %s\n", e.what());
    return 1;
  }
  return 0;
}
