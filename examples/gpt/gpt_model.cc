#include "examples/gpt/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "examples/gpt/embedding_layer.h"
#include "examples/gpt/transformer_block.h"
#include "runtime/error.h"

namespace etr::gpt {

template <typename Real>
GptModel<Real>::GptModel(const GptConfig& config, Allocator& alloc)
    : config_(config), alloc_(alloc) {
  config_.validate();
  layers_.push_back(std::make_unique<EmbeddingLayer<Real>>(config_));
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    layers_.push_back(std::make_unique<TransformerBlock<Real>>(config_, static_cast<int>(i)));
  }
  auto head = std::make_unique<HeadLayer<Real>>(config_);
  head_ = head.get();
  layers_.push_back(std::move(head));
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i]->declare(layout_, static_cast<int>(i));
  const size_t bytes = static_cast<size_t>(layout_.numel()) * sizeof(Real);
  params_ = Buffer(alloc_, bytes);
  grads_ = Buffer(alloc_, bytes);
  std::memset(params_.data(), 0, bytes);
  std::memset(grads_.data(), 0, bytes);
  for (auto& layer : layers_) {
    layer->bind(layout_, params(), grads());
    forward_names_.push_back("forward " + layer->name());
    backward_names_.push_back("backward " + layer->name());
  }
}

template <typename Real>
void GptModel<Real>::init(uint64_t seed, double std_dev) {
  if (!(std::isfinite(std_dev) && std_dev > 0)) {
    throw InvalidArgument("the initial weights' standard deviation is " + std::to_string(std_dev) +
                          "; it must be a finite number greater than 0 (model.init_std).");
  }
  std::mt19937_64 rng(seed);
  const double proj_std = std_dev / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  std::memset(params(), 0, layout_.numel() * sizeof(Real));
  for (const TensorEntry& e : layout_.entries()) {
    Real* p = params() + e.offset;
    const std::string& n = e.name;
    auto ends_with = [&n](const std::string& s) {
      return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with(".bias")) continue;  // zero
    if (n.find("ln_") != std::string::npos) {
      std::fill(p, p + e.numel(), Real(1));
      continue;
    }
    const bool projection = ends_with("attn.c_proj.weight") || ends_with("mlp.c_proj.weight");
    std::normal_distribution<double> normal(0.0, projection ? proj_std : std_dev);
    int64_t count = e.numel();
    if (n == "wte.weight") count = config_.vocab_size * config_.d_model;  // padding rows stay 0
    for (int64_t i = 0; i < count; ++i) p[i] = static_cast<Real>(normal(rng));
  }
}

template <typename Real>
size_t GptModel<Real>::activation_bytes(int64_t B, int64_t T) const {
  int64_t acts = 0, scratch = 0;
  for (const auto& layer : layers_) {
    acts += layer->activation_numel(B, T);
    scratch = std::max(scratch, layer->scratch_numel(B, T));
  }
  scratch += 2 * B * T * config_.d_model;
  return static_cast<size_t>(acts + scratch) * sizeof(Real);
}

template <typename Real>
void GptModel<Real>::plan(int64_t B, int64_t T) {
  if (T > config_.seq_len) {
    throw ConfigError("a sequence of " + std::to_string(T) + " tokens is longer than the model's " +
                      std::to_string(config_.seq_len) + " positions");
  }
  int64_t acts = 0, scratch = 0;
  for (const auto& layer : layers_) {
    acts += layer->activation_numel(B, T);
    scratch = std::max(scratch, layer->scratch_numel(B, T));
  }
  scratch += 2 * B * T * config_.d_model;
  activations_.reset();
  scratch_.reset();
  activations_ = Buffer(alloc_, static_cast<size_t>(acts) * sizeof(Real));
  scratch_ = Buffer(alloc_, static_cast<size_t>(scratch) * sizeof(Real));
  Real* p = static_cast<Real*>(activations_.data());
  for (auto& layer : layers_) {
    layer->plan(p, B, T);
    p += layer->activation_numel(B, T);
  }
  planned_B_ = B;
  planned_T_ = T;
}

template <typename Real>
double GptModel<Real>::forward(const Batch& b) {
  if (b.B > planned_B_ || b.T > planned_T_ || b.B * b.T > planned_B_ * planned_T_) {
    throw InvalidArgument("a micro-batch of " + std::to_string(b.B) + " x " + std::to_string(b.T) +
                          " does not fit the planned " + std::to_string(planned_B_) + " x " +
                          std::to_string(planned_T_) + "; call plan() first");
  }
  const Real* in = nullptr;
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto scope = tracer_ ? tracer_->scope(TraceTrack::kCompute, forward_names_[i], "forward")
                         : Tracer::Scope(nullptr, TraceTrack::kCompute, {}, nullptr);
    layers_[i]->forward(in, b);
    in = layers_[i]->output();
  }
  if (!b.targets) return 0;
  double sum = 0;
  for (int64_t i = 0; i < b.B * b.T; ++i) sum += in[i];
  return sum / static_cast<double>(b.B * b.T);
}

template <typename Real>
void GptModel<Real>::backward(const Batch& b, const std::function<void(int)>& on_layer_final) {
  const int64_t NC = b.B * b.T * config_.d_model;
  Real* scratch = static_cast<Real*>(scratch_.data());
  Real* dcur = scratch;            // gradient of the current layer's output
  Real* dnext = scratch + NC;      // gradient of its input, accumulated by the layer
  Real* layer_scratch = scratch + 2 * NC;
  const int last = static_cast<int>(layers_.size()) - 1;
  for (int i = last; i >= 0; --i) {
    const Real* in = i > 0 ? layers_[i - 1]->output() : nullptr;
    Real* din = i > 0 ? dnext : nullptr;
    {
      auto scope = tracer_ ? tracer_->scope(TraceTrack::kCompute, backward_names_[i], "backward")
                           : Tracer::Scope(nullptr, TraceTrack::kCompute, {}, nullptr);
      if (din) std::fill(din, din + NC, Real(0));
      layers_[i]->backward(in, i == last ? nullptr : dcur, din, layer_scratch, b);
    }
    if (on_layer_final) on_layer_final(i);
    std::swap(dcur, dnext);
  }
}

template <typename Real>
void GptModel<Real>::zero_grads() {
  std::memset(grads(), 0, layout_.numel() * sizeof(Real));
}

template class GptModel<float>;
template class GptModel<double>;

}  // namespace etr::gpt
