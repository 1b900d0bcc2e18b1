// LayerStack (runtime/layer_stack.h), the stage seam, on the example GPT-2's layers:
// - micro-batches in flight in separate activation slots give bitwise the losses and
//   gradients of running them one after the other (the reference: one slot);
// - hooks come in the documented order (forward 0..n-1; backward n-1..0, each layer's
//   before_backward then after_backward);
// - activation_bytes() is what plan() takes from the allocator (the allocator's own
//   count is the reference), and each extra slot costs one slot;
// - shared parameters are declared and checked; a device without kernels is refused;
// - the split backward (backward_input then backward_weight, ZB-H1) gives bitwise the
//   gradients of backward(), in float and double, for the whole model, a first stage
//   (embedding + block, given dout) and a last stage (blocks + head, giving din), with one
//   micro-batch and with two whose W's run after both B's; a layer that cannot split runs
//   whole in B; its hooks come in the documented order; its storage is planned; a stack
//   not planned for it, or a slot out of turn, is refused.
#include "runtime/layer_stack.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "examples/gpt/embedding_layer.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/transformer_block.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/kernels/dispatch.h"

namespace etr {
namespace {

gpt::GptConfig tiny() {
  gpt::GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 8;
  c.seq_len = 6;
  c.vocab_size = 11;
  return c;
}

struct Micro {
  std::vector<int32_t> tokens, targets;
  Batch batch(int64_t B, int64_t T) const {
    return Batch{tokens.data(), targets.data(), B, T, 1.0 / static_cast<double>(2 * B * T)};
  }
};

Micro random_micro(int64_t n, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  Micro m;
  for (int64_t i = 0; i < n; ++i) {
    m.tokens.push_back(tok(rng));
    m.targets.push_back(tok(rng));
  }
  return m;
}

// A GPT-2 stack bound to its own parameter and gradient vectors, initialised.
struct Fixture {
  std::unique_ptr<LayerStack<float>> stack = gpt::build_stack<float>(tiny());
  std::vector<float> params, grads;
  Fixture() {
    params.resize(stack->layout().numel());
    grads.assign(stack->layout().numel(), 0.0f);
    gpt::init_params(tiny(), stack->layout(), params.data(), 7);
    stack->bind(params.data(), grads.data());
  }
};

TEST(LayerStack, MicroBatchesInFlightMatchOneAfterTheOtherBitwise) {
  const int64_t B = 2, T = 5;
  const Micro a = random_micro(B * T, 11, 1), b = random_micro(B * T, 11, 2);
  HostAllocator alloc;  // outlives the stacks that plan from it

  Fixture ref;
  ref.stack->plan(alloc, B, T, 1);
  const double la = ref.stack->forward(a.batch(B, T));
  ref.stack->backward(a.batch(B, T));
  const double lb = ref.stack->forward(b.batch(B, T));
  ref.stack->backward(b.batch(B, T));

  Fixture run;  // forward a, forward b, then both backwards: a schedule with 2 in flight
  run.stack->plan(alloc, B, T, 2);
  const double ra = run.stack->forward(a.batch(B, T), {}, 0);
  const double rb = run.stack->forward(b.batch(B, T), {}, 1);
  run.stack->backward(a.batch(B, T), {}, 0);
  run.stack->backward(b.batch(B, T), {}, 1);

  EXPECT_EQ(la, ra);
  EXPECT_EQ(lb, rb);
  EXPECT_NE(la, lb);  // the two micro-batches differ, so a mixed-up slot would show
  ASSERT_EQ(ref.grads.size(), run.grads.size());
  EXPECT_EQ(ref.grads, run.grads);
}

TEST(LayerStack, HooksComeInLayerOrder) {
  HostAllocator alloc;
  Fixture f;
  f.stack->plan(alloc, 1, 4);
  std::vector<std::pair<char, int>> calls;
  StackHooks hooks;
  hooks.before_forward = [&](int i) { calls.emplace_back('f', i); };
  hooks.before_backward = [&](int i) { calls.emplace_back('b', i); };
  hooks.after_backward = [&](int i) { calls.emplace_back('a', i); };
  const Micro m = random_micro(4, 11, 3);
  f.stack->forward(m.batch(1, 4), hooks);
  f.stack->backward(m.batch(1, 4), hooks);
  const std::vector<std::pair<char, int>> expected = {{'f', 0}, {'f', 1}, {'f', 2}, {'f', 3},
                                                      {'b', 3}, {'a', 3}, {'b', 2}, {'a', 2},
                                                      {'b', 1}, {'a', 1}, {'b', 0}, {'a', 0}};
  EXPECT_EQ(calls, expected);
}

TEST(LayerStack, ActivationBytesAreWhatPlanTakes) {
  for (int in_flight : {1, 3}) {
    HostAllocator alloc;  // declared before the stack that plans from it: outlives it
    Fixture f;
    const size_t before = alloc.stats().in_use;
    f.stack->plan(alloc, 3, 6, in_flight);
    EXPECT_EQ(alloc.stats().in_use - before, f.stack->activation_bytes(3, 6, in_flight))
        << in_flight << " in flight";
  }
  Fixture f;
  // Each extra slot holds every layer's activations once more.
  int64_t slot = 0;
  for (int i = 0; i < f.stack->size(); ++i) slot += f.stack->layer(i).activation_numel(3, 6);
  EXPECT_EQ(f.stack->activation_bytes(3, 6, 3) - f.stack->activation_bytes(3, 6, 1),
            static_cast<size_t>(2 * slot) * sizeof(float));
}

TEST(LayerStack, RefusesWhatWasNotPlanned) {
  HostAllocator alloc;
  Fixture f;
  f.stack->plan(alloc, 1, 4, 2);
  const Micro m = random_micro(12, 11, 4);
  EXPECT_THROW(f.stack->forward(m.batch(2, 4)), InvalidArgument);         // too many rows
  EXPECT_THROW(f.stack->forward(m.batch(1, 4), {}, 2), InvalidArgument);  // no slot 2
  EXPECT_THROW(f.stack->plan(alloc, 1, 4, 0), InvalidArgument);
}

TEST(LayerStack, SharedParametersAreDeclaredByTheirOwner) {
  Fixture f;
  const int head = f.stack->size() - 1;
  ASSERT_EQ(f.stack->shared().size(), 1u);
  EXPECT_EQ(f.stack->shared()[0].name, "wte.weight");
  EXPECT_EQ(f.stack->shared()[0].owner, 0);
  EXPECT_EQ(f.stack->shared()[0].user, head);
  EXPECT_THROW(f.stack->share("no.such.tensor", 0, head), InvalidArgument);
  EXPECT_THROW(f.stack->share("wte.weight", 1, head), InvalidArgument);  // not layer 1's
  EXPECT_THROW(f.stack->share("wte.weight", 0, 0), InvalidArgument);     // not a later layer
}

TEST(KernelDispatch, CpuEverywhereCudaForFloatInCudaBuilds) {
  EXPECT_STREQ(kernels_for<float>(Device::cpu()).name, "cpu");
  EXPECT_STREQ(kernels_for<double>(Device::cpu()).name, "cpu");
  const Device gpu{DeviceType::kCuda, 0};
  // The CUDA kernels are float only; double (the gradient checks) has the CPU's alone.
  EXPECT_THROW(kernels_for<double>(gpu), InvalidArgument);
#ifdef ETR_HAVE_CUDA
  EXPECT_STREQ(kernels_for<float>(gpu).name, "cuda");
#else
  EXPECT_THROW(kernels_for<float>(gpu), InvalidArgument);
  Fixture f;
  ExecContext<float> ctx;
  ctx.device = gpu;
  EXPECT_THROW(f.stack->set_context(ctx), InvalidArgument);
#endif
  // Every CPU kernel ignores the stream: the same call with any stream gives the same bits.
  const KernelSet<float>& k = kernels_for<float>(Device::cpu());
  std::vector<float> x = {1.5f, -2.0f, 0.25f}, y(3), z(3);
  BoundKernels<float>(k, nullptr).gelu_forward(y.data(), x.data(), int64_t{3});
  int stream_token = 0;
  BoundKernels<float>(k, &stream_token).gelu_forward(z.data(), x.data(), int64_t{3});
  EXPECT_EQ(y, z);
  EXPECT_NE(y[0], 0.0f);
}

// ---- split backward ----

// A transformer block that does not split its backward (Layer's defaults).
template <typename Real>
class UnsplitBlock final : public Layer<Real> {
 public:
  UnsplitBlock(const gpt::GptConfig& c, int block) : block_(c, block) {}
  std::string name() const override { return block_.name(); }
  void declare(ParamLayout& layout, int index) override { block_.declare(layout, index); }
  void bind(const ParamLayout& layout, Real* params, Real* grads) override {
    block_.bind(layout, params, grads);
  }
  int64_t output_numel(int64_t B, int64_t T) const override { return block_.output_numel(B, T); }
  int64_t activation_numel(int64_t B, int64_t T) const override {
    return block_.activation_numel(B, T);
  }
  int64_t scratch_numel(int64_t B, int64_t T) const override { return block_.scratch_numel(B, T); }
  void plan(Real* activations, int64_t B, int64_t T) override { block_.plan(activations, B, T); }
  const Real* output() const override { return block_.output(); }
  void forward(const Real* in, const Batch& batch) override { block_.forward(in, batch); }
  void backward(const Real* in, const Real* dout, Real* din, Real* scratch,
                const Batch& batch) override {
    block_.backward(in, dout, din, scratch, batch);
  }

