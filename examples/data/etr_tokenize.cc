// etr-tokenize: turns text into an etr token file (docs/token_file_format.md) for the
// example GPT, trains a subword tokenizer, makes a synthetic corpus, or shows what a token
// file holds (etr's, llm.c's or nanoGPT's: token_file_format.h).
//
//   etr-tokenize input.txt -o train.tok                 // byte tokens of any file
//   etr-tokenize input.txt --train-tokenizer bpe --vocab-size 2000 -o tok.model
//   etr-tokenize input.txt --tokenizer tok.model -o train.tok
//                                  // subword tokens; the model is copied beside them as
//                                  // train.tok.tokenizer.model (the sidecar)
//   etr-tokenize --synthetic 1000000 -o synth.tok --seed 3
//   etr-tokenize --show train.tok [--tokens 400]    // decoded with the sidecar if any
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
#include "checkpoint/durable_file.h"
#include "examples/data/byte_tokenizer.h"
#include "examples/data/subword_tokenizer.h"
#include "examples/data/subword_trainer.h"
#include "examples/data/synthetic_corpus.h"
#include "examples/data/token_file.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/error_text.h"

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

void print_written(const fs::path& output, const etr::data::TokenFileHeader& h) {
  std::printf("etr-tokenize: wrote %s: %llu tokens, vocabulary %u, checksum %s\n", output.c_str(),
              static_cast<unsigned long long>(h.token_count), h.vocab_size,
              etr::format_checksum(h.checksum).c_str());
}

// Byte tokens. A sidecar left by an earlier subword conversion to the same path would
// claim these tokens for its model: it is removed first.
void write_tokens(const fs::path& output, const std::string& text) {
  const std::vector<uint16_t> tokens = ByteTokenizer::encode(text);
  const fs::path sidecar = etr::data::tokenizer_sidecar_path(output);
  std::error_code ec;
  if (fs::remove(sidecar, ec)) {
    std::printf("etr-tokenize: removed %s, the tokenizer of the file's previous contents\n",
                sidecar.c_str());
  } else if (ec) {
    throw etr::IoError("cannot remove the old tokenizer sidecar '" + sidecar.string() +
                       "': " + ec.message());
  }
  print_written(output, etr::data::write_token_file(output, tokens, ByteTokenizer::kVocabSize));
}

// Subword tokens of `model`. The model's bytes go beside the token file first, so that a
// token file of these ids never exists without the tokenizer that made them.
void write_subword_tokens(const fs::path& output, const std::string& text, const fs::path& model) {
  const auto tokenizer = etr::data::SubwordTokenizer::load(model);
  const std::vector<uint16_t> tokens = tokenizer.encode(text);
  const fs::path sidecar = etr::data::tokenizer_sidecar_path(output);
  const std::string& bytes = tokenizer.model_bytes();
  etr::write_file_durably(sidecar, bytes.data(), bytes.size());
  print_written(output, etr::data::write_token_file(output, tokens, tokenizer.vocab_size()));
  std::printf("etr-tokenize: wrote %s: the tokenizer, %s (%.2f bytes of text a token)\n",
              sidecar.c_str(), tokenizer.describe().c_str(),
              tokens.empty() ? 0.0 : static_cast<double>(text.size()) / tokens.size());
}

void train_tokenizer(const fs::path& output, const std::string& text,
                     const etr::data::SubwordTrainOptions& options) {
  const std::string model = etr::data::train_subword_model(text, options);
  const auto tokenizer = etr::data::SubwordTokenizer::from_bytes(model, output.string());
  etr::write_file_durably(output, model.data(), model.size());
  std::printf("etr-tokenize: wrote %s: %s trained on %zu bytes of text\n", output.c_str(),
              tokenizer.describe().c_str(), text.size());
  if (tokenizer.vocab_size() < options.vocab_size) {
    std::printf(
        "etr-tokenize: note: %u pieces were asked for; the text supports %u (a larger "
        "text gives more)\n",
        options.vocab_size, tokenizer.vocab_size());
  }
}

