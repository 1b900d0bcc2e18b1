// The host collective algorithms (collectives/ring_algorithms.h, recursive_doubling.h,
// hierarchical.h) with ranks as threads over InProcessTransport: every world size 1-16,
// odd and empty counts, every dtype and reduce op, against the exact reduction computed
// here. The values are small whole numbers, so every sum is exact in every dtype and the
// results must match bit for bit (avg: the exact sum divided as the algorithms divide).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/hierarchical.h"
#include "collectives/in_process_transport.h"
#include "collectives/op_context.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring_algorithms.h"
#include "collectives/work.h"
#include "runtime/dtype.h"

namespace etr {
namespace {

constexpr DType kDtypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

// Rank r's element i: a whole number in [-4, 4].
double value(int r, int64_t i) { return static_cast<double>((r * 7 + i * 3 + r * i) % 9) - 4; }

void store(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case DType::kF64: static_cast<double*>(base)[i] = v; return;
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(static_cast<float>(v)); return;
    case DType::kF16: static_cast<uint16_t*>(base)[i] = f32_to_f16(static_cast<float>(v)); return;
    case DType::kI32: static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v); return;
  }
}

// The reduction of element i over n ranks, in dtype t's bytes.
std::vector<uint8_t> expected(DType t, ReduceOp op, int n, int64_t count) {
  std::vector<uint8_t> out(static_cast<size_t>(count) * dtype_size(t) + 1);
  for (int64_t i = 0; i < count; ++i) {
    double sum = 0, most = -1e9, least = 1e9;
    for (int r = 0; r < n; ++r) {
      sum += value(r, i);
      most = std::max(most, value(r, i));
      least = std::min(least, value(r, i));
    }
    double v = op == ReduceOp::kMax ? most : op == ReduceOp::kMin ? least : sum;
    store(t, out.data(), i, v);
    if (op == ReduceOp::kAvg && n > 1) {  // as reduce_kernels' divide: in the dtype's width
      if (t == DType::kF64) v = sum / n;
      if (t == DType::kF32 || t == DType::kBF16 || t == DType::kF16) {
        v = static_cast<float>(sum) / static_cast<float>(n);
      }
      store(t, out.data(), i, v);
    }
  }
  return out;
}

std::vector<uint8_t> input(DType t, int r, int64_t count) {
  std::vector<uint8_t> in(static_cast<size_t>(count) * dtype_size(t) + 1);
  for (int64_t i = 0; i < count; ++i) store(t, in.data(), i, value(r, i));
  return in;
}

// One rank's algorithm context: its work, deadline, scratch and parameters.
struct RankRun {
  HostWork work{OpDescription{"test"}};
  OpContext ctx;
  RingScratch scratch;
  AlgoParams params;
  RankRun(Transport& t, DType dtype, int64_t chunk)
      : ctx(work, t.rank(), t.size(), std::chrono::seconds(60), IdlePolicy{16, 64, std::chrono::microseconds(50)}),
        params{t, ctx, scratch, dtype, chunk, 2, false} {}
};

// Runs body(rank) on n threads; rethrows the first failure.
void on_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::string what(const char* algo, int n, DType t, ReduceOp op, int64_t count) {
  return std::string(algo) + " n " + std::to_string(n) + " " + std::string(dtype_name(t)) + " " + reduce_op_name(op) +
         " count " + std::to_string(count);
}

bool same(const std::vector<uint8_t>& a, const uint8_t* b, size_t bytes) { return std::memcmp(a.data(), b, bytes) == 0; }

