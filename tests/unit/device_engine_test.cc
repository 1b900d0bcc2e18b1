// The device half of the training loop, on the host (no GPU here; tests/gpu runs the same
// pieces on a GPU against the host):
// - DeviceEngine with host memory takes bitwise the steps of a reference written out from
//   the optimizer's parts (etr::AdamW, grad_norm, clip_grad_norm), clipping included, and
//   its checkpoint view (states, held_states + restored) is the state itself;
// - LayerStack::forward_accumulate adds forward()'s loss x num / den, bitwise;
// - TokenStaging hands the host's batch through; choose_device maps runtime.device, the
//   local rank and the visible GPUs to a device, or to one sentence; PinnedHostAllocator
//   counts and refuses as the other allocators do.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "examples/gpt/gpt_model.h"
#include "parallel/device_engine.h"
#include "parallel/token_staging.h"
#include "runtime/adamw.h"
#include "runtime/device_context.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/layer_stack.h"
#include "runtime/pinned_allocator.h"
#include "runtime/state_names.h"

namespace etr {
namespace {

gpt::GptConfig odd_config() {
  gpt::GptConfig c;
  c.n_layer = 2;
  c.n_head = 3;
  c.d_model = 48;
  c.seq_len = 19;
  c.vocab_size = 61;
  return c;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& t : out) t = pick(rng);
  return out;
}

void init(const gpt::GptConfig& c, const ParamLayout& layout, float* params) {
  gpt::init_params<float>(c, layout, params, /*seed=*/3);
}

TEST(DeviceEngineOnHost, StepsEqualTheOptimizersPartsBitwise) {
  const gpt::GptConfig c = odd_config();
  const int64_t B = 2, T = 17;
  AdamWOptions o;
  o.weight_decay = 0.1;
  DataParallelOptions options;
  options.adamw = o;

  HostAllocator alloc;
  auto stack = gpt::build_stack<float>(c);
  DeviceEngine engine(*stack, alloc, nullptr, options);
  engine.initialize_parameters([&](const ParamLayout& l, float* p) { init(c, l, p); });
  stack->plan(alloc, B, T);

  auto ref = gpt::build_stack<float>(c);
  const ParamLayout& layout = ref->layout();
  const int64_t n = layout.numel();
  std::vector<float> p(static_cast<size_t>(n)), g(p.size()), m(p.size()), v(p.size());
  init(c, layout, p.data());
  ref->bind(p.data(), g.data());
  ref->plan(alloc, B, T);
  AdamW adamw(layout);

  for (int64_t t = 1; t <= 4; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    const std::vector<int32_t> x = random_tokens(B * T, c.vocab_size, 10 + t);
    const std::vector<int32_t> y = random_tokens(B * T, c.vocab_size, 20 + t);
    const Batch batch{x.data(), y.data(), B, T, 1.0 / static_cast<double>(B * T)};
    const double lr = 1e-3 * static_cast<double>(t);
    const double max_norm = t % 2 ? 0.05 : 0.0;  // clipping on odd steps

    engine.begin_step();
    double loss = 0;
    stack->forward_accumulate(batch, &loss, 1.0, 1.0);
    stack->backward(batch);
    const double norm = engine.grad_norm();
    engine.optimizer_step({t, lr, norm, max_norm});

    std::fill(g.begin(), g.end(), 0.0f);
    const double ref_loss = ref->forward(batch);
    ref->backward(batch);
    const double ref_norm = grad_norm(g.data(), n);
    clip_grad_norm(g.data(), n, ref_norm, max_norm);
    adamw.step(p.data(), g.data(), m.data(), v.data(), 0, n, t, lr, o);

    EXPECT_EQ(loss, ref_loss);
    EXPECT_EQ(norm, ref_norm);
    if (t % 2) {
      ASSERT_GT(norm, max_norm) << "the clipping step must clip";
    }
    EXPECT_EQ(std::memcmp(engine.parameters(), p.data(), p.size() * sizeof(float)), 0);
  }
  const std::vector<NamedState> saved = engine.states();
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved[0].name, state::kParam);
  EXPECT_EQ(std::memcmp(saved[1].data, m.data(), m.size() * sizeof(float)), 0) << "adam.m";
  EXPECT_EQ(std::memcmp(saved[2].data, v.data(), v.size() * sizeof(float)), 0) << "adam.v";
}

TEST(DeviceEngineOnHost, RestoreFillsTheHeldStatesAndGatherReadsThem) {
  const gpt::GptConfig c = odd_config();
  HostAllocator alloc;
  auto stack = gpt::build_stack<float>(c);
  DeviceEngine engine(*stack, alloc, nullptr, DataParallelOptions{});
  const int64_t n = stack->layout().numel();
  const std::vector<HeldState> held = engine.held_states();
  ASSERT_EQ(held.size(), 3u);
  for (size_t k = 0; k < held.size(); ++k) {
    float* s = held[k].holder->data<float>(held[k].name);
    for (int64_t i = 0; i < n; ++i) s[i] = static_cast<float>(k * 1000 + static_cast<size_t>(i % 997));
  }
  engine.restored();
  std::vector<float> out(static_cast<size_t>(n));
  engine.gather_state(state::kAdamV, out.data());
  EXPECT_EQ(out[5], 2005.0f);
  EXPECT_EQ(engine.parameters()[n - 1], static_cast<float>((n - 1) % 997));
  EXPECT_EQ(engine.memory().state_bytes(), 4 * static_cast<size_t>(n) * sizeof(float));
}

