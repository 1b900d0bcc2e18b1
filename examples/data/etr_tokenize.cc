// etr-tokenize: turns text into an etr token file (docs/token_file_format.md) for the
// example GPT, makes a synthetic corpus, or shows what a token file holds (etr's, llm.c's
// or nanoGPT's: token_file_format.h).
//
//   etr-tokenize input.txt -o train.tok                 // byte tokens of any file
//   etr-tokenize --synthetic 1000000 -o synth.tok --seed 3
//   etr-tokenize --show train.tok [--tokens 400]
//   etr-tokenize --show fineweb_train_000001.bin             // llm.c's, recognised
//   etr-tokenize --show train.bin --format nanogpt           // nanoGPT's, named
//
// Errors are one sentence on stderr and exit status 1 (2 for a bad command line).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "examples/data/byte_tokenizer.h"
#include "examples/data/synthetic_corpus.h"
#include "examples/data/token_file.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"

namespace {

namespace fs = std::filesystem;
using etr::data::ByteTokenizer;

std::string read_text(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw etr::IoError("cannot read '" + path.string() + "': it is a directory; give a text file");
  }
  // A regular file's size is known: it must fit in memory with its tokens (3 bytes a
  // byte) before anything is read.
  const uintmax_t size = fs::is_regular_file(path, ec) ? fs::file_size(path, ec) : 0;
  const double need = etr::data::synthetic_corpus_bytes(ec ? 0 : size);
  const double available = static_cast<double>(etr::host_available_memory());
  if (need > available) {
    throw etr::OutOfMemory(
        "'" + path.string() + "' (" + etr::format_bytes(static_cast<double>(size)) + ") needs " +
            etr::format_bytes(need) + " to convert (its bytes and their tokens), more than the " +
            etr::format_bytes(available) + " of memory available; split it into smaller files.",
        static_cast<size_t>(std::min(need, 1e19)), 0, 0, static_cast<size_t>(available));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw etr::IoError("cannot open '" + path.string() + "': " + std::strerror(errno) +
                       "; check that the file exists and is readable");
  }
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) {
    throw etr::IoError("cannot read '" + path.string() + "': " + std::strerror(errno));
  }
  return text;
}

void write_tokens(const fs::path& output, const std::string& text) {
  const std::vector<uint16_t> tokens = ByteTokenizer::encode(text);
  const etr::data::TokenFileHeader h =
      etr::data::write_token_file(output, tokens, ByteTokenizer::kVocabSize);
  std::printf("etr-tokenize: wrote %s: %llu tokens, vocabulary %u, checksum %s\n", output.c_str(),
              static_cast<unsigned long long>(h.token_count), h.vocab_size,
              etr::format_checksum(h.checksum).c_str());
}

// The first tokens of `file`: decoded when they are bytes (vocabulary 256), else their ids.
void print_first_tokens(const etr::data::TokenFile& file, uint64_t count) {
  const auto first = file.tokens().first(std::min<uint64_t>(count, file.size()));
  if (file.vocab_size() == 256) {
    std::printf("first %zu tokens, decoded:\n%s\n", first.size(),
                ByteTokenizer::decode_for_display(first).c_str());
    return;
  }
  std::string ids;
  for (const uint16_t t : first) ids += (ids.empty() ? "" : " ") + std::to_string(t);
  std::printf("first %zu tokens (ids; decoded only for byte tokens):\n%s\n", first.size(),
              ids.c_str());
}

void show(const fs::path& path, uint64_t count, bool verify, const std::string& format) {
  using etr::data::TokenFileFormat;
  etr::data::TokenFileOptions options;
  options.verify_checksum = verify;
  options.format = etr::data::parse_token_file_format(format);
  const etr::data::TokenFile file(path, options);
  const etr::data::TokenFileHeader& h = file.header();
  std::printf("file:        %s\n", path.c_str());
  switch (file.format()) {
    case TokenFileFormat::kLlmc:
      std::printf("format:      llm.c token file, version %u (uint16 little-endian)\n", h.version);
      break;
    case TokenFileFormat::kNanogpt:
      std::printf("format:      nanoGPT .bin (no header; uint16 little-endian)\n");
      break;
    default:
      std::printf("format:      etr token file, version %u, dtype %u (uint16 little-endian)\n",
                  h.version, static_cast<unsigned>(h.dtype));
  }
  std::printf("tokens:      %llu\n", static_cast<unsigned long long>(file.size()));
  if (file.vocab_size() == 0) {
    const auto t = file.tokens();
    const unsigned top = t.empty() ? 0 : *std::max_element(t.begin(), t.end());
    std::printf("vocabulary:  not recorded (largest token %u; etr-train takes model.vocab_size)\n",
                top);
  } else if (file.format() == TokenFileFormat::kLlmc) {
    std::printf("vocabulary:  %u (GPT-2's; not recorded in llm.c files)\n", file.vocab_size());
  } else {
    std::printf("vocabulary:  %u\n", file.vocab_size());
  }
  if (file.format() == TokenFileFormat::kEtr) {
    std::printf("checksum:    %s (%s)\n", etr::format_checksum(h.checksum).c_str(),
                verify ? "verified" : "not verified");
  } else {
    std::printf("checksum:    none in this format%s\n",
                file.vocab_size() ? " (tokens checked against the vocabulary)" : "");
  }
  std::printf("size:        %llu bytes (%s)\n", static_cast<unsigned long long>(file.file_bytes()),
              etr::format_bytes(static_cast<double>(file.file_bytes())).c_str());
  print_first_tokens(file, count);
}

