#include "examples/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include <nlohmann/json.hpp>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/eval_iterator.h"
#include "examples/data/synthetic_corpus.h"
#include "examples/gpt/hf_weights.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

gpt::GptConfig model_config(const TrainConfig& c) {
  gpt::GptConfig g;
  g.n_layer = c.model().n_layer();
  g.n_head = c.model().n_head();
  g.d_model = c.model().d_model();
  g.seq_len = c.model().seq_len();
  g.vocab_size = c.model().vocab_size();
  return g;
}

size_t host_budget(const TrainConfig& c) {
  return c.runtime().host_memory_budget().empty() ? 0 : parse_bytes(c.runtime().host_memory_budget());
}

}  // namespace

Trainer::Trainer(const TrainConfig& config, World& world)
    : config_(config),
      world_(world),
      log_(world.log()),
      alloc_(host_budget(config)),
      model_config_(model_config(config)) {
  if (world_.size() > 1) {
    throw ConfigError("etr-train runs on one rank until data parallelism lands; start it without "
                      "mpirun or with -np 1");
  }
  if (config_.runtime().threads() > 0) cpu::set_num_threads(config_.runtime().threads());
  accumulation_ = accumulation_steps(config_, world_.size());
  model_ = std::make_unique<gpt::GptModel<float>>(model_config_, alloc_);
  if (!config_.model().init_from().empty()) {
    gpt::import_hf(*model_, config_.model().init_from());
    log_.info("initialised from ", config_.model().init_from());
  } else {
    model_->init(config_.model().init_seed());
  }
  optimizer_ = std::make_unique<AdamW>(model_->layout());
  adamw_ = AdamWOptions{config_.optimizer().lr(), config_.optimizer().beta1(),
                        config_.optimizer().beta2(), config_.optimizer().eps(),
                        config_.optimizer().weight_decay()};
  const size_t state = static_cast<size_t>(model_->layout().numel()) * sizeof(float);
  m_ = Buffer(alloc_, state);
  v_ = Buffer(alloc_, state);
  std::memset(m_.data(), 0, state);
  std::memset(v_.data(), 0, state);
  const int64_t b = config_.batch().micro_batch(), T = model_config_.seq_len;
  log_.info("model: ", model_config_.str(), "; activations for micro-batch ", b, " x ", T, ": ",
            format_bytes(static_cast<double>(model_->activation_bytes(b, T))));
  model_->plan(b, T);
  inputs_.resize(b * T);
  targets_.resize(b * T);
  load_data();
  if (!config_.log().metrics_file().empty()) {
    metrics_.open(config_.log().metrics_file(), std::ios::out | std::ios::trunc);
    if (!metrics_) throw IoError("cannot write the metrics file " + config_.log().metrics_file());
  }
}

void Trainer::load_data() {
  const auto& d = config_.data();
  if (d.synthetic()) {
    const size_t bytes = parse_bytes(d.synthetic_size());
    synthetic_ = data::ByteTokenizer::encode(data::SyntheticCorpus(d.seed()).generate(bytes));
    tokens_ = synthetic_;
    log_.info("data: synthetic corpus, ", synthetic_.size(), " tokens (seed ", d.seed(), ")");
  } else {
    file_.emplace(d.train_file());
    tokens_ = file_->tokens();
    log_.info("data: ", d.train_file(), ", ", tokens_.size(), " tokens");
  }
  if (file_ && file_->vocab_size() > static_cast<uint32_t>(model_config_.vocab_size)) {
    throw ConfigError("the token file's vocabulary (" + std::to_string(file_->vocab_size()) +
                      ") is larger than model.vocab_size (" +
                      std::to_string(model_config_.vocab_size) + ")");
  }
  split_ = data::split_windows(tokens_.size(), model_config_.seq_len, d.val_fraction());
  if (split_->train.count() == 0) {
    throw ConfigError("the training data (" + std::to_string(tokens_.size()) +
                      " tokens) holds no window of seq_len + 1 = " +
                      std::to_string(model_config_.seq_len + 1) + " tokens");
  }
  sampler_.emplace(split_->train, d.seed());
  position_.seed = d.seed();
}

StepStats Trainer::train_step() {
  const auto t0 = Clock::now();
  const int64_t B = config_.batch().global_batch(), b = config_.batch().micro_batch();
  const int64_t T = model_config_.seq_len;
  const auto& s = config_.schedule();
  StepStats st;
  st.lr = learning_rate(static_cast<int64_t>(position_.step), config_.optimizer().lr(),
                        s.warmup_steps(), s.max_steps(), s.min_lr_ratio());
  model_->zero_grads();
  for (int64_t m = 0; m < accumulation_; ++m) {
    sampler_->gather(tokens_, position_.samples_seen + m * b, b, inputs_, targets_);
    Batch batch{inputs_.data(), targets_.data(), b, T, 1.0 / static_cast<double>(B * T)};
    st.loss += model_->forward(batch) / static_cast<double>(accumulation_);
    model_->backward(batch);
  }
  const int64_t n = model_->layout().numel();
  st.grad_norm = grad_norm(model_->grads(), n);
  clip_grad_norm(model_->grads(), n, st.grad_norm, config_.optimizer().grad_clip());
  optimizer_->step(model_->params(), model_->grads(), static_cast<float*>(m_.data()),
                   static_cast<float*>(v_.data()), 0, n, static_cast<int64_t>(position_.step) + 1,
                   st.lr, adamw_);
  position_.advance(static_cast<uint64_t>(B));
  st.seconds = seconds_since(t0);
  return st;
}

