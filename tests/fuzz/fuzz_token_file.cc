// Fuzz target: the token file readers (examples/data/token_file.h, token_file_format.h):
// etr's header and body, llm.c's header, nanoGPT's raw tokens, and the detection.
//
// Input: a mode byte, then the file. Mode bit 0: the target writes the XXH3 of the token
// bytes into the etr header's checksum field first, so that the fuzzer gets past the
// checksum to the token checks; bit 1: open with verify_tokens; bit 2: open without
// verify_checksum and run both checks afterwards; bits 3-4: the format (auto, etr, llmc,
// nanogpt); bits 5-6: the vocabulary given (none, 256, 50257, 1). TokenFile must open the
// file or throw ConfigError / IoError; any other exception, a crash or a sanitizer report
// is a finding. A file it opens must hold exactly offset + 2 * token_count bytes of
// readable tokens, each below vocab_size when the tokens were verified (always, for a
// foreign format with a known vocabulary).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "checkpoint/checksum.h"
#include "examples/data/token_file.h"
#include "runtime/error.h"
#include "tests/fuzz/fuzz_file.h"

namespace data = etr::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static etr::fuzz::MemoryFile memory_file;
  if (size == 0) return 0;
  const uint8_t mode = bytes[0];
  std::vector<uint8_t> file(bytes + 1, bytes + size);
  if ((mode & 1) && file.size() >= data::kTokenFileHeaderBytes) {
    const size_t body = file.size() - data::kTokenFileHeaderBytes;
    const uint64_t sum = etr::Checksum::of(file.data() + data::kTokenFileHeaderBytes, body);
    std::memcpy(file.data() + 32, &sum, sizeof sum);
  }
  constexpr uint32_t kGivenVocab[4] = {0, 256, 50257, 1};
  data::TokenFileOptions options;
  options.verify_tokens = (mode & 2) != 0;
  options.verify_checksum = (mode & 4) == 0;
  options.format = static_cast<data::TokenFileFormat>((mode >> 3) & 3);
  if (const uint32_t v = kGivenVocab[(mode >> 5) & 3]) options.vocab_size = v;
  try {
    data::TokenFile tokens(memory_file.write(file.data(), file.size()), options);
    if (tokens.layout().offset + 2 * tokens.size() != file.size()) std::abort();
    if (tokens.layout().offset % 2 != 0) std::abort();
    const bool foreign = tokens.format() != data::TokenFileFormat::kEtr;
    const bool verified = foreign ? tokens.vocab_size() > 0 : options.verify_tokens;
    uint64_t total = 0;
    for (const uint16_t t : tokens.tokens()) {
      if (verified && t >= tokens.vocab_size()) std::abort();
      total += t;
    }
    if (total > 65535 * tokens.size()) std::abort();
    if (!options.verify_checksum) {
      tokens.verify_tokens();
      tokens.verify_checksum();
    }
  } catch (const etr::ConfigError&) {
  } catch (const etr::IoError&) {
  }
  return 0;
}
