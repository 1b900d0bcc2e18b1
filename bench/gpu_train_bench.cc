// etr-bench gpu-train (also `etr-bench train --device cuda`): the example GPT-2 training
// on one GPU, beside PyTorch training the same model on the same card just before
// (bench/pytorch_gpu_train.py, whose JSON files --reference reads). Two etr rows:
//   etr-train loop  etr-train's TrainSession with runtime.device = cuda and
//                   runtime.precision = --precision (train_with_session)
//   etr-train loop + CUDA graphs   the same with runtime.cuda_graphs = true (each
//                   micro-batch replayed from a captured graph)
//   etr layers      the LayerStack<float> driven directly, as below (what the loop adds is
//                   the difference between the two); fp32 only: under bf16 the row is left
//                   out, with a line that says so (no bf16 layers row is built yet)
// After the loop row's timed steps one more step runs with every kernel of the layers
// timed by CUDA events around it (bench/gpu_kernel_profile.h): the five slowest, with their
// share of that step, are printed under the table.
// --precision: fp32 (f32 with TF32 products) or bf16 (the GPU's default: bf16 activations
// and products, fp32 master parameters, gradients and AdamW state). The references should
// be PyTorch's runs in the same precision (bf16: autocast, SDPA, fused AdamW, with and
// without torch.compile); a reference of another precision or shape gets a note.
//
// The layers' step: gradients zeroed, forward (the loss read back: one synchronisation), backward,
// the gradient norm and clipping at 1.0, AdamW; one micro-batch of B x T random tokens.
// Reported: median ms/step over the timed steps (CUDA events), tokens/s, model TFLOP/s
// with GptConfig::flops_per_token (6 N + 12 L C T, PaLM's count, as llm.c's), MFU as llm.c
// computes it (model TFLOP/s over the card's dense peak in the precision: TF32 for fp32,
// bf16 for bf16), the largest micro-batch etr-train's memory model fits on the card, and
// memory: the allocator's peak (parameters, gradients, AdamW's m and v, activations: what
// the plan says) and the card's used memory after the steps as the driver sees it
// (cudaMemGetInfo: the CUDA context, cuBLAS's workspace and the allocators' cached blocks
// included; PyTorch's is read the same way).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/gpu_bench.h"
#include "bench/gpu_kernel_profile.h"
#include "bench/gpu_util.h"
#include "bench/table.h"
#include "examples/gpt/gpt_config.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/model_presets.h"
#include "examples/train/trainer.h"
#include "parallel/train_session.h"
#include "runtime/config/train_config.h"
#include "runtime/adamw.h"
#include "runtime/cuda_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/adamw.h"
#include "runtime/kernels/cuda/cublas.h"
#include "runtime/kernels/cuda/vector_ops.h"
#include "runtime/layer_stack.h"