TEST(CollectiveAlgorithms, AllreduceRingAndRecursiveDoublingAtEveryWorldSize) {
  int cases = 0;
  for (int n = 1; n <= 16; ++n) {
    for (DType t : kDtypes) {
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::kAvg && t == DType::kI32) continue;  // not defined for i32
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n + 2}, int64_t{1031}}) {
          const std::vector<uint8_t> want = expected(t, op, n, count);
          const size_t bytes = static_cast<size_t>(count) * dtype_size(t);
          for (bool rd : {false, true}) {
            InProcessFabric fabric(n);
            std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
            on_threads(n, [&](int r) {
              RankRun run(fabric.transport(r), t, 64);  // pieces of 64: many per segment
              std::vector<uint8_t> in = input(t, r, count);
              out[static_cast<size_t>(r)].assign(in.size(), 0);
              if (rd) {
                recursive_doubling_allreduce(run.params, in.data(), out[static_cast<size_t>(r)].data(), count, op);
              } else {
                ring_allreduce(run.params, in.data(), out[static_cast<size_t>(r)].data(), count, op);
              }
            });
            for (int r = 0; r < n; ++r) {
              ASSERT_TRUE(same(want, out[static_cast<size_t>(r)].data(), bytes))
                  << what(rd ? "recursive doubling" : "ring", n, t, op, count) << " rank " << r;
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

TEST(CollectiveAlgorithms, ReduceScatterAndAllgatherAtEveryWorldSize) {
  for (int n = 1; n <= 16; ++n) {
    for (DType t : kDtypes) {
      for (int64_t block : {int64_t{0}, int64_t{1}, int64_t{67}}) {
        const int64_t count = block * n;
        const std::vector<uint8_t> want = expected(t, ReduceOp::kSum, n, count);
        const size_t es = dtype_size(t), block_bytes = static_cast<size_t>(block) * es;
        InProcessFabric fabric(n);
        std::vector<std::vector<uint8_t>> mine(static_cast<size_t>(n)), all(static_cast<size_t>(n));
        on_threads(n, [&](int r) {
          RankRun run(fabric.transport(r), t, 16);
          std::vector<uint8_t> in = input(t, r, count);
          auto& m = mine[static_cast<size_t>(r)];
          m.assign(block_bytes + 1, 0);
          ring_reduce_scatter(run.params, in.data(), m.data(), block, ReduceOp::kSum);
          // Then every rank's block gathered back: the whole reduction again.
          auto& a = all[static_cast<size_t>(r)];
          a.assign(static_cast<size_t>(count) * es + 1, 0);
          ring_allgather(run.params, m.data(), a.data(), block);
        });
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(same(std::vector<uint8_t>(want.begin() + static_cast<std::ptrdiff_t>(r * block_bytes),
                                                want.end()),
                           mine[static_cast<size_t>(r)].data(), block_bytes))
              << what("reduce-scatter", n, t, ReduceOp::kSum, count) << " rank " << r;
          ASSERT_TRUE(same(want, all[static_cast<size_t>(r)].data(), static_cast<size_t>(count) * es))
              << what("allgather", n, t, ReduceOp::kSum, count) << " rank " << r;
        }
      }
    }
  }
}

// H hosts of L ranks: each rank's host ring (L) and its ring across hosts (H); for 2
// hosts also the alternating ring of all 2L ranks.
TEST(CollectiveAlgorithms, HierarchicalOverEveryHostShapeUpTo16Ranks) {
  for (int hosts = 2; hosts <= 8; ++hosts) {
    for (int local = 1; hosts * local <= 16; ++local) {
      const int n = hosts * local;
      for (DType t : {DType::kF32, DType::kBF16, DType::kI32}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
          if (op == ReduceOp::kAvg && t == DType::kI32) continue;
          for (int64_t count : {int64_t{1}, int64_t{n * 5 + 3}}) {
            const std::vector<uint8_t> want = expected(t, op, n, count);
            const size_t bytes = static_cast<size_t>(count) * dtype_size(t);
            for (bool two : {false, true}) {
              if (two && (hosts != 2 || local < 2)) continue;
              std::vector<std::unique_ptr<InProcessFabric>> within, across;
              for (int h = 0; h < hosts; ++h) within.push_back(std::make_unique<InProcessFabric>(local));
              for (int l = 0; l < local; ++l) across.push_back(std::make_unique<InProcessFabric>(hosts));
              InProcessFabric alternating(n);
              std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n));
              on_threads(n, [&](int g) {
                const int h = g / local, l = g % local;
                RankRun in_host(within[static_cast<size_t>(h)]->transport(l), t, 8);
                RankRun other(two ? alternating.transport(2 * l + h) : across[static_cast<size_t>(l)]->transport(h),
                              t, 8);
                std::vector<uint8_t> in = input(t, g, count);
                auto& o = out[static_cast<size_t>(g)];
                o.assign(in.size(), 0);
                if (two) {
                  two_host_allreduce(in_host.params, other.params, h, in.data(), o.data(), count, op);
                } else {
                  hierarchical_allreduce(in_host.params, other.params, in.data(), o.data(), count, op);
                }
              });
              for (int g = 0; g < n; ++g) {
                ASSERT_TRUE(same(want, out[static_cast<size_t>(g)].data(), bytes))
                    << what(two ? "two-host" : "hierarchical", n, t, op, count) << " hosts " << hosts << " rank " << g;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace etr
