// etr-kernels-bench: forward and backward time of every CPU kernel (runtime/kernels/cpu)
// at the shapes of a small GPT (B 8, T 128, C 256, NH 4, V 256), on 1 and 2 threads
// (the "/1", "/2" after each name), beside OpenBLAS's sgemm on the same product shapes.
//
//   build/bench/etr-kernels-bench [--benchmark_filter=regex] [--benchmark_min_time=0.2]
//
// Counters: FLOP/s for the products (2 per multiply-add; attention counts only the causal
// half it computes usefully), bytes/s for the memory-bound kernels (the bytes each must
// read and write at least, stated beside each). The references:
//   sgemm_openblas_threads/<shape>/<n>  cblas_sgemm called once from this thread with
//       OpenBLAS's own pool at n threads: what a plain BLAS call achieves;
//   sgemm_omp_split/<shape>/<n>         the same product as etr's matmul computes it
//       (blas.h: one single-threaded sgemm per OpenMP thread on a block of rows/columns).
// "interplay" runs a product then a layernorm, back to back, both ways: the OpenMP layernorm
// after an OpenBLAS-threaded sgemm shares the cores with OpenBLAS's spinning workers;
// after etr's split product it runs on the same threads (threads.h says why).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/kernels.h"

namespace {

using etr::cpu::set_num_threads;

// The small GPT of the benchmark (docs/machine_notes.md measured PyTorch on it).
constexpr int64_t B = 8, T = 128, C = 256, NH = 4, V = 256, Vp = 256;
constexpr int64_t N = B * T;

std::vector<float> random_floats(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

void set_threads(benchmark::State& state) {
  set_num_threads(static_cast<int>(state.range(0)));
  state.counters["threads"] = static_cast<double>(state.range(0));
}

void flops(benchmark::State& state, double per_iteration) {
  state.counters["FLOP/s"] = benchmark::Counter(
      per_iteration, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void bytes(benchmark::State& state, double per_iteration) {
  state.SetBytesProcessed(static_cast<int64_t>(per_iteration) * state.iterations());
}

// The GPT's four linear layers plus the tied LM head: out [N, OC] = inp [N, IC] W^T.
struct Product {
  const char* name;
  int64_t IC, OC;
};
constexpr Product kProducts[] = {{"qkv", C, 3 * C},
                                 {"attproj", C, C},
                                 {"fc", C, 4 * C},
                                 {"fcproj", 4 * C, C},
                                 {"lmhead", C, Vp}};

// ---------------------------------------------------------------------------------------
// matmul and the sgemm references

void BM_matmul_forward(benchmark::State& state, Product p) {
  set_threads(state);
  auto inp = random_floats(N * p.IC, 1), w = random_floats(p.OC * p.IC, 2),
       bias = random_floats(p.OC, 3);
  std::vector<float> out(N * p.OC);
  for (auto _ : state) {
    etr::cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, p.IC, p.OC);
    benchmark::ClobberMemory();
  }
  flops(state, 2.0 * N * p.IC * p.OC);
}

void BM_matmul_backward(benchmark::State& state, Product p) {
  set_threads(state);
  auto inp = random_floats(N * p.IC, 1), w = random_floats(p.OC * p.IC, 2),
       dout = random_floats(N * p.OC, 4);
  std::vector<float> dinp(N * p.IC), dw(p.OC * p.IC), db(p.OC);
  for (auto _ : state) {
    etr::cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                              N, p.IC, p.OC);
    benchmark::ClobberMemory();
  }
  flops(state, 4.0 * N * p.IC * p.OC);  // dinp and dweight; dbias is N * OC adds
}

// The forward's product with OpenBLAS's own threads, called once from this thread.
void BM_sgemm_openblas_threads(benchmark::State& state, Product p) {
  const int n = static_cast<int>(state.range(0));
  set_num_threads(n);
  auto inp = random_floats(N * p.IC, 1), w = random_floats(p.OC * p.IC, 2);
  std::vector<float> out(N * p.OC);
  openblas_set_num_threads(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, p.OC, p.IC, 1.0f, inp.data(), p.IC,
                w.data(), p.IC, 0.0f, out.data(), p.OC);
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(1);
  state.counters["threads"] = n;
  flops(state, 2.0 * N * p.IC * p.OC);
}

// ---------------------------------------------------------------------------------------
// the other kernels

void BM_layernorm_forward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(N * C, 1), w = random_floats(C, 2), b = random_floats(C, 3);
  std::vector<float> out(N * C), mean(N), rstd(N);
  for (auto _ : state) {
    etr::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(),
                                N, C);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 2 * N * C);  // read inp, write out
}