double Trainer::evaluate() {
  const int64_t b = config_.batch().micro_batch(), T = model_config_.seq_len;
  data::EvalIterator it(split_->val, static_cast<uint64_t>(b),
                        static_cast<uint64_t>(config_.log().eval_batches()) * b);
  std::vector<uint64_t> offsets;
  double sum = 0;
  int64_t batches = 0;
  while (it.next(offsets)) {
    const int64_t n = static_cast<int64_t>(offsets.size());
    for (int64_t i = 0; i < n; ++i) {
      data::copy_window(tokens_, offsets[i], std::span(inputs_).subspan(i * T, T),
                        std::span(targets_).subspan(i * T, T));
    }
    sum += model_->forward(Batch{inputs_.data(), targets_.data(), n, T, 0});
    ++batches;
  }
  return batches ? sum / static_cast<double>(batches) : std::nan("");
}

std::string Trainer::generate(const std::string& prompt, int count) {
  std::vector<uint16_t> tokens = data::ByteTokenizer::encode(prompt.empty() ? "\n" : prompt);
  const int64_t Vp = model_config_.padded_vocab(), V = model_config_.vocab_size;
  std::mt19937_64 rng(config_.model().init_seed());
  std::vector<int32_t> context;
  std::vector<double> probs(V);
  for (int i = 0; i < count; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), model_config_.seq_len);
    context.assign(tokens.end() - T, tokens.end());
    model_->forward(Batch{context.data(), nullptr, 1, T, 0});
    const float* logits = model_->logits() + (T - 1) * Vp;
    const double top = *std::max_element(logits, logits + V);
    for (int64_t v = 0; v < V; ++v) probs[v] = std::exp(static_cast<double>(logits[v]) - top);
    std::discrete_distribution<int64_t> pick(probs.begin(), probs.end());
    tokens.push_back(static_cast<uint16_t>(pick(rng)));
  }
  return data::ByteTokenizer::decode_for_display(tokens);
}

void Trainer::write_metrics(const std::string& line) {
  if (metrics_.is_open()) metrics_ << line << '\n' << std::flush;
}

void Trainer::log_step(const StepStats& s) {
  const double tokens = static_cast<double>(config_.batch().global_batch() * model_config_.seq_len);
  const double tps = tokens / s.seconds;
  const double gflops = model_config_.flops_per_token(model_config_.seq_len) * tps / 1e9;
  const size_t peak = alloc_.stats().peak;
  char line[256];
  std::snprintf(line, sizeof line,
                "step %5lld | loss %.4f | lr %.3e | norm %.3f | %7.0f tok/s | %7.1f ms | "
                "%6.2f GFLOP/s | peak %s",
                static_cast<long long>(position_.step), s.loss, s.lr, s.grad_norm, tps,
                s.seconds * 1e3, gflops, format_bytes(static_cast<double>(peak)).c_str());
  log_.info(line);
  nlohmann::json j = {{"step", position_.step},     {"loss", s.loss},   {"lr", s.lr},
                      {"grad_norm", s.grad_norm},   {"ms", s.seconds * 1e3},
                      {"tokens_per_s", tps},        {"gflops", gflops}, {"peak_bytes", peak}};
  write_metrics(j.dump());
}

RunSummary Trainer::run() {
  RunSummary sum;
  const auto t0 = Clock::now();
  const int64_t steps = config_.schedule().max_steps();
  const auto& lg = config_.log();
  for (int64_t i = 0; i < steps; ++i) {
    StepStats s = train_step();
    if (i == 0) sum.first_loss = s.loss;
    sum.final_loss = s.loss;
    const int64_t step = static_cast<int64_t>(position_.step);
    if (lg.log_every() > 0 && (step % lg.log_every() == 0 || step == steps || step == 1)) {
      log_step(s);
    }
    if ((lg.eval_every() > 0 && step % lg.eval_every() == 0) || step == steps) {
      sum.final_val_loss = evaluate();
      log_.info("step ", step, " | held-out loss ", sum.final_val_loss);
      write_metrics(nlohmann::json{{"step", step}, {"val_loss", sum.final_val_loss}}.dump());
    }
  }
  sum.steps = steps;
  sum.seconds = seconds_since(t0);
  sum.tokens_per_second = static_cast<double>(steps * config_.batch().global_batch() *
                                              model_config_.seq_len) / sum.seconds;
  sum.peak_bytes = alloc_.stats().peak;
  if (lg.sample_tokens() > 0) sum.sample = generate(lg.sample_prompt(), lg.sample_tokens());
  if (!config_.output().export_safetensors().empty()) {
    gpt::export_hf(*model_, config_.output().export_safetensors());
    log_.info("exported weights to ", config_.output().export_safetensors());
  }
  return sum;
}

}  // namespace etr::train
