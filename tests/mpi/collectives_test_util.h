// Helpers shared by the multi-rank collectives tests (collectives_*_test.cc).
//
// Inputs are a pure function of (dtype, fill, salt, rank, index), so every rank can
// compute every rank's input and hence the reference result, in double precision,
// without any communication. Two fills:
//   kExact:  multiples of 0.25 in [-8, 8) (integers in [-100000, 100000] for i32). With
//            at most 8 ranks every partial sum is exactly representable in every dtype
//            (|sum| <= 64 needs 8 significant bits: bf16 has 8), so sum/max/min must be
//            exact whatever the algorithm's association order or per-hop rounding.
//   kRandom: uniform in [-1, 1) rounded to the dtype (i32 as kExact), so reductions
//            round; checked against the tolerances of tolerance() below.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "collectives/comm_options.h"
#include "collectives/communicator.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

namespace etr::testing {

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                       DType::kI32};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                       ReduceOp::kMin};

enum class Fill { kExact, kRandom };

// Options for correctness tests: defaults (not from_env, so ETR_* variables set in the
// caller's shell cannot change what is tested) with a 60 s timeout, so a stuck
// collective fails the test with a CommError naming it instead of hanging ctest.
CommOptions test_options(AllreduceAlgo algo = AllreduceAlgo::kAuto);

// Input of `rank` at element `i`, already rounded to `t`.
double input_value(DType t, Fill fill, uint64_t salt, int rank, int64_t i);
// Inputs of all `np` ranks, rank-major: [np * count].
std::vector<double> all_inputs(DType t, Fill fill, uint64_t salt, int np, int64_t count);

void store(DType t, void* base, int64_t i, double v);
double load(DType t, const void* base, int64_t i);

// Host bytes for `count` elements followed by kGuard guard elements filled with a
// sentinel pattern: guard_intact() tells whether anything wrote past the payload.
class Buffer {
 public:
  static constexpr int64_t kGuard = 8;
  Buffer(DType t, int64_t count);
  DType dtype() const { return dtype_; }
  int64_t count() const { return count_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t nbytes() const { return static_cast<size_t>(count_) * dtype_size(dtype_); }
  TensorView view() { return TensorView::flat(data(), count_, dtype_); }
  TensorView view(int64_t offset, int64_t count) { return view().slice(offset, count); }
  // Payload := `values[offset + i]`, i < count().
  void fill_from(const std::vector<double>& values, int64_t offset);
  // Payload := the sentinel byte pattern (what out-of-place outputs start as).
  void fill_sentinel();
  bool guard_intact() const;
  double at(int64_t i) const { return load(dtype_, data(), i); }

 private:
  DType dtype_;
  int64_t count_;
  std::vector<unsigned char> bytes_;
};

// Reference reduction over ranks of inputs[q * stride + offset + i], i < count.
struct Reference {
  std::vector<double> value;
  std::vector<double> abs_sum;  // sum over ranks of |input| (divided by np for avg)
};
Reference reduce_reference(const std::vector<double>& inputs, int np, int64_t stride,
                           int64_t offset, int64_t count, ReduceOp op);

// Accepted error |got - ref| <= rel_abs_sum * abs_sum + rel_result * |ref| + abs.
//   exact fill: sum/max/min exact (0); avg 4 units of roundoff of the dtype (the divide,
//     or a multiply by a rounded 1/n, and a final rounding to the dtype).
//   random fill, sum and avg (relative to the sum of magnitudes, so cancellation is fair):
//     f64 1e-12; f32 1e-6 * np; bf16 2^-8 * np (per-hop rounding of partial sums sent
//     in bf16); f16 2^-11 * np, plus np * 2^-24 absolute for f16 subnormals.
//   max/min always exact; i32 always exact.
struct Tolerance {
  double rel_abs_sum = 0;
  double rel_result = 0;
  double abs = 0;
};
Tolerance tolerance(DType t, Fill fill, ReduceOp op, int np);

// "" when every element of `got` (count elements from `base`) is within tolerance of
// ref, else how many are not and the first few, with expected and got values.
std::string compare(DType t, const void* base, const Reference& ref, const Tolerance& tol);
// "" when got[i] bitwise equals expected values (rounded to the dtype).
std::string compare_exact(DType t, const void* base, const std::vector<double>& expected,
                          int64_t offset, int64_t count);

uint64_t hash_bytes(const void* data, size_t n);

// Records a hash of each case's output; check() gathers them over `comm` and returns
// the labels of cases whose outputs were not bitwise identical on every rank.
class ReplicaHashes {
 public:
  void add(const std::string& label, const void* data, size_t n);
  std::vector<std::string> differing(MPI_Comm comm) const;

 private:
  std::vector<std::string> labels_;
  std::vector<uint64_t> hashes_;
};

// Runs `issue` and waits for the Work it returns (the call itself may throw, e.g. on
// argument errors, or the wait may rethrow): returns what was thrown, or null.
std::exception_ptr run_op(const std::function<WorkPtr()>& issue,
                          std::chrono::milliseconds wait_timeout = Work::kForever);
// what() of an exception_ptr, or "no exception".
std::string what(const std::exception_ptr& e);
template <typename E>
bool holds(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const E&) {
    return true;
  } catch (...) {
    return false;
  }
}

const char* op_name(ReduceOp op);
const char* algo_name(AllreduceAlgo a);
// "allreduce(sum, f32, n=1000, in-place, algo=ring, np=3)"-style labels.
std::string label(const std::string& what, ReduceOp op, DType t, int64_t n, bool in_place,
                  const std::string& extra, int np);
std::string label(const std::string& what, DType t, int64_t n, bool in_place,
                  const std::string& extra, int np);

}  // namespace etr::testing