// A whole number of at least `min` that fits in uint64: CLI11 alone reads "-1" as
// 2^64 - 1, and its number validators print a range up to 1.8e308.
CLI::Validator count_validator(uint64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        uint64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc() && end == text.data() + text.size() && !text.empty() && v >= min)
          return "";
        return text + " is not a whole number from " + std::to_string(min) + " to 2^64 - 1";
      },
      min == 0 ? "UINT" : "POSITIVE");
}

// Does what the command line asked: --show, --synthetic N, or a text file's conversion.
void run(const std::string& show_path, uint64_t show_tokens, bool verify, const std::string& format,
         std::optional<uint64_t> synthetic, uint64_t seed, const std::string& input,
         const std::string& output) {
  if (!show_path.empty()) {
    show(show_path, show_tokens, verify, format);
  } else if (synthetic) {
    // Checked before allocating: the text and its tokens must fit in memory.
    const double need = etr::data::synthetic_corpus_bytes(*synthetic);
    const double available = static_cast<double>(etr::host_available_memory());
    if (need > available) {
      throw etr::OutOfMemory(
          "--synthetic " + std::to_string(*synthetic) + " needs " + etr::format_bytes(need) +
              " for the corpus and its tokens, more than the " + etr::format_bytes(available) +
              " of memory available; ask for fewer tokens.",
          static_cast<size_t>(std::min(need, 1e19)), 0, 0, static_cast<size_t>(available));
    }
    etr::data::SyntheticCorpus corpus(seed);
    write_tokens(output, corpus.generate(*synthetic));
  } else {
    write_tokens(output, read_text(input));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "etr-tokenize: converts text to an etr token file of byte tokens (vocabulary 256), "
      "writes a synthetic corpus, or shows a token file.",
      "etr-tokenize"};
  std::string input;
  std::string output;
  std::optional<uint64_t> synthetic;
  uint64_t seed = 1;
  std::string show_path;
  uint64_t show_tokens = 256;
  bool no_verify = false;
  std::string format = "auto";

  auto* input_opt = app.add_option("input", input, "text file to convert (any bytes)");
  auto* output_opt = app.add_option("-o,--output", output, "token file to write");
  auto* synthetic_opt = app.add_option("--synthetic", synthetic,
                                       "write N tokens of the synthetic corpus instead of a text "
                                       "file (N at least 1; 3 N bytes "
                                       "must fit in the available memory)")
                            ->check(count_validator(1));
  auto* seed_opt = app.add_option("--seed", seed, "seed of the synthetic corpus (default 1)")
                       ->check(count_validator(0));
  auto* show_opt =
      app.add_option("--show", show_path,
                     "print what a token file (etr, llm.c or nanoGPT) holds and its first tokens");
  auto* tokens_opt =
      app.add_option("--tokens", show_tokens, "how many tokens --show decodes (default 256)")
          ->check(count_validator(0));
  auto* no_verify_opt =
      app.add_flag("--no-verify", no_verify, "--show without checking the checksum");
  auto* format_opt =
      app.add_option("--format", format,
                     "format of the --show file: auto (etr or llm.c, by the header), etr, llmc "
                     "or nanogpt (a headerless .bin of uint16 tokens; default auto)")
          ->check(CLI::IsMember({"auto", "etr", "llmc", "nanogpt"}));
  input_opt->excludes(synthetic_opt);
  show_opt->excludes(input_opt)->excludes(synthetic_opt)->excludes(output_opt);
  seed_opt->needs(synthetic_opt);
  tokens_opt->needs(show_opt);
  no_verify_opt->needs(show_opt);
  format_opt->needs(show_opt);

  try {
    app.parse(argc, argv);
    if (show_path.empty() && input.empty() && !synthetic) {
      throw CLI::ValidationError("give a text file to convert, --synthetic N or --show FILE");
    }
    if (show_path.empty() && output.empty()) {
      throw CLI::ValidationError("-o OUTPUT is required to write a token file");
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "etr-tokenize: error: %s (see etr-tokenize --help)\n", e.what());
    return 2;
  }

  try {
    run(show_path, show_tokens, !no_verify, format, synthetic, seed, input, output);
  } catch (const std::bad_alloc& e) {
    // What the size checks could not foresee: input from a pipe, memory taken meanwhile.
    std::fprintf(stderr,
                 "etr-tokenize: error: out of memory (%s) while converting %s; give a smaller "
                 "input or free memory.\n",
                 e.what(), synthetic ? "the synthetic corpus" : ("'" + input + "'").c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "etr-tokenize: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