namespace etr::bench {

namespace {

struct TrainArgs {
  int64_t B = 8, T = 1024;
  int steps = 10, warmup = 3;
  std::string precision = "bf16";  // runtime.precision of the loop row: fp32 or bf16
  std::vector<std::string> references;
  std::string json;
};

struct TrainResult {
  double ms_per_step = 0, tokens_per_s = 0, tflops = 0, loss = 0;
  double planned_bytes = 0, allocator_peak = 0, device_used = 0;
  int64_t largest_micro_batch = 0;  // the loop's memory model on this card; 0: not known
  // The loop's profiled step (KernelProfile): its time, and each kernel's, slowest first.
  double profiled_ms = 0;
  std::vector<std::pair<std::string, double>> kernels;
};

// What a reference's JSON says besides its figures.
struct Reference {
  std::string who, precision;
  int64_t B = 0, T = 0;
  std::string compile_fallback;  // why its asked-for torch.compile fell back to eager
  TrainResult r;
};

// The median of `v` (not empty).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// etr-train's own loop (TrainSession, runtime.device = cuda) on the same model: a
// synthetic byte corpus (the vocabulary stays GPT-2's 50257: the head and the softmax
// cost the same), one micro-batch of B per step, clipping at 1.0, runtime.precision =
// --precision (the products that stay f32 in TF32). Each
// step's wall time (it ends at the gradient norm's wait; the optimizer's kernels then run
// while the next step stages its tokens); the plan is the memory model's and the device
// figure the driver's count of what the job holds (StepStats::device_peak_bytes). The
// largest micro-batch is the memory model's for the card's budget with batch.memory_margin
// to spare (what batch.micro_batch = auto would pick), up to 1024.
TrainResult train_with_session(BenchContext& ctx, const gpt::GptConfig& c, const TrainArgs& a,
                               bool graphs) {
  // Installed before the trainer places its stack; records only in the profiled step.
  std::unique_ptr<KernelProfile<float>> p32;
  std::unique_ptr<KernelProfile<bf16>> p16;
  if (!graphs) {
    if (a.precision == "bf16") {
      p16 = std::make_unique<KernelProfile<bf16>>();
    } else {
      p32 = std::make_unique<KernelProfile<float>>();
    }
  }
  TrainConfig config = parse_config("model { preset: \"gpt2-124m\" }");
  apply_overrides(config, {"model.vocab_size=" + std::to_string(c.vocab_size),
                           "model.seq_len=" + std::to_string(a.T),
                           "batch.global_batch=" + std::to_string(a.B),
                           "batch.micro_batch=" + std::to_string(a.B),
                           "schedule.max_steps=" + std::to_string(a.steps + a.warmup + 1),
                           "schedule.warmup_steps=1", "optimizer.grad_clip=1.0",
                           "data.synthetic=true",
                           "data.synthetic_size=" + std::to_string((a.steps + a.warmup + 4) * a.B * a.T),
                           "data.val_fraction=0", "log.eval_every=0", "log.log_every=1000000",
                           "runtime.device=cuda", "runtime.gpu_matmul=tf32",
                           "runtime.precision=" + a.precision,
                           std::string("runtime.cuda_graphs=") + (graphs ? "true" : "false")});
  resolve(config, gpt::model_presets());
  Logger& log = ctx.world().log();
  const LogLevel level = log.level();
  log.set_level(LogLevel::kWarn);  // the trainer's start-up lines would break the table
  train::Trainer trainer(config, ctx.world());
  log.set_level(level);
  TrainResult r;
  for (int i = 0; i < a.warmup; ++i) trainer.train_step();
  std::vector<double> ms;
  StepStats st;
  for (int i = 0; i < a.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    st = trainer.train_step();
    ms.push_back(1e3 * seconds_since(t0));
  }
  r.ms_per_step = median(ms);
  r.loss = st.loss;
  if (p16 || p32) {  // one more step, each kernel timed by events around it
    if (p16) p16->record(true);
    if (p32) p32->record(true);
    const auto t0 = std::chrono::steady_clock::now();
    trainer.train_step();
    r.profiled_ms = 1e3 * seconds_since(t0);
    r.kernels = p16 ? p16->totals() : p32->totals();
  }
  r.tokens_per_s = static_cast<double>(a.B * a.T) / (r.ms_per_step * 1e-3);
  r.tflops = c.flops_per_token(a.T) * r.tokens_per_s / 1e12;
  r.planned_bytes = static_cast<double>(trainer.session().predicted_peak());
  r.allocator_peak = static_cast<double>(st.peak_bytes);
  r.device_used = static_cast<double>(trainer.session().device_peak_bytes());
  TrainSession& session = trainer.session();
  r.largest_micro_batch = session.memory_model().largest_fitting(
      session.work_alloc().stats().budget, config.batch().memory_margin(), 1024, false);
  return r;
}

// From pageable memory: cudaMemcpy returns before the DMA lands, and the steps run on a
// non-blocking stream, so the device is synchronised before returning.
Buffer upload(CudaCachingAllocator& alloc, const void* host, size_t bytes) {
  Buffer b(alloc, bytes);
  CUDA_CHECK(cudaMemcpy(b.data(), host, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
  return b;
}

TrainResult train_on_gpu(const gpt::GptConfig& c, const TrainArgs& a) {
  cuda::set_matmul_math(cuda::MatmulMath::kTF32);
  CudaCachingAllocator alloc(0);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto stack = gpt::build_stack<float>(c);
  const ParamLayout& layout = stack->layout();
  const int64_t n = layout.numel();
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  std::vector<float> host(static_cast<size_t>(n));
  gpt::init_params<float>(c, layout, host.data(), /*seed=*/1);
  Buffer params = upload(alloc, host.data(), bytes);
  host.clear();
  host.shrink_to_fit();
  Buffer grads(alloc, bytes), m(alloc, bytes), v(alloc, bytes), norm(alloc, sizeof(double));
  auto* p = static_cast<float*>(params.data());
  auto* g = static_cast<float*>(grads.data());
  auto* pm = static_cast<float*>(m.data());
  auto* pv = static_cast<float*>(v.data());
  cuda::fill(pm, 0.0f, n, stream);
  cuda::fill(pv, 0.0f, n, stream);
  ExecContext<float> ctx;
  ctx.device = Device::cuda(0);
  ctx.alloc = &alloc;
  ctx.stream = stream;
  stack->set_context(ctx);
  stack->bind(p, g);
  stack->plan(alloc, a.B, a.T);
  TrainResult r;
  r.planned_bytes =
      4.0 * static_cast<double>(bytes) + static_cast<double>(stack->activation_bytes(a.B, a.T));

  const std::vector<int32_t> tokens = random_ids(a.B * a.T, c.vocab_size, 1);
  const std::vector<int32_t> targets = random_ids(a.B * a.T, c.vocab_size, 2);
  Buffer d_tokens = upload(alloc, tokens.data(), tokens.size() * sizeof(int32_t));
  Buffer d_targets = upload(alloc, targets.data(), targets.size() * sizeof(int32_t));
  const Batch batch{static_cast<int32_t*>(d_tokens.data()), static_cast<int32_t*>(d_targets.data()),
                    a.B, a.T, 1.0 / static_cast<double>(a.B * a.T)};
  AdamWOptions o;
  auto step = [&](int64_t t) {
    cuda::fill(g, 0.0f, n, stream);
    r.loss = stack->forward(batch);
    stack->backward(batch);
    cuda::grad_norm_squared(static_cast<double*>(norm.data()), g, n, stream);
    cuda::clip_grad_norm(g, n, static_cast<double*>(norm.data()), 1.0, stream);
    cuda::adamw_step_layout(layout, p, g, pm, pv, t, 3e-4, o, stream);
  };
  int64_t t = 0;  // the optimizer step, 1-based, across warm-up and timed steps
  r.ms_per_step = 1e3 * time_on_stream(
                            stream, a.steps, /*per_round=*/1, [&] { step(++t); }, a.warmup);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  size_t free_after = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  r.tokens_per_s = static_cast<double>(a.B * a.T) / (r.ms_per_step * 1e-3);
  r.tflops = c.flops_per_token(a.T) * r.tokens_per_s / 1e12;
  r.allocator_peak = static_cast<double>(alloc.stats().peak);
  r.device_used = static_cast<double>(total - free_after);
  stack.reset();
  CUDA_CHECK(cudaStreamDestroy(stream));
  return r;
}

// One row of the table: a run's figures.
std::vector<std::string> train_row(const std::string& who, const TrainResult& r, double peak) {
  return {who,
          cell("%.1f", r.ms_per_step),
          cell("%.0f", r.tokens_per_s),
          cell("%.1f", r.tflops),
          peak > 0 ? cell("%.0f%%", 100 * r.tflops / peak) : "-",
          format_bytes(r.allocator_peak),
          format_bytes(r.device_used),
          cell("%.4f", r.loss)};
}

// A run of bench/pytorch_gpu_train.py. Runs from before --precision and --compile (no
// such fields) were fp32 and eager. Its row's name: "PyTorch <version> <precision>
// <attention>", then "compile" when torch.compile ran, or "eager (compile failed)" /
// "eager (compile timeout)" when it fell back (the reason in compile_fallback).
Reference read_reference(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read the reference " + path);
  Reference ref;
  TrainResult& r = ref.r;
  try {
    nlohmann::json doc = nlohmann::json::parse(in);
    ref.precision = doc.value("precision", std::string("fp32"));
    ref.B = doc.at("B").get<int64_t>();
    ref.T = doc.at("T").get<int64_t>();
    ref.who = "PyTorch " + doc.at("torch").get<std::string>() + " " + ref.precision + " " +
              doc.at("attention").get<std::string>();
    if (doc.value("compile", false)) {
      if (doc.value("compiled", false)) {
        ref.who += " compile";
      } else {
        const nlohmann::json& why = doc.at("compile_fallback");
        ref.compile_fallback = why.is_string() ? why.get<std::string>() : "no reason given";
        const bool timeout = ref.compile_fallback.rfind("timeout", 0) == 0;
        ref.who += timeout ? " eager (compile timeout)" : " eager (compile failed)";
      }
    }
    r.ms_per_step = doc.at("ms_per_step").get<double>();
    r.tokens_per_s = doc.at("tokens_per_s").get<double>();
    r.tflops = doc.at("tflops").get<double>();
    r.loss = doc.at("loss").get<double>();
    r.allocator_peak = doc.at("peak_allocated_bytes").get<double>();
    r.device_used = doc.at("mem_used_bytes").get<double>();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("the reference " + path + " is not the JSON of bench/pytorch_gpu_train.py (" +
                      e.what() + ")");
  }
  return ref;
}

// The header lines above the table.
void print_header(BenchContext& ctx, const std::string& card, const gpt::GptConfig& c,
                  const TrainArgs& a, double peak) {
  const bool bf16 = a.precision == "bf16";
  ctx.print("# etr-bench gpu-train: " + card + "\n");
  ctx.print(cell(
      "# GPT-2 124M (%lld parameters), micro-batch B %lld x T %lld tokens, %s, AdamW + clipping "
      "at 1.0 on the device; median of %d steps after %d\n",
      static_cast<long long>(c.num_parameters()), static_cast<long long>(a.B),
      static_cast<long long>(a.T),
      bf16 ? "bf16 mixed precision (runtime.precision = bf16: bf16 activations and products; "
             "fp32 master parameters, gradients and AdamW state)"
           : "f32 with TF32 products (runtime.precision = fp32)",
      a.steps, a.warmup));
  ctx.print(
      cell("# model TFLOP/s: %.3g FLOPs per token (6 N + 12 L C T); MFU (llm.c's) against %s\n",
           c.flops_per_token(a.T),
           peak > 0 ? cell("the dense %s peak, %.1f TFLOP/s", bf16 ? "bf16" : "TF32", peak).c_str()
                    : "nothing (peak unknown for this card)"));
  ctx.print(
      "# memory: peak = the allocator's peak (torch: max_memory_allocated); device = the card's "
      "used memory after the steps (cudaMemGetInfo: CUDA context, cuBLAS workspace, cache)\n");
}

void run_gpu_train(BenchContext& ctx, const TrainArgs& a) {
  const std::string card = require_one_gpu(ctx, "etr-bench gpu-train");
  gpt::GptConfig c;  // GPT-2 124M
  c.n_layer = 12;
  c.n_head = 12;
  c.d_model = 768;
  c.seq_len = 1024;
  c.vocab_size = 50257;
  if (a.T < 1 || a.T > c.seq_len) throw ConfigError("--T must be in [1, 1024]");
  if (a.B < 1) throw ConfigError("--B must be at least 1");
  if (a.precision != "fp32" && a.precision != "bf16") {
    throw ConfigError("--precision: fp32 or bf16");
  }
  const bool bf16 = a.precision == "bf16";
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double peak = dense_peak_tflops(prop.name, a.precision);
  print_header(ctx, card, c, a, peak);
  std::vector<Reference> refs;
  for (const std::string& path : a.references) refs.push_back(read_reference(path));
  Table t;
  t.add_column("run", 54).add_column("ms/step", 9).add_column("tokens/s", 10);
  t.add_column("TFLOP/s", 9).add_column("MFU", 6).add_column("peak", 11).add_column("device", 11);
  t.add_column("loss", 9);
  ctx.print(t.header());
  nlohmann::json rows = nlohmann::json::array();
  auto add = [&](const std::string& who, const std::string& precision, const TrainResult& r) {
    ctx.print(t.row(train_row(who, r, peak)));
    rows.push_back({{"run", who},
                    {"precision", precision},
                    {"ms_per_step", r.ms_per_step},
                    {"tokens_per_s", r.tokens_per_s},
                    {"tflops", r.tflops},
                    {"mfu", peak > 0 ? nlohmann::json(r.tflops / peak) : nlohmann::json()},
                    {"peak_bytes", r.allocator_peak},
                    {"device_bytes", r.device_used},
                    {"loss", r.loss}});
  };
  // The loop row first; when it fails (bf16 not there yet, say) the references are still
  // printed, and the error is thrown at the end.
  std::exception_ptr loop_error;
  TrainResult loop;
  try {
    loop = train_with_session(ctx, c, a, false);
    add("etr-train loop", a.precision, loop);
  } catch (const std::exception& e) {
    loop_error = std::current_exception();
    ctx.print(cell("# etr-train loop (runtime.precision = %s) failed: %s\n", a.precision.c_str(),
                   e.what()));
  }
  std::exception_ptr graphs_error;  // runtime.cuda_graphs: said, and thrown at the end
  try {
    if (!loop_error) add("etr-train loop + CUDA graphs", a.precision, train_with_session(ctx, c, a, true));
  } catch (const std::exception& e) {
    graphs_error = std::current_exception();
    ctx.print(cell("# etr-train loop with runtime.cuda_graphs = true failed: %s\n", e.what()));
  }
  TrainResult ours;
  if (!bf16) {
    ours = train_on_gpu(c, a);
    add("etr layers", "fp32", ours);
  }
  for (const Reference& ref : refs) add(ref.who, ref.precision, ref.r);
  if (bf16) {
    ctx.print(
        "# etr layers: the bf16 layers row (the LayerStack driven directly) is not built yet; "
        "the etr-train loop row is the bf16 figure\n");
  }
  for (const Reference& ref : refs) {
    if (!ref.compile_fallback.empty()) {
      ctx.print("# " + ref.who + ": torch.compile " + ref.compile_fallback +
                "; the row is PyTorch eager\n");
    }
    if (ref.precision != a.precision || ref.B != a.B || ref.T != a.T) {
      ctx.print(cell("# note: %s ran %s at B %lld x T %lld, this table %s at B %lld x T %lld\n",
                     ref.who.c_str(), ref.precision.c_str(), static_cast<long long>(ref.B),
                     static_cast<long long>(ref.T), a.precision.c_str(),
                     static_cast<long long>(a.B), static_cast<long long>(a.T)));
    }
  }
  if (!loop_error) {
    ctx.print(cell(
        "# etr-train's plan (the memory model: parameters, gradients, m, v and the activations, "
        "what the allocator holds): %s; its allocator's peak is %.1f%% of it, the driver's "
        "count (cuBLAS's workspace and the CUDA modules included) %.1f%%\n",
        format_bytes(loop.planned_bytes).c_str(), 100 * loop.allocator_peak / loop.planned_bytes,
        100 * loop.device_used / loop.planned_bytes));
    ctx.print(
        cell("# the largest micro-batch that fits this card by etr-train's memory model "
             "(%s, the budget less batch.memory_margin, up to 1024): %lld x %lld tokens\n",
             a.precision.c_str(), static_cast<long long>(loop.largest_micro_batch),
             static_cast<long long>(a.T)));
  }
  if (!loop_error && !loop.kernels.empty()) {
    std::string line = cell("# the five slowest kernels of one profiled step of the loop (%.1f ms, "
                            "events around each kernel):", loop.profiled_ms);
    for (size_t i = 0; i < loop.kernels.size() && i < 5; ++i) {
      line += cell(" %s %.2f ms (%.0f%%)%s", loop.kernels[i].first.c_str(), loop.kernels[i].second,
                   100 * loop.kernels[i].second / loop.profiled_ms, i + 1 < 5 ? "," : "");
    }
    ctx.print(line + "\n");
  }
  if (!bf16) {
    ctx.print(cell(
        "# etr layers' plan: %s (parameters, gradients, m, v and the activations); the "
        "allocator's peak is %.1f%% of it\n",
        format_bytes(ours.planned_bytes).c_str(), 100 * ours.allocator_peak / ours.planned_bytes));
  }
  for (const Reference& ref : refs) {
    std::string line = "# ";
    if (!loop_error) {
      line += cell("etr-train loop / %s: %.2fx tokens/s", ref.who.c_str(),
                   loop.tokens_per_s / ref.r.tokens_per_s);
    }
    if (!bf16) {
      line += cell("%setr layers / %s: %.2fx", loop_error ? "" : "; ", ref.who.c_str(),
                   ours.tokens_per_s / ref.r.tokens_per_s);
    }
    if (line.size() > 2) ctx.print(line + "\n");
  }
  if (!a.json.empty()) {
    nlohmann::json doc = {{"machine", ctx.machine().to_json()},
                          {"gpu", card},
                          {"precision", a.precision},
                          {"B", a.B},
                          {"T", a.T},
                          {"flops_per_token", c.flops_per_token(a.T)},
                          {"peak_tflops", peak > 0 ? nlohmann::json(peak) : nlohmann::json()},
                          {"gpu_train", rows}};
    if (!loop_error) {
      doc["planned_bytes"] = loop.planned_bytes;
      doc["largest_micro_batch"] = loop.largest_micro_batch;
    }
    if (!bf16) doc["layers_planned_bytes"] = ours.planned_bytes;
    ctx.write_json(a.json, doc);
  }
  if (loop_error) std::rethrow_exception(loop_error);
  if (graphs_error) std::rethrow_exception(graphs_error);
}

}  // namespace

void run_gpu_train_for(BenchContext& ctx, int steps, int warmup, const std::string& precision,
                       const std::vector<std::string>& references, const std::string& json) {
  TrainArgs a;
  a.precision = precision;
  a.steps = steps;
  a.warmup = warmup;
  a.references = references;
  a.json = json;
  run_gpu_train(ctx, a);
}

void add_gpu_train_subcommand(CLI::App& app, SubcommandList& list) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "gpu-train", "GPT-2 124M training steps on one GPU through etr's layers, beside PyTorch's");
  cmd->add_option("--B", a->B, "Sequences per step")->capture_default_str();
  cmd->add_option("--T", a->T, "Tokens per sequence (at most 1024)")->capture_default_str();
  cmd->add_option("--steps", a->steps, "Timed steps; the median is reported")
      ->capture_default_str();
  cmd->add_option("--warmup", a->warmup, "Untimed steps first")->capture_default_str();
  cmd->add_option("--precision", a->precision,
                  "fp32 (TF32 products) or bf16 (mixed precision, the GPU's default): the loop "
                  "row's runtime.precision and the MFU's peak")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  cmd->add_option(
      "--reference", a->references,
      "PyTorch's runs of the same model (bench/pytorch_gpu_train.py --json); repeatable");
  cmd->add_option("--json", a->json, "Also write the figures to this JSON file");
  list.push_back({cmd, [a](BenchContext& ctx) {
                    if (a->steps < 1 || a->warmup < 0)
                      throw ConfigError("--steps >= 1, --warmup >= 0");
                    run_gpu_train(ctx, *a);
                  }});
}

}  // namespace etr::bench
