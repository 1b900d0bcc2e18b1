// Fuzz target: the token file reader (examples/data/token_file.h), header and body.
//
// Input: a mode byte, then the file. Mode bit 0: the target writes the XXH3 of the token
// bytes into the header's checksum field first, so that the fuzzer gets past the checksum
// to the token checks; bit 1: open with verify_tokens; bit 2: open without
// verify_checksum and run both checks afterwards. TokenFile must open the file or throw
// ConfigError / IoError; any other exception, a crash or a sanitizer report is a finding.
// A file it opens must hold exactly header + 2 * token_count bytes of readable tokens,
// each below vocab_size when the tokens were verified.
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
  data::TokenFileOptions options;
  options.verify_tokens = (mode & 2) != 0;
  options.verify_checksum = (mode & 4) == 0;
  try {
    data::TokenFile tokens(memory_file.write(file.data(), file.size()), options);
    if (data::kTokenFileHeaderBytes + 2 * tokens.size() != file.size()) std::abort();
    uint64_t total = 0;
    for (const uint16_t t : tokens.tokens()) {
      if (options.verify_tokens && t >= tokens.vocab_size()) std::abort();
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
