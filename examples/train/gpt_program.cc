#include "examples/train/gpt_program.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/hf_tokenizer_files.h"
#include "examples/data/token_data_source.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/head_layer.h"
#include "examples/gpt/hf_weights.h"
#include "examples/gpt/model_presets.h"
#include "examples/train/training_tokenizer.h"
#include "runtime/error.h"
#include "runtime/state_names.h"

namespace etr::gpt {
namespace {

ModelSpec build_model(const SessionContext& ctx) {
  const GptConfig g = GptConfig::from(ctx.config.model());
  // Checked before allocating: a model or micro-batch too large for the budget is one
  // sentence, not minutes of allocation (or an int64 overflow) before OutOfMemory.
  // Whether the state fits: the batch policy takes the micro-batch that fits
  // (batch.micro_batch is its ceiling), with recomputation when needed, or says none does.
  g.require_fits(0, ctx.threads,
                 static_cast<double>(ctx.alloc.stats().budget),
                 zero_state_share(ctx.config.parallel().zero_stage(), ctx.ranks));
  ModelSpec m;
  m.stack = build_stack<float>(g);
  m.stack_bf16 = build_stack<bf16>(g);  // runtime.precision bf16 (and auto on a GPU)
  m.description = g.str();
  m.flops_per_token = g.flops_per_token(g.seq_len);
  const std::string from = ctx.config.model().init_from();
  const uint64_t seed = ctx.config.model().init_seed();
  const double std_dev = ctx.config.model().init_std();
  Logger* log = ctx.leader ? &ctx.log : nullptr;
  m.init = [g, from, seed, std_dev, log](const ParamLayout& layout, float* params) {
    if (from.empty()) {
      init_params(g, layout, params, seed, std_dev);
      return;
    }
    import_hf(g, layout, params, from);
    if (log) log->info("initialised from ", from);
  };
  return m;
}

std::unique_ptr<DataSource> load_data(const SessionContext& ctx, const GivenSizes* given,
                                      TokenizerCache& tokenizer, uint32_t& data_vocab) {
  const GptConfig g = GptConfig::from(ctx.config.model());
  if (ctx.leader) {
    const TrainingTokenizer& t = tokenizer.get(ctx.config);
    if (t.is_bytes()) {
      ctx.log.info("tokenizer: bytes (vocabulary 256)");
    } else {
      ctx.log.info("tokenizer: ", ctx.config.data().tokenizer_model(), ", ",
                   t.subword()->describe());
    }
  }
  auto source = std::make_unique<data::TokenDataSource>(
      ctx.config, g.seq_len, g.vocab_size, ctx.alloc, ctx.log, ctx.leader,
      given ? given->vocab_size : std::nullopt);
  data_vocab = source->vocab_size();
  return source;
}

// Before presets fill the model sizes in: model.vocab_size as the user set it or, when
// unset, as the tokenizer sets it (resolve_training_tokenizer); a nanoGPT file has its
// vocabulary nowhere else, so without either it is refused.
void record_given_sizes(const TrainConfig& config, GivenSizes* given) {
  const config::ModelConfig& m = config.model();
  const bool vocab_set = m.has_vocab_size();
  if (given) {
    given->vocab_size = vocab_set && m.vocab_size() > 0
                            ? std::optional<uint32_t>(static_cast<uint32_t>(m.vocab_size()))
                            : std::nullopt;
  }
  const config::DataConfig& d = config.data();
  if (d.format() == "nanogpt" && !d.train_file().empty() && !vocab_set) {
    throw ConfigError(std::string("data.format = nanogpt but model.vocab_size is not set; a "
                                  "nanoGPT .bin records no vocabulary, so ") +
                      data::kSetVocabSize + ".");
  }
}

// Data of more than 256 token ids without a tokenizer etr can read (an llm.c GPT-2 file:
// GPT-2's BPE is not SentencePiece): no text can be encoded or shown, so the sample starts
// from GPT-2's end-of-text token (50256, as llm.c samples) or token 0, and is shown as ids.
std::string generate_ids(LayerStack<float>& stack, const GptConfig& c, uint32_t data_vocab,
                         int count, uint64_t seed) {
  constexpr uint32_t kGpt2Vocab = 50257, kGpt2EndOfText = 50256;
  const auto start = static_cast<uint16_t>(data_vocab == kGpt2Vocab ? kGpt2EndOfText : 0);
  const std::vector<uint16_t> tokens = generate_tokens(stack, c, {start}, count, seed);
  std::string out = "(token ids: no tokenizer for the data's vocabulary of " +
                    std::to_string(data_vocab) +
                    "; data.tokenizer_model names a SentencePiece one)\n";
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out += ' ';
    out += std::to_string(tokens[i]);
  }
  return out;
}

}  // namespace

