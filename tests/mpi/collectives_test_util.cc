#include "mpi/collectives_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace etr::testing {
namespace {

constexpr unsigned char kSentinel = 0x5A;  // f32 1.5e16, bf16/f16 finite, i32 0x5A5A5A5A

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Unit roundoff of each floating dtype.
double roundoff(DType t) {
  switch (t) {
    case DType::kF64:
      return std::ldexp(1.0, -53);
    case DType::kF32:
      return std::ldexp(1.0, -24);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kF16:
      return std::ldexp(1.0, -11);
    case DType::kI32:
      return 0;
  }
  return 0;
}

std::string format_value(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

CommOptions test_options(AllreduceAlgo algo) {
  CommOptions o;
  o.allreduce_algo = algo;
  o.timeout = std::chrono::milliseconds(60'000);
  return o;
}

void store(DType t, void* base, int64_t i, double v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      return;
    case DType::kF64:
      static_cast<double*>(base)[i] = v;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(base)[i] = f32_to_bf16(static_cast<float>(v));
      return;
    case DType::kF16:
      static_cast<uint16_t*>(base)[i] = f32_to_f16(static_cast<float>(v));
      return;
    case DType::kI32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      return;
  }
}

double load(DType t, const void* base, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(base)[i];
    case DType::kF64:
      return static_cast<const double*>(base)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::kI32:
      return static_cast<const int32_t*>(base)[i];
  }
  return 0;
}

double input_value(DType t, Fill fill, uint64_t salt, int rank, int64_t i) {
  uint64_t h = splitmix64(salt * 0x100000001B3ull ^
                          splitmix64(static_cast<uint64_t>(rank) << 40 ^ static_cast<uint64_t>(i)));
  double v;
  if (t == DType::kI32) {
    v = static_cast<double>(static_cast<int64_t>(h % 200001) - 100000);
  } else if (fill == Fill::kExact) {
    v = static_cast<double>(static_cast<int64_t>(h % 16) - 8) + 0.25 * ((h >> 8) % 4);
  } else {
    v = static_cast<double>(h >> 11) * std::ldexp(1.0, -52) - 1.0;
  }
  unsigned char tmp[8];
  store(t, tmp, 0, v);
  return load(t, tmp, 0);
}

std::vector<double> all_inputs(DType t, Fill fill, uint64_t salt, int np, int64_t count) {
  std::vector<double> v(static_cast<size_t>(np * count));
  for (int q = 0; q < np; ++q)
    for (int64_t i = 0; i < count; ++i) v[q * count + i] = input_value(t, fill, salt, q, i);
  return v;
}

Buffer::Buffer(DType t, int64_t count)
    : dtype_(t),
      count_(count),
      bytes_(static_cast<size_t>(count + kGuard) * dtype_size(t), kSentinel) {}

void Buffer::fill_from(const std::vector<double>& values, int64_t offset) {
  for (int64_t i = 0; i < count_; ++i) store(dtype_, data(), i, values[offset + i]);
}

void Buffer::fill_sentinel() {
  std::memset(bytes_.data(), kSentinel, nbytes());
}

bool Buffer::guard_intact() const {
  return std::all_of(bytes_.begin() + static_cast<std::ptrdiff_t>(nbytes()), bytes_.end(),
                     [](unsigned char b) { return b == kSentinel; });
}

Reference reduce_reference(const std::vector<double>& inputs, int np, int64_t stride,
                           int64_t offset, int64_t count, ReduceOp op) {
  Reference r;
  r.value.resize(static_cast<size_t>(count));
  r.abs_sum.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    double acc = inputs[offset + i], abs_sum = 0;
    for (int q = 0; q < np; ++q) {
      double x = inputs[q * stride + offset + i];
      abs_sum += std::fabs(x);
      if (q == 0) continue;
      if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += x;
      if (op == ReduceOp::kMax) acc = std::max(acc, x);
      if (op == ReduceOp::kMin) acc = std::min(acc, x);
    }
    if (op == ReduceOp::kAvg) {
      acc /= np;
      abs_sum /= np;
    }
    r.value[i] = acc;
    r.abs_sum[i] = abs_sum;
  }
  return r;
}

Tolerance tolerance(DType t, Fill fill, ReduceOp op, int np) {
  Tolerance tol;
  if (t == DType::kI32 || op == ReduceOp::kMax || op == ReduceOp::kMin) return tol;
  if (op == ReduceOp::kAvg) tol.rel_result = 4 * roundoff(t);
  if (fill == Fill::kExact) return tol;
  switch (t) {
    case DType::kF64:
      tol.rel_abs_sum = 1e-12;
      break;
    case DType::kF32:
      tol.rel_abs_sum = 1e-6 * np;
      break;
    case DType::kBF16:
      tol.rel_abs_sum = std::ldexp(1.0, -8) * np;
      break;
    case DType::kF16:
      tol.rel_abs_sum = std::ldexp(1.0, -11) * np;
      tol.abs = std::ldexp(1.0, -24) * np;
      break;
    case DType::kI32:
      break;
  }
  return tol;
}