 private:
  gpt::TransformerBlock<Real> block_;
};

// Which layers of the tiny GPT-2 a stack holds.
enum class Part {
  kWhole,    // embedding, h.0, h.1, head
  kFirst,    // embedding, h.0: a first pipeline stage, handed dout
  kLast,     // h.0, h.1, head (wte borrowed): a last stage, handing back din
  kUnsplit,  // embedding, h.0 (not splitting), h.1, head
};

template <typename Real>
std::unique_ptr<LayerStack<Real>> make_stack(Part part) {
  const gpt::GptConfig c = tiny();
  if (part == Part::kWhole) return gpt::build_stack<Real>(c);
  std::vector<std::unique_ptr<Layer<Real>>> layers;
  std::vector<TensorEntry> borrowed;
  if (part != Part::kLast) layers.push_back(std::make_unique<gpt::EmbeddingLayer<Real>>(c));
  if (part == Part::kUnsplit) {
    layers.push_back(std::make_unique<UnsplitBlock<Real>>(c, 0));
  } else {
    layers.push_back(std::make_unique<gpt::TransformerBlock<Real>>(c, 0));
  }
  if (part == Part::kFirst) return std::make_unique<LayerStack<Real>>(std::move(layers));
  layers.push_back(std::make_unique<gpt::TransformerBlock<Real>>(c, 1));
  layers.push_back(std::make_unique<gpt::HeadLayer<Real>>(c));
  if (part == Part::kLast) {
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

// One micro-batch of a stack: tokens and targets, and the stage's input (kLast) or the
// gradient of its output (kFirst).
template <typename Real>
struct StageMicro {
  Micro m;
  std::vector<Real> input, dout;
};

// The gradients (and per micro-batch, the gradient of the stage input) of running the
// micro-batches whole, one after the other in one slot, or split: every forward into its
// own slot, every backward_input, then every backward_weight (ZB-H1's order).
template <typename Real>
struct Result {
  std::vector<Real> grads;
  std::vector<std::vector<Real>> din;
};

template <typename Real>
Result<Real> run(Part part, const std::vector<StageMicro<Real>>& micro, bool split) {
  const int64_t B = 2, T = 5;
  const int n = static_cast<int>(micro.size());
  HostAllocator alloc;
  auto stack = make_stack<Real>(part);
  std::vector<Real> params = random_reals<Real>(stack->layout().numel(), 11, 0.3);
  Result<Real> r;
  r.grads.assign(params.size(), Real(0));
  r.din.assign(micro.size(), std::vector<Real>(static_cast<size_t>(B * T * 8), Real(0)));
  stack->bind(params.data(), r.grads.data());
  stack->plan(alloc, B, T, split ? n : 1, split);
  auto in = [&](int i) { return micro[i].input.empty() ? nullptr : micro[i].input.data(); };
  auto dout = [&](int i) { return micro[i].dout.empty() ? nullptr : micro[i].dout.data(); };
  auto din = [&](int i) { return part == Part::kLast ? r.din[i].data() : nullptr; };
  for (int i = 0; i < n; ++i) {
    const Batch b = micro[i].m.batch(B, T);
    if (!split) {
      stack->forward(b, {}, 0, in(i));
      stack->backward(b, {}, 0, dout(i), din(i));
    } else {
      stack->forward(b, {}, i, in(i));
    }
  }
  if (split) {
    for (int i = 0; i < n; ++i) {
      stack->backward_input(micro[i].m.batch(B, T), {}, i, dout(i), din(i));
    }
    for (int i = 0; i < n; ++i) stack->backward_weight(micro[i].m.batch(B, T), {}, i);
  }
  return r;
}

template <typename Real>
class SplitBackward : public ::testing::Test {};
using Reals = ::testing::Types<float, double>;
TYPED_TEST_SUITE(SplitBackward, Reals);

TYPED_TEST(SplitBackward, MatchesWholeBackwardBitwise) {
  using Real = TypeParam;
  const int64_t N = 2 * 5, C = 8;
  for (Part part : {Part::kWhole, Part::kFirst, Part::kLast, Part::kUnsplit}) {
    std::vector<StageMicro<Real>> micro;
    for (int i = 0; i < 2; ++i) {
      StageMicro<Real> s{random_micro(N, 11, 20 + i), {}, {}};
      if (part == Part::kLast) s.input = random_reals<Real>(N * C, 30 + i, 1.0);
      if (part == Part::kFirst) s.dout = random_reals<Real>(N * C, 40 + i, 0.1);
      micro.push_back(std::move(s));
    }
    for (int n : {1, 2}) {
      const std::vector<StageMicro<Real>> some(micro.begin(), micro.begin() + n);
      const Result<Real> whole = run<Real>(part, some, false);
      const Result<Real> split = run<Real>(part, some, true);
      const int p = static_cast<int>(part);
      EXPECT_EQ(whole.grads, split.grads) << "part " << p << ", " << n << " micro-batches";
      EXPECT_EQ(whole.din, split.din) << "part " << p << ", " << n << " micro-batches";
      size_t nonzero = 0;
      for (Real g : split.grads) nonzero += g != 0;
      EXPECT_GT(nonzero, split.grads.size() / 2) << "part " << p;
      if (part == Part::kLast) {
        EXPECT_NE(split.din[0], std::vector<Real>(N * C, Real(0)));
      }
    }
  }
}

TEST(LayerStack, SplitBackwardHooksComeInLayerOrder) {
  HostAllocator alloc;
  Fixture f;
  f.stack->plan(alloc, 1, 4, 1, true);
  std::vector<std::pair<char, int>> calls;
  StackHooks hooks;
  hooks.before_backward = [&](int i) { calls.emplace_back('b', i); };
  hooks.after_backward = [&](int i) { calls.emplace_back('a', i); };
  const Micro m = random_micro(4, 11, 3);
  f.stack->forward(m.batch(1, 4), hooks);
  f.stack->backward_input(m.batch(1, 4), hooks);
  const std::vector<std::pair<char, int>> input = {{'b', 3}, {'b', 2}, {'b', 1}, {'b', 0}};
  EXPECT_EQ(calls, input);
  calls.clear();
  f.stack->backward_weight(m.batch(1, 4), hooks);
  const std::vector<std::pair<char, int>> weight = {{'b', 3}, {'a', 3}, {'b', 2}, {'a', 2},
                                                    {'b', 1}, {'a', 1}, {'b', 0}, {'a', 0}};
  EXPECT_EQ(calls, weight);
}

TEST(LayerStack, SplitBackwardNeedsASplitPlanAndItsTurn) {
  HostAllocator alloc;
  Fixture f;
  const Micro m = random_micro(4, 11, 5);
  f.stack->plan(alloc, 1, 4, 2);  // not split
  EXPECT_FALSE(f.stack->split());
  f.stack->forward(m.batch(1, 4));
  EXPECT_THROW(f.stack->backward_input(m.batch(1, 4)), InvalidArgument);
  EXPECT_THROW(f.stack->backward_weight(m.batch(1, 4)), InvalidArgument);

  f.stack->plan(alloc, 1, 4, 2, true);
  EXPECT_TRUE(f.stack->split());
  f.stack->forward(m.batch(1, 4), {}, 0);
  EXPECT_THROW(f.stack->backward_weight(m.batch(1, 4), {}, 0), InvalidArgument);  // no B yet
  f.stack->backward_input(m.batch(1, 4), {}, 0);
  EXPECT_THROW(f.stack->backward_input(m.batch(1, 4), {}, 0), InvalidArgument);  // W pending
  EXPECT_THROW(f.stack->forward(m.batch(1, 4), {}, 0), InvalidArgument);         // slot held
  EXPECT_NO_THROW(f.stack->forward(m.batch(1, 4), {}, 1));                       // another slot
  EXPECT_THROW(f.stack->backward_input(m.batch(1, 4), {}, 2), InvalidArgument);  // no slot 2
  f.stack->backward_weight(m.batch(1, 4), {}, 0);
  EXPECT_NO_THROW(f.stack->forward(m.batch(1, 4), {}, 0));  // released
}

TEST(LayerStack, SplitActivationBytesAreWhatPlanTakes) {
  const int64_t B = 3, T = 6, N = B * T, C = tiny().d_model, L = tiny().n_layer;
  Fixture f;
  // Per micro-batch: each block keeps 9 N C (dqkv, dx1, dfch, dout), the embedding its
  // dout N C, the head nothing.
  int64_t split = 0;
  for (int i = 0; i < f.stack->size(); ++i) split += f.stack->layer(i).split_numel(B, T);
  EXPECT_EQ(split, (9 * L + 1) * N * C);
  for (int in_flight : {1, 3}) {
    HostAllocator alloc;
    Fixture g;
    const size_t before = alloc.stats().in_use;
    g.stack->plan(alloc, B, T, in_flight, true);
    EXPECT_EQ(alloc.stats().in_use - before, g.stack->activation_bytes(B, T, in_flight, true))
        << in_flight << " in flight";
    EXPECT_EQ(g.stack->activation_bytes(B, T, in_flight, true) -
                  g.stack->activation_bytes(B, T, in_flight, false),
              static_cast<size_t>(in_flight * split) * sizeof(float));
  }
}

}  // namespace
}  // namespace etr
