#include "runtime/dtype.h"

#include <string>

#include "runtime/error.h"

namespace etr {

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32}) {
    if (dtype_name(t) == name) return t;
  }
  throw ConfigError("unknown dtype '" + std::string(name) +
                    "'; use one of f32, f64, bf16, f16, i32");
}

}  // namespace etr
