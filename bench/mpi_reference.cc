#include "bench/mpi_reference.h"

#include <algorithm>
#include <cstdint>

#include "runtime/mpi_check.h"

namespace etr::bench {

namespace {

enum class Combine { kSum, kMax, kMin };

// MPI user function: inout[i] = combine(in[i], inout[i]) for 16-bit floats, in f32.
template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float), Combine C>
void combine_16bit(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = ToF32(a[i]), y = ToF32(b[i]);
    float r = C == Combine::kSum ? x + y : C == Combine::kMax ? std::max(x, y) : std::min(x, y);
    b[i] = FromF32(r);
  }
}

template <float (*ToF32)(uint16_t), uint16_t (*FromF32)(float)>
MPI_User_function* user_function(Combine c) {
  switch (c) {
    case Combine::kSum:
      return &combine_16bit<ToF32, FromF32, Combine::kSum>;
    case Combine::kMax:
      return &combine_16bit<ToF32, FromF32, Combine::kMax>;
    case Combine::kMin:
      return &combine_16bit<ToF32, FromF32, Combine::kMin>;
  }
  return nullptr;
}

}  // namespace

MpiReference::MpiReference(DType dtype, ReduceOp op) {
  divide_ = op == ReduceOp::kAvg;
  Combine combine = op == ReduceOp::kMax   ? Combine::kMax
                    : op == ReduceOp::kMin ? Combine::kMin
                                           : Combine::kSum;
  const char* combine_name = combine == Combine::kSum   ? "sum"
                             : combine == Combine::kMax ? "max"
                                                        : "min";
  switch (dtype) {
    case DType::kF32:
      type_ = MPI_FLOAT;
      description_ = "MPI_FLOAT";
      break;
    case DType::kF64:
      type_ = MPI_DOUBLE;
      description_ = "MPI_DOUBLE";
      break;
    case DType::kI32:
      type_ = MPI_INT32_T;
      description_ = "MPI_INT32_T";
      break;
    case DType::kBF16:
    case DType::kF16: {
      type_ = MPI_UINT16_T;
      MPI_User_function* fn = dtype == DType::kBF16
                                  ? user_function<bf16_to_f32, f32_to_bf16>(combine)
                                  : user_function<f16_to_f32, f32_to_f16>(combine);
      MPI_CHECK(MPI_Op_create(fn, /*commute=*/1, &op_));
      user_op_ = true;
      description_ = std::string("MPI_UINT16_T, user op (") + std::string(dtype_name(dtype)) + " " +
                     combine_name + " in f32)";
      break;
    }
  }
  type_name_ = user_op_ ? "MPI_UINT16_T" : description_;
  if (!user_op_) {
    op_ = combine == Combine::kSum ? MPI_SUM : combine == Combine::kMax ? MPI_MAX : MPI_MIN;
    description_ += combine == Combine::kSum   ? ", MPI_SUM"
                    : combine == Combine::kMax ? ", MPI_MAX"
                                               : ", MPI_MIN";
  }
  if (divide_) description_ += "; avg = MPI's sum / n, compared only";
}

MpiReference::~MpiReference() {
  if (user_op_) MPI_Op_free(&op_);
}

}  // namespace etr::bench