TEST(ForwardAccumulate, AddsForwardsLossTimesTheWeightBitwise) {
  const gpt::GptConfig c = odd_config();
  const int64_t B = 3, T = 19;
  HostAllocator alloc;
  auto stack = gpt::build_stack<float>(c);
  std::vector<float> p(static_cast<size_t>(stack->layout().numel())), g(p.size());
  init(c, stack->layout(), p.data());
  stack->bind(p.data(), g.data());
  stack->plan(alloc, B, T);
  const std::vector<int32_t> x = random_tokens(B * T, c.vocab_size, 1);
  const std::vector<int32_t> y = random_tokens(B * T, c.vocab_size, 2);
  const Batch batch{x.data(), y.data(), B, T, 0};
  const double loss = stack->forward(batch);
  double acc = 0.25;
  stack->forward_accumulate(batch, &acc, 2.0, 3.0);
  EXPECT_EQ(acc, 0.25 + loss * 2.0 / 3.0) << "the loop's (loss x b) / B, as before it stayed on the device";
  EXPECT_THROW(stack->forward_accumulate(Batch{x.data(), nullptr, B, T, 0}, &acc, 1.0, 1.0),
               InvalidArgument);
}

TEST(TokenStaging, OnTheHostTheBatchPassesThrough) {
  HostAllocator alloc;
  TokenStaging staging(Device::cpu(), alloc, nullptr, 8);
  std::vector<int32_t> x(12, 1), y(12, 2);
  const Batch b = staging.stage(Batch{x.data(), y.data(), 3, 4, 0.5});
  EXPECT_EQ(b.tokens, x.data());
  EXPECT_EQ(b.targets, y.data());
  EXPECT_EQ(b.dloss, 0.5);
  staging.stage(b);  // the last one not done(): an interrupted step, taken as done
  staging.done();
  EXPECT_EQ(staging.max_tokens(), 12) << "grown for the larger batch";
  EXPECT_EQ(alloc.stats().in_use, 0u) << "nothing is allocated for the host";
}

TEST(ChooseDevice, RuntimeDeviceLocalRankAndTheVisibleGpus) {
  EXPECT_EQ(choose_device("cpu", 3, 8), Device::cpu());
  EXPECT_EQ(choose_device("auto", 0, 0), Device::cpu());
  EXPECT_EQ(choose_device("auto", 3, 2), Device::cuda(1));
  EXPECT_EQ(choose_device("cuda", 5, 4), Device::cuda(1));
  EXPECT_THROW(choose_device("cuda", 0, 0), ConfigError);
  EXPECT_THROW(choose_device("gpu", 0, 1), ConfigError);
}

TEST(DeviceOps, HostOpsAreTheOptimizersParts) {
  const DeviceOps& ops = device_ops(Device::cpu());
  std::vector<float> g{3.0f, 4.0f, 12.0f};
  double sq = 0;
  ops.grad_norm_squared(&sq, g.data(), 3, nullptr);
  EXPECT_EQ(sq, 169.0);
  ops.clip_grad_norm(g.data(), 3, &sq, 6.5, nullptr);
  EXPECT_FLOAT_EQ(g[2], 12.0f * static_cast<float>(6.5 / (13.0 + 1e-6)));
  std::vector<float> d(3, 7.0f);
  ops.zero(d.data(), sizeof(float) * 3, nullptr);
  EXPECT_EQ(d, std::vector<float>(3, 0.0f));
}

TEST(PinnedHostAllocator, CountsAndRefusesPastItsBudget) {
  PinnedHostAllocator alloc(/*budget=*/1 << 20);
  void* a = alloc.allocate(600 << 10);
  ASSERT_NE(a, nullptr);
  std::memset(a, 1, 600 << 10);  // writable host memory
  EXPECT_EQ(alloc.stats().in_use, size_t{600} << 10);
  EXPECT_THROW(alloc.allocate(600 << 10), OutOfMemory);
  alloc.deallocate(a);
  EXPECT_EQ(alloc.stats().in_use, 0u);
  EXPECT_EQ(alloc.stats().peak, size_t{600} << 10);
  EXPECT_EQ(alloc.pinned(), visible_cuda_devices() > 0);
  Buffer b(alloc, 1000);  // an Allocator like the others
  EXPECT_EQ(b.device(), Device::cpu());
}

}  // namespace
}  // namespace etr
