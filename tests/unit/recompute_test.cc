// Activation recomputation (LayerStack's plan(..., recompute = true), runtime/layer_stack.h)
// on the example GPT-2, always against the same stack planned without it:
// - losses, gradients, a first stage's outputs and a last stage's input gradients are
//   bitwise equal (memcmp), in float and double, with one slot (micro-batches one after
//   the other) and with two (both forwards before both backwards, the pipeline pattern),
//   for micro-batches smaller than planned, for the whole model and for pipeline stages
//   that begin (last stage) or end (first stage) with a block, and at sizes where the
//   kernels run on several threads;
// - hooks come in the same order (the recomputation is inside a layer's backward step);
// - activation_bytes() with recompute is what plan() takes from the allocator, less than
//   without for several blocks, and saves per slot each block's activations but its
//   output, less the one shared buffer; release() gives it back;
// - recompute with the split backward is refused with one sentence.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "examples/gpt/embedding_layer.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/head_layer.h"
#include "examples/gpt/transformer_block.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/kernels/cpu/threads.h"
#include "runtime/layer_stack.h"

namespace etr {
namespace {

gpt::GptConfig small() {
  gpt::GptConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.d_model = 12;
  c.seq_len = 7;
  c.vocab_size = 13;
  return c;
}

constexpr int64_t kB = 3, kT = 7;  // planned; the micro-batches below are smaller or equal

enum class Part {
  kWhole,  // embedding, h.0 .. h.2, head
  kFirst,  // embedding, h.0, h.1: a first pipeline stage ending in a block, handed dout
  kLast,   // h.0 .. h.2, head (wte borrowed): a last stage beginning with a block
};

template <typename Real>
std::unique_ptr<LayerStack<Real>> make_stack(Part part, const gpt::GptConfig& c = small()) {
  if (part == Part::kWhole) return gpt::build_stack<Real>(c);
  std::vector<std::unique_ptr<Layer<Real>>> layers;
  std::vector<TensorEntry> borrowed;
  if (part == Part::kFirst) layers.push_back(std::make_unique<gpt::EmbeddingLayer<Real>>(c));
  const int blocks = static_cast<int>(c.n_layer) - (part == Part::kFirst ? 1 : 0);
  for (int i = 0; i < blocks; ++i) {
    layers.push_back(std::make_unique<gpt::TransformerBlock<Real>>(c, i));
  }
  if (part == Part::kLast) {
    layers.push_back(std::make_unique<gpt::HeadLayer<Real>>(c));
    borrowed.push_back(*gpt::build_stack<Real>(c)->layout().find("wte.weight"));
  }
  return std::make_unique<LayerStack<Real>>(std::move(layers), borrowed);
}

template <typename Real>
std::vector<Real> random_reals(int64_t n, uint64_t seed, double scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<Real> v(static_cast<size_t>(n));
  for (Real& x : v) x = static_cast<Real>(normal(rng));
  return v;
}

// One micro-batch: its size, tokens and targets, and a stage's input (kLast) or the
// gradient of its output (kFirst).
template <typename Real>
struct Micro {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens, targets;
  std::vector<Real> input, dout;
  Batch batch() const {
    return Batch{tokens.data(), targets.data(), B, T, 1.0 / static_cast<double>(2 * B * T)};
  }
};

template <typename Real>
Micro<Real> random_micro(Part part, int64_t B, int64_t T, uint64_t seed,
                         const gpt::GptConfig& c = small()) {
  const int64_t N = B * T, C = c.d_model;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
  Micro<Real> m;
  m.B = B;
  m.T = T;
  for (int64_t i = 0; i < N; ++i) {
    m.tokens.push_back(tok(rng));
    m.targets.push_back(tok(rng));
  }
  if (part == Part::kLast) m.input = random_reals<Real>(N * C, seed + 100, 1.0);
  if (part == Part::kFirst) m.dout = random_reals<Real>(N * C, seed + 200, 0.1);
  return m;
}

// What a run produces: per micro-batch the loss, the stage output (kFirst) and the
// gradient of the stage input (kLast); the accumulated parameter gradients.
template <typename Real>
struct Result {
  std::vector<double> losses;
  std::vector<std::vector<Real>> outputs, din;
  std::vector<Real> grads;
};

// Runs `micro` through a fresh stack of `c` planned for B x T with `in_flight` slots: with
// one slot each micro-batch's forward then its backward; with more, every forward into its
// own slot, then every backward in the same order.
template <typename Real>
Result<Real> run(Part part, const std::vector<Micro<Real>>& micro, int in_flight, bool recompute,
                 const gpt::GptConfig& c = small(), int64_t B = kB, int64_t T = kT) {
  const int n = static_cast<int>(micro.size());
  const int64_t C = c.d_model;
  HostAllocator alloc;  // outlives the stack's buffers
  auto stack = make_stack<Real>(part, c);
  std::vector<Real> params = random_reals<Real>(stack->layout().numel(), 11, 0.3);
  Result<Real> r;
  r.grads.assign(params.size(), Real(0));
  r.losses.assign(micro.size(), 0.0);
  r.outputs.resize(micro.size());
  r.din.resize(micro.size());
  stack->bind(params.data(), r.grads.data());
  stack->plan(alloc, B, T, in_flight, false, recompute);
  EXPECT_EQ(stack->recompute(), recompute);
  auto forward = [&](int i, int slot) {
    const Micro<Real>& m = micro[i];
    r.losses[i] = stack->forward(m.batch(), {}, slot, m.input.empty() ? nullptr : m.input.data());
    if (part == Part::kFirst) {
      const Real* out = stack->output(slot);
      r.outputs[i].assign(out, out + m.B * m.T * C);
    }
  };
  auto backward = [&](int i, int slot) {
    const Micro<Real>& m = micro[i];
    if (part == Part::kLast) r.din[i].assign(static_cast<size_t>(m.B * m.T * C), Real(0));
    stack->backward(m.batch(), {}, slot, m.dout.empty() ? nullptr : m.dout.data(),
                    part == Part::kLast ? r.din[i].data() : nullptr);
  };
  if (in_flight == 1) {
    for (int i = 0; i < n; ++i) {
      forward(i, 0);
      backward(i, 0);
    }
  } else {
    for (int i = 0; i < n; ++i) forward(i, i % in_flight);
    for (int i = 0; i < n; ++i) backward(i, i % in_flight);
  }
  return r;
}

template <typename Real>
bool same_bits(const std::vector<Real>& a, const std::vector<Real>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(Real)) == 0);
}

