// safetensors element types and shapes (safetensors.h): the dtype table, names, sizes,
// the mapping to etr's DType, and the overflow-checked shape arithmetic the reader and
// the writer share (safetensors_detail.h).
#include <array>
#include <string>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_detail.h"
#include "runtime/error.h"

namespace etr {

namespace {

struct DTypeInfo {
  SafetensorsDType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 19> kDTypes = {{
    {SafetensorsDType::kBool, "BOOL", 1},
    {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kF8E8M0, "F8_E8M0", 1},
    {SafetensorsDType::kF8E4M3Fnuz, "F8_E4M3FNUZ", 1},
    {SafetensorsDType::kF8E5M2Fnuz, "F8_E5M2FNUZ", 1},
    {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},
    {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},
    {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},
    {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kC64, "C64", 8},
    {SafetensorsDType::kF64, "F64", 8},
    {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
}};

// kDTypes is indexed by the enum's value.
constexpr bool dtype_table_in_enum_order() {
  for (size_t i = 0; i < kDTypes.size(); ++i)
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(dtype_table_in_enum_order());

const DTypeInfo& info_of(SafetensorsDType t) {
  return kDTypes[static_cast<size_t>(t)];
}

}  // namespace

namespace safetensors_detail {

std::string in_quotes(std::string_view s) {
  // Appended piecewise: "'" + std::string(s) + "'" trips GCC 12's -Wrestrict false positive.
  std::string q;
  q.reserve(s.size() + 2);
  q.push_back('\'');
  q.append(s);
  q.push_back('\'');
  return q;
}

// Product of the extents, or nothing when it does not fit in int64_t.
std::optional<int64_t> checked_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::optional<uint64_t> checked_nbytes(std::span<const int64_t> shape, SafetensorsDType t) {
  std::optional<int64_t> n = checked_numel(shape);
  uint64_t bytes;
  if (!n || __builtin_mul_overflow(static_cast<uint64_t>(*n), safetensors_dtype_size(t), &bytes))
    return std::nullopt;
  return bytes;
}

}  // namespace safetensors_detail

using namespace safetensors_detail;

// ---------------------------------------------------------------------------------------
// Element types

size_t safetensors_dtype_size(SafetensorsDType t) {
  return info_of(t).size;
}

std::string_view safetensors_dtype_name(SafetensorsDType t) {
  return info_of(t).name;
}

std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes)
    if (d.name == name) return d.dtype;
  return std::nullopt;
}

std::string safetensors_dtype_list() {
  std::string s;
  for (const DTypeInfo& d : kDTypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

SafetensorsDType to_safetensors_dtype(DType t) {
  switch (t) {
    case DType::kF32:
      return SafetensorsDType::kF32;
    case DType::kF64:
      return SafetensorsDType::kF64;
    case DType::kBF16:
      return SafetensorsDType::kBF16;
    case DType::kF16:
      return SafetensorsDType::kF16;
    case DType::kI32:
      return SafetensorsDType::kI32;
  }
  throw InvalidArgument("etr dtype " + std::to_string(static_cast<int>(t)) +
                        " has no safetensors spelling");
}

std::optional<DType> to_etr_dtype(SafetensorsDType t) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32})
    if (to_safetensors_dtype(d) == t) return d;
  return std::nullopt;
}

std::string shape_text(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace etr