std::vector<uint16_t> generate_tokens(LayerStack<float>& stack, const GptConfig& c,
                                      std::vector<uint16_t> tokens, int count, uint64_t seed,
                                      bool greedy) {
  const int64_t Vp = c.padded_vocab(), V = c.vocab_size;
  const auto& head = dynamic_cast<const HeadLayer<float>&>(stack.layer(stack.size() - 1));
  std::mt19937_64 rng(seed);
  std::vector<int32_t> context;
  std::vector<double> probs(V);
  for (int i = 0; i < count; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), c.seq_len);
    context.assign(tokens.end() - T, tokens.end());
    stack.forward(Batch{context.data(), nullptr, 1, T, 0});
    const float* logits = head.logits() + (T - 1) * Vp;
    if (greedy) {  // the first of the largest, as torch.argmax
      tokens.push_back(static_cast<uint16_t>(std::max_element(logits, logits + V) - logits));
      continue;
    }
    const double top = *std::max_element(logits, logits + V);
    for (int64_t v = 0; v < V; ++v) probs[v] = std::exp(static_cast<double>(logits[v]) - top);
    std::discrete_distribution<int64_t> pick(probs.begin(), probs.end());
    tokens.push_back(static_cast<uint16_t>(pick(rng)));
  }
  return tokens;
}

std::string generate(LayerStack<float>& stack, const GptConfig& c,
                     const TrainingTokenizer& tokenizer, const std::string& prompt, int count,
                     uint64_t seed) {
  std::vector<uint16_t> tokens = tokenizer.encode(prompt.empty() ? "\n" : prompt);
  if (tokens.empty()) tokens = tokenizer.encode("\n");
  return tokenizer.decode_for_display(generate_tokens(stack, c, std::move(tokens), count, seed));
}

TrainProgram training_program(std::shared_ptr<const GivenSizes> given) {
  TrainProgram p;
  auto tokenizer = std::make_shared<TokenizerCache>();
  auto data_vocab = std::make_shared<uint32_t>(data::ByteTokenizer::kVocabSize);
  p.model = build_model;
  p.data = [given, tokenizer, data_vocab](const SessionContext& ctx) {
    return load_data(ctx, given.get(), *tokenizer, *data_vocab);
  };
  p.sample = [tokenizer, data_vocab](TrainSession& s) {
    const auto& lg = s.config().log();
    const GptConfig g = GptConfig::from(s.config().model());
    const TrainingTokenizer& t = tokenizer->get(s.config());
    if (t.is_bytes() && *data_vocab > data::ByteTokenizer::kVocabSize) {
      return generate_ids(s.stack(), g, *data_vocab, lg.sample_tokens(),
                          s.config().model().init_seed());
    }
    return generate(s.stack(), g, t, lg.sample_prompt(), lg.sample_tokens(),
                    s.config().model().init_seed());
  };
  p.export_weights = [tokenizer](TrainSession& s) {
    const std::string& path = s.config().output().export_safetensors();
    const GptConfig g = GptConfig::from(s.config().model());
    export_hf(g, s.stack().layout(), s.engine().parameters(), path);
    const TrainingTokenizer& t = tokenizer->get(s.config());
    if (!t.is_bytes()) data::write_hf_tokenizer(path, *t.subword(), g.seq_len);
    s.log().info("exported weights", t.is_bytes() ? "" : " and the tokenizer", " to ", path);
  };
  // The tokenizer's model travels with every checkpoint (etr-ckpt export writes it out).
  p.attachments = [tokenizer](const TrainConfig& config) {
    std::vector<ckpt::Attachment> files;
    const std::string bytes = tokenizer->get(config).model_bytes();
    if (bytes.empty()) return files;
    ckpt::Attachment& a = files.emplace_back();
    a.set_name(data::kTokenizerModelFile);
    a.set_data(bytes);
    return files;
  };
  return p;
}

ProgramInfo training_program_info(std::shared_ptr<GivenSizes> given) {
  ProgramInfo info;
  // What the user gave or the tokenizer implies, before a preset fills model.vocab_size in.
  info.complete_config = [given](TrainConfig& config) {
    resolve_training_tokenizer(config);
    record_given_sizes(config, given.get());
  };
  info.name = "etr-train";
  info.description = "etr-train: trains the example GPT-2 on a token file or a synthetic corpus.";
  info.model_presets = model_presets();
  return info;
}

}  // namespace etr::gpt