void BM_layernorm_backward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(N * C, 1), w = random_floats(C, 2), b = random_floats(C, 3),
       dout = random_floats(N * C, 4);
  std::vector<float> out(N * C), mean(N), rstd(N), dinp(N * C), dw(C), db(C);
  etr::cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N,
                              C);
  for (auto _ : state) {
    etr::cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                                 mean.data(), rstd.data(), N, C);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 4 * N * C);  // read dout, inp; read and write dinp
}

void BM_gelu_forward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(N * 4 * C, 1, 4.0f);
  std::vector<float> out(N * 4 * C);
  for (auto _ : state) {
    etr::cpu::gelu_forward(out.data(), x.data(), N * 4 * C);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 2 * N * 4 * C);
}

void BM_gelu_backward(benchmark::State& state) {
  set_threads(state);
  auto x = random_floats(N * 4 * C, 1, 4.0f), dout = random_floats(N * 4 * C, 2);
  std::vector<float> dinp(N * 4 * C);
  for (auto _ : state) {
    etr::cpu::gelu_backward(dinp.data(), x.data(), dout.data(), N * 4 * C);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 4 * N * 4 * C);
}

void BM_residual_forward(benchmark::State& state) {
  set_threads(state);
  auto a = random_floats(N * C, 1), b = random_floats(N * C, 2);
  std::vector<float> out(N * C);
  for (auto _ : state) {
    etr::cpu::residual_forward(out.data(), a.data(), b.data(), N * C);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 3 * N * C);
}

void BM_residual_backward(benchmark::State& state) {
  set_threads(state);
  auto dout = random_floats(N * C, 1);
  std::vector<float> d1(N * C), d2(N * C);
  for (auto _ : state) {
    etr::cpu::residual_backward(d1.data(), d2.data(), dout.data(), N * C);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 5 * N * C);
}

// Multiply-adds of the causal attention per product: every (b, h, t) row has t + 1 keys.
constexpr double kCausalMacs = double(B) * NH * (T * (T + 1) / 2) * (C / NH);

void BM_attention_forward(benchmark::State& state) {
  set_threads(state);
  auto qkv = random_floats(N * 3 * C, 1);
  std::vector<float> out(N * C), att(B * NH * T * T);
  for (auto _ : state) {
    etr::cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    benchmark::ClobberMemory();
  }
  flops(state, 2 * 2 * kCausalMacs);  // Q K^T and att V
}

void BM_attention_backward(benchmark::State& state) {
  set_threads(state);
  auto qkv = random_floats(N * 3 * C, 1), dout = random_floats(N * C, 2);
  std::vector<float> out(N * C), att(B * NH * T * T), dqkv(N * 3 * C);
  std::vector<float> scratch(etr::cpu::attention_backward_scratch_size(T, etr::cpu::num_threads()));
  etr::cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (auto _ : state) {
    etr::cpu::attention_backward(dqkv.data(), scratch.data(), static_cast<int64_t>(scratch.size()),
                                 dout.data(), qkv.data(), att.data(), B, T, C, NH);
    benchmark::ClobberMemory();
  }
  flops(state, 2 * 4 * kCausalMacs);  // dP, dV, dQ, dK
}

std::vector<int32_t> tokens_of(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(N);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % V);
  return t;
}

void BM_encoder_forward(benchmark::State& state) {
  set_threads(state);
  auto wte = random_floats(Vp * C, 1), wpe = random_floats(T * C, 2);
  const auto tokens = tokens_of(3);
  std::vector<float> out(N * C);
  for (auto _ : state) {
    etr::cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, V);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 3 * N * C);  // two rows read, one written per position
}

void BM_encoder_backward(benchmark::State& state) {
  set_threads(state);
  auto dout = random_floats(N * C, 1);
  const auto tokens = tokens_of(3);
  std::vector<float> dwte(Vp * C), dwpe(T * C);
  for (auto _ : state) {
    etr::cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 5 * N * C);  // dout read; two rows read and written per position
}