// The first tokens of `file`: decoded with its tokenizer sidecar when there is one, as
// text when they are bytes (vocabulary 256), else their ids.
void print_first_tokens(const fs::path& path, const etr::data::TokenFile& file, uint64_t count) {
  const auto first = file.tokens().first(std::min<uint64_t>(count, file.size()));
  const fs::path sidecar = etr::data::tokenizer_sidecar_path(path);
  std::error_code ec;
  if (fs::exists(sidecar, ec)) {
    const auto tokenizer = etr::data::SubwordTokenizer::load(sidecar);
    std::printf("tokenizer:   %s (%s)\n", sidecar.c_str(), tokenizer.describe().c_str());
    std::printf("first %zu tokens, decoded:\n%s\n", first.size(),
                tokenizer.decode_for_display(first).c_str());
    return;
  }
  if (file.vocab_size() == 256) {
    std::printf("tokenizer:   bytes\n");
    std::printf("first %zu tokens, decoded:\n%s\n", first.size(),
                ByteTokenizer::decode_for_display(first).c_str());
    return;
  }
  std::string ids;
  for (const uint16_t t : first) ids += (ids.empty() ? "" : " ") + std::to_string(t);
  std::printf("first %zu tokens (ids; decoded only for byte tokens or with a tokenizer):\n%s\n",
              first.size(), ids.c_str());
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
  print_first_tokens(path, file, count);
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

struct Options {
  std::string input;
  std::string output;
  std::optional<uint64_t> synthetic;
  uint64_t seed = 1;
  std::string show_path;
  uint64_t show_tokens = 256;
  bool no_verify = false;
  std::string train_type;   // --train-tokenizer: bpe or unigram
  uint64_t vocab_size = 0;  // --vocab-size
  std::string tokenizer;    // --tokenizer MODEL
  std::string format = "auto";  // --format of the --show file
};

void write_synthetic(const Options& o) {
  // Checked before allocating: the text and its tokens must fit in memory.
  const double need = etr::data::synthetic_corpus_bytes(*o.synthetic);
  const double available = static_cast<double>(etr::host_available_memory());
  if (need > available) {
    throw etr::OutOfMemory(
        "--synthetic " + std::to_string(*o.synthetic) + " needs " + etr::format_bytes(need) +
            " for the corpus and its tokens, more than the " + etr::format_bytes(available) +
            " of memory available; ask for fewer tokens.",
        static_cast<size_t>(std::min(need, 1e19)), 0, 0, static_cast<size_t>(available));
  }
  etr::data::SyntheticCorpus corpus(o.seed);
  write_tokens(o.output, corpus.generate(*o.synthetic));
}

// Does what the command line asked: --show, --synthetic N, training a tokenizer, or a
// text file's conversion (byte or subword tokens).
void run(const Options& o) {
  if (!o.show_path.empty()) {
    show(o.show_path, o.show_tokens, !o.no_verify, o.format);
  } else if (o.synthetic) {
    write_synthetic(o);
  } else if (!o.train_type.empty()) {
    if (o.vocab_size > etr::data::kSubwordMaxVocab) {
      throw etr::ConfigError("--vocab-size " + std::to_string(o.vocab_size) + " is more than the " +
                             std::to_string(etr::data::kSubwordMaxVocab) +
                             " pieces that uint16 tokens can number");
    }
    etr::data::SubwordTrainOptions options;
    options.type = o.train_type;
    options.vocab_size = static_cast<uint32_t>(o.vocab_size);
    train_tokenizer(o.output, read_text(o.input), options);
  } else if (!o.tokenizer.empty()) {
    write_subword_tokens(o.output, read_text(o.input), o.tokenizer);
  } else {
    write_tokens(o.output, read_text(o.input));
  }
}

// Fills `o` from the command line; throws CLI::ParseError (CLI::CallForHelp for --help).
void parse(CLI::App& app, int argc, char** argv, Options& o) {
  auto* input_opt = app.add_option("input", o.input, "text file to convert (any bytes)");
  auto* output_opt = app.add_option(
      "-o,--output", o.output, "token file to write (with --train-tokenizer: the .model file)");
  auto* synthetic_opt = app.add_option("--synthetic", o.synthetic,
                                       "write N tokens of the synthetic corpus instead of a text "
                                       "file (N at least 1; 3 N bytes "
                                       "must fit in the available memory)")
                            ->check(count_validator(1));
  auto* seed_opt = app.add_option("--seed", o.seed, "seed of the synthetic corpus (default 1)")
                       ->check(count_validator(0));
  auto* show_opt = app.add_option(
      "--show", o.show_path,
      "print what a token file (etr, llm.c or nanoGPT) holds and its first tokens (decoded "
      "with its tokenizer sidecar, FILE.tokenizer.model, when there is one)");
  auto* tokens_opt =
      app.add_option("--tokens", o.show_tokens, "how many tokens --show decodes (default 256)")
          ->check(count_validator(0));
  auto* no_verify_opt =
      app.add_flag("--no-verify", o.no_verify, "--show without checking the checksum");
  auto* format_opt =
      app.add_option("--format", o.format,
                     "format of the --show file: auto (etr or llm.c, by the header), etr, llmc "
                     "or nanogpt (a headerless .bin of uint16 tokens; default auto)")
          ->check(CLI::IsMember({"auto", "etr", "llmc", "nanogpt"}));
  auto* train_opt =
      app.add_option("--train-tokenizer", o.train_type,
                     "train a SentencePiece tokenizer of this type (bpe or unigram) on the text "
                     "and write its .model file to -o")
          ->check(CLI::IsMember({"bpe", "unigram"}));
  auto* vocab_opt = app.add_option("--vocab-size", o.vocab_size,
                                   "pieces of the tokenizer --train-tokenizer trains (260 to "
                                   "65536; a small text may support fewer)")
                        ->check(count_validator(1));
  auto* tokenizer_opt = app.add_option(
      "--tokenizer", o.tokenizer,
      "encode the text with this SentencePiece .model instead of bytes; it is copied beside "
      "the token file as OUTPUT.tokenizer.model, where etr-train finds it");
  input_opt->excludes(synthetic_opt);
  show_opt->excludes(input_opt)->excludes(synthetic_opt)->excludes(output_opt);
  train_opt->excludes(synthetic_opt)->excludes(show_opt)->excludes(tokenizer_opt);
  tokenizer_opt->excludes(synthetic_opt)->excludes(show_opt);
  train_opt->needs(vocab_opt);
  vocab_opt->needs(train_opt);
  seed_opt->needs(synthetic_opt);
  tokens_opt->needs(show_opt);
  no_verify_opt->needs(show_opt);
  format_opt->needs(show_opt);

  app.parse(argc, argv);
  if (o.show_path.empty() && o.input.empty() && !o.synthetic) {
    throw CLI::ValidationError("give a text file to convert, --synthetic N or --show FILE");
  }
  if (o.show_path.empty() && o.output.empty()) {
    throw CLI::ValidationError(o.train_type.empty()
                                   ? "-o OUTPUT is required to write a token file"
                                   : "-o OUTPUT is required to write the tokenizer's .model file");
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "etr-tokenize: converts text to an etr token file of byte tokens (vocabulary 256) or of "
      "SentencePiece subword tokens, trains such a tokenizer, writes a synthetic corpus, or "
      "shows a token file.",
      "etr-tokenize"};
  Options o;
  try {
    parse(app, argc, argv, o);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    etr::print_error("etr-tokenize", std::string(e.what()) + " (see etr-tokenize --help)");
    return 2;
  }

  try {
    run(o);
  } catch (const std::bad_alloc& e) {
    // What the size checks could not foresee: input from a pipe, memory taken meanwhile.
    std::fprintf(stderr,
                 "etr-tokenize: error: out of memory (%s) while converting %s; give a smaller "
                 "input or free memory.\n",
                 e.what(), o.synthetic ? "the synthetic corpus" : ("'" + etr::printable(o.input) + "'").c_str());
    return 1;
  } catch (const std::exception& e) {
    etr::print_error("etr-tokenize", e.what());
    return 1;
  }
  return 0;
}