std::string compare(DType t, const void* base, const Reference& ref, const Tolerance& tol) {
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < ref.value.size(); ++i) {
    double got = load(t, base, static_cast<int64_t>(i));
    double want = ref.value[i];
    double allowed = tol.rel_abs_sum * ref.abs_sum[i] + tol.rel_result * std::fabs(want) + tol.abs;
    if (std::fabs(got - want) <= allowed) continue;  // NaN lands below
    if (bad++ < 3)
      first << " [" << i << "] expected " << format_value(want) << " got " << format_value(got)
            << " (allowed error " << format_value(allowed) << ");";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(ref.value.size()) +
         " elements wrong:" + first.str();
}

std::string compare_exact(DType t, const void* base, const std::vector<double>& expected,
                          int64_t offset, int64_t count) {
  std::vector<unsigned char> want(static_cast<size_t>(count) * dtype_size(t));
  for (int64_t i = 0; i < count; ++i) store(t, want.data(), i, expected[offset + i]);
  const size_t es = dtype_size(t);
  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < count; ++i) {
    if (std::memcmp(static_cast<const unsigned char*>(base) + i * es, want.data() + i * es, es) ==
        0)
      continue;
    if (bad++ < 3)
      first << " [" << i << "] expected " << format_value(expected[offset + i]) << " got "
            << format_value(load(t, base, i)) << ";";
  }
  if (bad == 0) return "";
  return std::to_string(bad) + " of " + std::to_string(count) +
         " elements not bitwise equal to the expected values:" + first.str();
}

uint64_t hash_bytes(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

void ReplicaHashes::add(const std::string& label, const void* data, size_t n) {
  labels_.push_back(label);
  hashes_.push_back(hash_bytes(data, n));
}

std::vector<std::string> ReplicaHashes::differing(MPI_Comm comm) const {
  int np = 0;
  MPI_Comm_size(comm, &np);
  // Every rank must have run the same cases; gather the counts first so a mismatch is
  // reported instead of reading past a shorter vector.
  int mine = static_cast<int>(hashes_.size());
  std::vector<int> counts(static_cast<size_t>(np));
  MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, comm);
  for (int c : counts)
    if (c != mine)
      return {"(ranks ran different numbers of cases: " + std::to_string(c) + " vs " +
              std::to_string(mine) + ")"};
  std::vector<uint64_t> all(static_cast<size_t>(np) * hashes_.size());
  MPI_Allgather(hashes_.data(), mine, MPI_UINT64_T, all.data(), mine, MPI_UINT64_T, comm);
  std::vector<std::string> out;
  for (size_t i = 0; i < hashes_.size(); ++i)
    for (int q = 0; q < np; ++q)
      if (all[q * hashes_.size() + i] != hashes_[i]) {
        out.push_back(labels_[i] + " (differs from rank " + std::to_string(q) + ")");
        break;
      }
  return out;
}

std::exception_ptr run_op(const std::function<WorkPtr()>& issue,
                          std::chrono::milliseconds wait_timeout) {
  try {
    WorkPtr w = issue();
    if (!w) throw std::runtime_error("the operation returned a null Work");
    w->wait(wait_timeout);
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

std::string what(const std::exception_ptr& e) {
  if (!e) return "no exception";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

const char* algo_name(AllreduceAlgo a) {
  switch (a) {
    case AllreduceAlgo::kAuto:
      return "auto";
    case AllreduceAlgo::kRing:
      return "ring";
    case AllreduceAlgo::kRecursiveDoubling:
      return "rd";
    case AllreduceAlgo::kHierarchical:
      return "hier";
    case AllreduceAlgo::kMpi:
      return "mpi";
  }
  return "?";
}

std::string label(const std::string& what, ReduceOp op, DType t, int64_t n, bool in_place,
                  const std::string& extra, int np) {
  return what + "(" + op_name(op) + ", " + std::string(dtype_name(t)) + ", n=" + std::to_string(n) +
         (in_place ? ", in-place" : ", out-of-place") + (extra.empty() ? "" : ", " + extra) +
         ", np=" + std::to_string(np) + ")";
}

std::string label(const std::string& what, DType t, int64_t n, bool in_place,
                  const std::string& extra, int np) {
  return what + "(" + std::string(dtype_name(t)) + ", n=" + std::to_string(n) +
         (in_place ? ", in-place" : ", out-of-place") + (extra.empty() ? "" : ", " + extra) +
         ", np=" + std::to_string(np) + ")";
}

}  // namespace etr::testing