template <typename Real>
class Recompute : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(Recompute, Reals);

TYPED_TEST(Recompute, MatchesStoredActivationsBitwise) {
  using Real = TypeParam;
  for (Part part : {Part::kWhole, Part::kFirst, Part::kLast}) {
    // The planned size, and two smaller ones (fewer rows; fewer rows and positions).
    const std::vector<Micro<Real>> micro = {random_micro<Real>(part, kB, kT, 1),
                                            random_micro<Real>(part, 2, kT, 2),
                                            random_micro<Real>(part, 1, 5, 3)};
    for (int in_flight : {1, 2}) {
      const std::vector<Micro<Real>> some(micro.begin(), micro.begin() + (in_flight == 1 ? 3 : 2));
      const Result<Real> stored = run<Real>(part, some, in_flight, false);
      const Result<Real> recomputed = run<Real>(part, some, in_flight, true);
      const std::string what = "part " + std::to_string(static_cast<int>(part)) + ", " +
                               std::to_string(in_flight) + " in flight";
      EXPECT_TRUE(same_bits(stored.grads, recomputed.grads)) << what;
      EXPECT_TRUE(same_bits(stored.losses, recomputed.losses)) << what;
      for (size_t i = 0; i < some.size(); ++i) {
        EXPECT_TRUE(same_bits(stored.outputs[i], recomputed.outputs[i])) << what << ", " << i;
        EXPECT_TRUE(same_bits(stored.din[i], recomputed.din[i])) << what << ", " << i;
      }
      // Something was computed: most gradients nonzero, distinct losses, nonzero din.
      size_t nonzero = 0;
      for (Real g : recomputed.grads) nonzero += g != 0;
      EXPECT_GT(nonzero, recomputed.grads.size() / 2) << what;
      if (part != Part::kFirst) {
        EXPECT_NE(recomputed.losses[0], recomputed.losses[1]) << what;
      }
      if (part == Part::kLast) {
        EXPECT_NE(recomputed.din[1], std::vector<Real>(recomputed.din[1].size(), Real(0)));
      }
    }
  }
}

// Sizes at which the kernels fork (on 2 threads) and OpenBLAS's blocked products run:
// still bitwise.
TEST(Recompute, MatchesStoredActivationsBitwiseAtThreadedSizes) {
  const int threads = cpu::num_threads();  // process-wide: put back at the end
  cpu::set_num_threads(2);
  gpt::GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 64;
  c.seq_len = 64;
  c.vocab_size = 97;
  const int64_t B = 4, T = 64;
  for (Part part : {Part::kWhole, Part::kLast}) {
    const std::vector<Micro<float>> micro = {random_micro<float>(part, B, T, 7, c),
                                             random_micro<float>(part, 3, 40, 8, c)};
    for (int in_flight : {1, 2}) {
      const Result<float> stored = run<float>(part, micro, in_flight, false, c, B, T);
      const Result<float> recomputed = run<float>(part, micro, in_flight, true, c, B, T);
      EXPECT_TRUE(same_bits(stored.grads, recomputed.grads)) << in_flight << " in flight";
      EXPECT_TRUE(same_bits(stored.losses, recomputed.losses)) << in_flight << " in flight";
      for (size_t i = 0; i < micro.size(); ++i) {
        EXPECT_TRUE(same_bits(stored.din[i], recomputed.din[i])) << in_flight << ", " << i;
      }
    }
  }
  cpu::set_num_threads(threads);
}

