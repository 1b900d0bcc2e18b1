// Trainer: what it reports (progress line, metrics, trace) and its evaluation and
// sampling; the step and the loop are in trainer.cc, checkpointing in
// trainer_checkpoint.cc.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/eval_iterator.h"
#include "examples/train/trainer.h"
#include "runtime/bytes.h"

namespace etr::train {

double Trainer::evaluate() {
  auto scope = tracer_.scope(TraceTrack::kCompute, "evaluate", "eval");
  const int64_t b = config_.batch().micro_batch(), T = model_config_.seq_len;
  data::EvalIterator it(split_->val, static_cast<uint64_t>(b),
                        static_cast<uint64_t>(config_.log().eval_batches()) * b,
                        grid_->dp_rank(), grid_->dp_size());
  std::vector<uint64_t> offsets;
  double sums[2] = {0, 0};  // loss summed over windows, windows
  while (it.next(offsets)) {
    const int64_t n = static_cast<int64_t>(offsets.size());
    if (n == 0) continue;  // this rank's share ran out; the others go on
    for (int64_t i = 0; i < n; ++i) {
      data::copy_window(tokens_, offsets[i], std::span(inputs_).subspan(i * T, T),
                        std::span(targets_).subspan(i * T, T));
    }
    sums[0] += model_->forward(Batch{inputs_.data(), targets_.data(), n, T, 0}) *
               static_cast<double>(n);
    sums[1] += static_cast<double>(n);
  }
  sum_over_ranks(sums, 2);
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
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
  char line[320];
  int n = std::snprintf(line, sizeof line,
                        "step %5lld | loss %.4f | lr %.3e | norm %.3f | %7.0f tok/s | %7.1f ms | "
                        "%6.2f GFLOP/s | peak %s",
                        static_cast<long long>(position_.step), s.loss, s.lr, s.grad_norm, tps,
                        s.seconds * 1e3, gflops, format_bytes(static_cast<double>(peak)).c_str());
  if (reducer_ && n > 0 && n < static_cast<int>(sizeof line)) {
    n += std::snprintf(line + n, sizeof line - n, " | comm %.1f ms, exposed %.1f ms, hidden %.0f%%",
                       s.comm.comm_seconds * 1e3, s.comm.exposed_seconds * 1e3,
                       s.comm.hidden_fraction() * 100);
  }
  if (skipped_steps_ > 0 && n > 0 && n < static_cast<int>(sizeof line)) {
    std::snprintf(line + n, sizeof line - n, " | %s%lld non-finite step(s) skipped",
                  s.skipped ? "SKIPPED, " : "", static_cast<long long>(skipped_steps_));
  }
  log_.info(line);
  nlohmann::json j = {{"step", position_.step},     {"loss", s.loss},   {"lr", s.lr},
                      {"grad_norm", s.grad_norm},   {"ms", s.seconds * 1e3},
                      {"tokens_per_s", tps},        {"gflops", gflops}, {"peak_bytes", peak}};
  if (skipped_steps_ > 0) {
    j["skipped"] = s.skipped;
    j["skipped_steps"] = skipped_steps_;
  }
  if (reducer_) {
    j["comm_ms"] = s.comm.comm_seconds * 1e3;
    j["exposed_comm_ms"] = s.comm.exposed_seconds * 1e3;
    j["hidden_fraction"] = s.comm.hidden_fraction();
  }
  write_metrics(j.dump());
}

void Trainer::write_trace() {
  const std::string& path = config_.log().trace_file();
  if (path.empty()) return;
  tracer_.write_merged(grid_->dp_group(), path);
  if (leader()) log_.info("wrote the trace of ", grid_->dp_size(), " rank(s) to ", path);
}

}  // namespace etr::train