void BM_softmax_xent_forward_backward(benchmark::State& state) {
  set_threads(state);
  auto logits = random_floats(N * Vp, 1, 4.0f);
  const auto targets = tokens_of(2);
  std::vector<float> losses(N), dlogits(N * Vp);
  for (auto _ : state) {
    etr::cpu::softmax_xent_forward_backward(losses.data(), dlogits.data(), logits.data(),
                                            targets.data(), 1.0f / N, N, V, Vp);
    benchmark::ClobberMemory();
  }
  bytes(state, 4.0 * 2 * N * Vp);
}

// ---------------------------------------------------------------------------------------
// interplay: a product [N, C] x [C, 3C] then a layernorm of [N, C], back to back.

void BM_interplay_etr(benchmark::State& state) {
  set_threads(state);
  auto inp = random_floats(N * C, 1), w = random_floats(3 * C * C, 2), g = random_floats(C, 3);
  std::vector<float> out(N * 3 * C), ln(N * C), mean(N), rstd(N);
  for (auto _ : state) {
    etr::cpu::matmul_forward<float>(out.data(), inp.data(), w.data(), nullptr, N, C, 3 * C);
    etr::cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), inp.data(), g.data(), g.data(),
                                N, C);
    benchmark::ClobberMemory();
  }
  flops(state, 2.0 * N * C * 3 * C);
}

void BM_interplay_openblas_threads(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  set_threads(state);
  auto inp = random_floats(N * C, 1), w = random_floats(3 * C * C, 2), g = random_floats(C, 3);
  std::vector<float> out(N * 3 * C), ln(N * C), mean(N), rstd(N);
  openblas_set_num_threads(n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, 3 * C, C, 1.0f, inp.data(), C, w.data(),
                C, 0.0f, out.data(), 3 * C);
    // the layernorm's OpenMP team, without the kernels' reset of OpenBLAS to one thread
    etr::cpu::layernorm_forward(ln.data(), mean.data(), rstd.data(), inp.data(), g.data(), g.data(),
                                N, C);
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(1);
  flops(state, 2.0 * N * C * 3 * C);
}

void register_all() {
  auto threads = [](benchmark::internal::Benchmark* b) {
    b->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMicrosecond);
  };
  for (const Product& p : kProducts) {
    const std::string s = p.name;
    threads(benchmark::RegisterBenchmark(("sgemm_openblas_threads/" + s).c_str(),
                                         BM_sgemm_openblas_threads, p));
    threads(benchmark::RegisterBenchmark(("matmul_forward/" + s).c_str(), BM_matmul_forward, p));
    threads(benchmark::RegisterBenchmark(("matmul_backward/" + s).c_str(), BM_matmul_backward, p));
  }
  threads(benchmark::RegisterBenchmark("attention_forward", BM_attention_forward));
  threads(benchmark::RegisterBenchmark("attention_backward", BM_attention_backward));
  threads(benchmark::RegisterBenchmark("layernorm_forward", BM_layernorm_forward));
  threads(benchmark::RegisterBenchmark("layernorm_backward", BM_layernorm_backward));
  threads(benchmark::RegisterBenchmark("gelu_forward", BM_gelu_forward));
  threads(benchmark::RegisterBenchmark("gelu_backward", BM_gelu_backward));
  threads(benchmark::RegisterBenchmark("residual_forward", BM_residual_forward));
  threads(benchmark::RegisterBenchmark("residual_backward", BM_residual_backward));
  threads(benchmark::RegisterBenchmark("encoder_forward", BM_encoder_forward));
  threads(benchmark::RegisterBenchmark("encoder_backward", BM_encoder_backward));
  threads(benchmark::RegisterBenchmark("softmax_xent_forward_backward",
                                       BM_softmax_xent_forward_backward));
  threads(benchmark::RegisterBenchmark("interplay/etr_matmul+layernorm", BM_interplay_etr));
  threads(benchmark::RegisterBenchmark("interplay/openblas_threads_sgemm+layernorm",
                                       BM_interplay_openblas_threads));
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("gpt", "B 8, T 128, C 256, NH 4, V 256 (N = B T = 1024)");
  benchmark::AddCustomContext("openblas", openblas_get_config());
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