TEST(Recompute, HooksComeInLayerOrder) {
  HostAllocator alloc;
  auto stack = make_stack<float>(Part::kWhole);
  std::vector<float> params = random_reals<float>(stack->layout().numel(), 5, 0.3);
  std::vector<float> grads(params.size(), 0.0f);
  stack->bind(params.data(), grads.data());
  stack->plan(alloc, 1, 4, 1, false, true);
  std::vector<std::pair<char, int>> calls;
  StackHooks hooks;
  hooks.before_forward = [&](int i) { calls.emplace_back('f', i); };
  hooks.before_backward = [&](int i) { calls.emplace_back('b', i); };
  hooks.after_backward = [&](int i) { calls.emplace_back('a', i); };
  const Micro<float> m = random_micro<float>(Part::kWhole, 1, 4, 6);
  stack->forward(m.batch(), hooks);
  stack->backward(m.batch(), hooks);
  std::vector<std::pair<char, int>> expected;
  const int n = stack->size();
  for (int i = 0; i < n; ++i) expected.emplace_back('f', i);
  for (int i = n - 1; i >= 0; --i) {
    expected.emplace_back('b', i);
    expected.emplace_back('a', i);
  }
  EXPECT_EQ(calls, expected);
}

TEST(Recompute, ActivationBytesAreWhatPlanTakesAndLess) {
  const int64_t B = 3, T = 6;
  for (int in_flight : {1, 3}) {
    HostAllocator alloc;  // declared before the stack that plans from it: outlives it
    auto stack = make_stack<float>(Part::kWhole);
    const size_t before = alloc.stats().in_use;
    stack->plan(alloc, B, T, in_flight, false, true);
    const size_t with = stack->activation_bytes(B, T, in_flight, false, true);
    EXPECT_EQ(alloc.stats().in_use - before, with) << in_flight << " in flight";
    const size_t without = stack->activation_bytes(B, T, in_flight);
    EXPECT_LT(with, without) << in_flight << " in flight";
    // Per slot each block keeps its output only; once, the largest block's activations.
    int64_t saved = 0, shared = 0;
    for (int i = 0; i < stack->size(); ++i) {
      const Layer<float>& l = stack->layer(i);
      if (!l.recomputable()) continue;
      saved += l.activation_numel(B, T) - l.output_numel(B, T);
      shared = std::max(shared, l.activation_numel(B, T));
    }
    EXPECT_EQ(without - with, static_cast<size_t>(in_flight * saved - shared) * sizeof(float));
    // release() gives all of it back; the next plan() takes it again.
    stack->release();
    EXPECT_EQ(alloc.stats().in_use, before);
    EXPECT_EQ(stack->in_flight(), 0);
    EXPECT_THROW(stack->forward(random_micro<float>(Part::kWhole, 1, 4, 9).batch()),
                 InvalidArgument);
    stack->plan(alloc, B, T, in_flight, false, true);
    EXPECT_EQ(alloc.stats().in_use - before, with);
  }
  // Only the blocks are recomputed: the embedding and the head keep their activations.
  auto stack = make_stack<float>(Part::kWhole);
  EXPECT_FALSE(stack->layer(0).recomputable());
  EXPECT_TRUE(stack->layer(1).recomputable());
  EXPECT_FALSE(stack->layer(stack->size() - 1).recomputable());
}

TEST(Recompute, RefusesTheSplitBackward) {
  HostAllocator alloc;
  auto stack = make_stack<float>(Part::kWhole);
  const std::string sentence =
      "activation recomputation does not combine with the split backward (ZB-H1) yet";
  try {
    stack->plan(alloc, 1, 4, 1, true, true);
    ADD_FAILURE() << "plan() took recompute with split";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()), sentence);
  }
  EXPECT_THROW(stack->activation_bytes(1, 4, 1, true, true), InvalidArgument);
  EXPECT_NO_THROW(stack->plan(alloc, 1, 4, 1, true, false));
  EXPECT_NO_THROW(stack->plan(alloc, 1, 4, 1, false, true));
}

}  // namespace
}  // namespace etr
