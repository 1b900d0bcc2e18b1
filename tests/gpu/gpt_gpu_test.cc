// The example GPT-2 on the GPU against the same model on the CPU: the same LayerStack and
// layers (examples/gpt), the CUDA kernel set behind the dispatch (kernels_for<float> on a
// CUDA device, the context's stream passed to every kernel), parameters, gradients and
// activations in device memory, AdamW on the device (cuda::adamw_step_layout). Five
// steps of fresh micro-batches from the same initial parameters: every step's loss within
// 1e-5 relative of the CPU's, every step's gradients and the final parameters within 1e-4
// relative L2, the gradient norm within 1e-5, no NaN anywhere (pedantic FP32 products).
// Shapes not multiples of 32: B 3, T 37, C 72, 4 heads, V 97 (padded to 128).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "examples/gpt/gpt_model.h"
#include "examples/gpt/head_layer.h"
#include "gpu/kernel_test_util.h"
#include "runtime/adamw.h"
#include "runtime/cuda_allocator.h"
#include "runtime/host_allocator.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/vector_ops.h"
#include "runtime/kernels/dispatch.h"
#include "runtime/layer_stack.h"

namespace etr {
namespace {

using testing::DeviceArray;
using testing::expect_close;
using testing::random_tokens;
using testing::stream;

gpt::GptConfig small_odd_config() {
  gpt::GptConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.d_model = 72;
  c.seq_len = 40;
  c.vocab_size = 97;
  return c;
}

// The model on the CPU from `params` (copied), planned for B x T.
struct CpuModel {
  CpuModel(const gpt::GptConfig& c, const std::vector<float>& init, int64_t B, int64_t T)
      : stack(gpt::build_stack<float>(c)), params(init), grads(init.size()) {
    stack->bind(params.data(), grads.data());
    stack->plan(alloc, B, T);
  }
  HostAllocator alloc;
  std::unique_ptr<LayerStack<float>> stack;
  std::vector<float> params, grads;
};

// The same model on GPU 0 from the same parameters: the CUDA kernel set (the dispatch's for
// a CUDA device), the test stream, parameters, gradients and activations in device memory.
struct GpuModel {
  GpuModel(const gpt::GptConfig& c, const std::vector<float>& init, int64_t B, int64_t T)
      : alloc(0),
        stack(gpt::build_stack<float>(c)),
        params(init),
        grads(static_cast<int64_t>(init.size())) {
    ExecContext<float> ctx;
    ctx.device = Device::cuda(0);
    ctx.alloc = &alloc;
    ctx.stream = stream();
    stack->set_context(ctx);
    stack->bind(params.data(), grads.data());
    stack->plan(alloc, B, T);
  }
  CudaCachingAllocator alloc;
  std::unique_ptr<LayerStack<float>> stack;
  DeviceArray<float> params, grads;
};

std::vector<float> initial_params(const gpt::GptConfig& c, uint64_t seed) {
  auto stack = gpt::build_stack<float>(c);
  std::vector<float> params(static_cast<size_t>(stack->layout().numel()));
  gpt::init_params<float>(c, stack->layout(), params.data(), seed);
  return params;
}

TEST(GptOnGpu, KernelSetIsTheCudaOneForFloat) {
  ETR_REQUIRE_GPU();
  EXPECT_STREQ(kernels_for<float>(Device::cuda(0)).name, "cuda");
  EXPECT_THROW(kernels_for<double>(Device::cuda(0)), InvalidArgument);
}

TEST(GptOnGpu, FiveAdamWStepsMatchTheCpu) {
  ETR_REQUIRE_GPU();
  const gpt::GptConfig c = small_odd_config();
  const int64_t B = 3, T = 37, steps = 5;
  AdamWOptions o;
  o.weight_decay = 0.1;
  const double lr = 1e-3;

  CpuModel cpu(c, initial_params(c, /*seed=*/7), B, T);
  GpuModel gpu(c, cpu.params, B, T);
  const ParamLayout& layout = cpu.stack->layout();
  const int64_t n = layout.numel();
  std::vector<float> m(static_cast<size_t>(n)), v(m.size());
  AdamW adamw(layout);
  DeviceArray<float> d_m(n), d_v(n);
  DeviceArray<double> d_norm(1);
  cuda::fill(d_m.data(), 0.0f, n, stream());
  cuda::fill(d_v.data(), 0.0f, n, stream());

  for (int64_t t = 1; t <= steps; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    std::vector<int32_t> tokens = random_tokens(B * T, c.vocab_size, 100 + t);
    std::vector<int32_t> targets = random_tokens(B * T, c.vocab_size, 200 + t);
    DeviceArray<int32_t> d_tokens(tokens), d_targets(targets);
    Batch hb{tokens.data(), targets.data(), B, T, 1.0 / static_cast<double>(B * T)};
    Batch db{d_tokens.data(), d_targets.data(), B, T, hb.dloss};

    std::fill(cpu.grads.begin(), cpu.grads.end(), 0.0f);
    cuda::fill(gpu.grads.data(), 0.0f, n, stream());
    const double cpu_loss = cpu.stack->forward(hb);
    cpu.stack->backward(hb);
    const double gpu_loss = gpu.stack->forward(db);
    gpu.stack->backward(db);
    ASSERT_TRUE(std::isfinite(gpu_loss));
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::fabs(cpu_loss)) << "the loss";
    expect_close(gpu.grads.download(), cpu.grads, 1e-4, "gradients");

    cuda::grad_norm_squared(d_norm.data(), gpu.grads.data(), n, stream());
    const double gpu_norm = std::sqrt(d_norm.download()[0]);
    const double cpu_norm = grad_norm(cpu.grads.data(), n);
    EXPECT_NEAR(gpu_norm, cpu_norm, 1e-5 * cpu_norm) << "the gradient norm";

    adamw.step(cpu.params.data(), cpu.grads.data(), m.data(), v.data(), 0, n, t, lr, o);
    cuda::adamw_step_layout(layout, gpu.params.data(), gpu.grads.data(), d_m.data(), d_v.data(), t,
                            lr, o, stream());
  }
  expect_close(gpu.params.download(), cpu.params, 1e-4, "parameters after 5 steps");
  expect_close(d_m.download(), m, 1e-4, "AdamW's m after 5 steps");
}

// The loss of evaluation (no targets' gradient, dloss 0) and the logits without targets
// (generation) on the GPU equal the CPU's.
TEST(GptOnGpu, EvaluationAndLogitsMatchTheCpu) {
  ETR_REQUIRE_GPU();
  const gpt::GptConfig c = small_odd_config();
  const int64_t B = 2, T = 37;
  CpuModel cpu(c, initial_params(c, /*seed=*/11), B, T);
  GpuModel gpu(c, cpu.params, B, T);
  LayerStack<float>& cpu_stack = *cpu.stack;
  LayerStack<float>& gpu_stack = *gpu.stack;

  std::vector<int32_t> tokens = random_tokens(B * T, c.vocab_size, 5);
  std::vector<int32_t> targets = random_tokens(B * T, c.vocab_size, 6);
  DeviceArray<int32_t> d_tokens(tokens), d_targets(targets);
  const double cpu_loss = cpu_stack.forward(Batch{tokens.data(), targets.data(), B, T, 0.0});
  const double gpu_loss = gpu_stack.forward(Batch{d_tokens.data(), d_targets.data(), B, T, 0.0});
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::fabs(cpu_loss));

  // Logits [B, T, Vp] without targets: the head's product, before any loss.
  cpu_stack.forward(Batch{tokens.data(), nullptr, B, T, 0.0});
  gpu_stack.forward(Batch{d_tokens.data(), nullptr, B, T, 0.0});
  auto logits_of = [](LayerStack<float>& s) {
    return dynamic_cast<gpt::HeadLayer<float>&>(s.layer(s.size() - 1)).logits();
  };
  const int64_t logits_n = B * T * c.padded_vocab();
  std::vector<float> want(logits_of(cpu_stack), logits_of(cpu_stack) + logits_n);
  std::vector<float> got(static_cast<size_t>(logits_n));
  testing::sync();
  CUDA_CHECK(cudaMemcpy(got.data(), logits_of(gpu_stack), got.size() * sizeof(float),
                        cudaMemcpyDeviceToHost));
  expect_close(got, want, 1e-5, "logits");
}

}  // namespace
}  // namespace etr
