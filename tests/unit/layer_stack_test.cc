// LayerStack (runtime/layer_stack.h), the stage seam, on the example GPT-2's layers:
// - micro-batches in flight in separate activation slots give bitwise the losses and
//   gradients of running them one after the other (the reference: one slot);
// - hooks come in the documented order (forward 0..n-1; backward n-1..0, each layer's
//   before_backward then after_backward);
// - activation_bytes() is what plan() takes from the allocator (the allocator's own
//   count is the reference), and each extra slot costs one slot;
// - shared parameters are declared and checked; a device without kernels is refused.
#include "runtime/layer_stack.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "examples/gpt/gpt_model.h"
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
  const std::vector<std::pair<char, int>> expected = {
      {'f', 0}, {'f', 1}, {'f', 2}, {'f', 3}, {'b', 3}, {'a', 3},
      {'b', 2}, {'a', 2}, {'b', 1}, {'a', 1}, {'b', 0}, {'a', 0}};
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
  EXPECT_THROW(f.stack->forward(m.batch(2, 4)), InvalidArgument);      // too many rows
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

TEST(KernelDispatch, OnlyTheHostHasKernelsYet) {
  EXPECT_STREQ(kernels_for<float>(Device::cpu()).name, "cpu");
  EXPECT_THROW(kernels_for<float>(Device{DeviceType::kCuda, 0}), InvalidArgument);
  Fixture f;
  ExecContext<float> ctx;
  ctx.device = Device{DeviceType::kCuda, 0};
  EXPECT_THROW(f.stack->set_context(ctx), InvalidArgument);
}

}  // namespace
}  // namespace etr
