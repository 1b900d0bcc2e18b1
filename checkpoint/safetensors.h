// The safetensors file format (Hugging Face): etr exports and imports model weights in
// it (docs/design.md, "Programs": etr-ckpt export; docs/gpt2_weights.md for GPT-2's names).
//
// Layout of a file:
//   [8 bytes]  N, unsigned little-endian: the length of the header
//   [N bytes]  JSON object, UTF-8, padded with spaces to a multiple of 8 bytes:
//              {"__metadata__": {"format": "pt"},                      (optional, str -> str)
//               "wte.weight": {"dtype": "F32", "shape": [256, 16],
//                              "data_offsets": [0, 16384]}, ...}
//   [rest]     the data section: tensor bytes, row-major, little-endian; data_offsets
//              are [begin, end) relative to the start of this section
//
//   write_safetensors(dir / "model.safetensors",
//                     {{"wte.weight", SafetensorsDType::kF32, {256, 16}, wte_ptr}},
//                     {{"format", "pt"}});
//   SafetensorsFile f(dir / "model.safetensors");      // mmap + validate everything
//   std::span<const float> w = f.tensor("wte.weight").as<float>();
//   f.read_into("wpe.weight", dst, SafetensorsDType::kF32, {32, 16});
//
// Reader rules (each broken one is an IoError naming the file and, where there is one,
// the tensor): the header length fits the file and is at most kMaxHeaderBytes; the
// header is one JSON object (no duplicate keys at any level); every entry has a known
// dtype, a shape of non-negative integers and data_offsets [begin, end] with begin <=
// end <= the data section's size; shape product x dtype size == end - begin; sorted by
// offset, the entries tile the data section exactly: no overlap, no hole, no trailing
// bytes. Holes and trailing bytes are rejected, not merely warned about: the reference
// implementation (the safetensors Rust crate behind Python's safetensors and
// transformers) refuses such files, so accepting them would let etr read a file that
// the rest of the ecosystem calls corrupt (checked with safetensors 0.8.0: "invalid
// offset for tensor", "file not fully covered"). Unknown fields inside an entry are
// ignored, as the reference implementation does. A repeated name is refused, where the
// reference implementation silently keeps one of the two entries.
//
// Writer: tensors are laid out by element size, largest first (stable among equal
// sizes), so every tensor's bytes are aligned to its element size in the file and in a
// mapping of it (the data section starts at a multiple of 8); the header lists
// "__metadata__" (when given) and then the tensors in data order. The file is written
// with DurableFile: `path` holds either its old content or the complete new file.
#pragma once

#include <complex>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/tensor.h"

namespace etr {

// The element types of safetensors whose elements are whole bytes, in the reference
// implementation's order. Its sub-byte types ("F4", "F6_E2M3", "F6_E3M2") are not
// supported: a file with one is refused by name.
enum class SafetensorsDType : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

size_t safetensors_dtype_size(SafetensorsDType t);
// The header spelling: "F32", "BF16", "F8_E4M3", "BOOL", ...
std::string_view safetensors_dtype_name(SafetensorsDType t);
std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name);
// "BOOL, U8, I8, ..." for error messages.
std::string safetensors_dtype_list();
// etr's dtypes all have a safetensors spelling; the reverse holds for five of them.
SafetensorsDType to_safetensors_dtype(DType t);
std::optional<DType> to_etr_dtype(SafetensorsDType t);

// "[16, 48]"
std::string shape_text(std::span<const int64_t> shape);

// One tensor to write: `data` holds product(shape) elements, row-major, little-endian.
struct SafetensorsTensorRef {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;  // [] is a scalar (one element)
  const void* data;            // may be null when the tensor has no elements

  // A host view's name, dtype, shape and pointer.
  static SafetensorsTensorRef of(std::string name, const TensorView& view);
};

using SafetensorsMetadata = std::map<std::string, std::string>;

// Writes `tensors` and `metadata` to `path` durably. Throws InvalidArgument for a bad
// argument (an empty or repeated name, "__metadata__" as a tensor name, a negative
// extent, null data for a non-empty tensor, a name or metadata that is not UTF-8) and
// IoError when the file cannot be written.
void write_safetensors(const std::filesystem::path& path,
                       std::span<const SafetensorsTensorRef> tensors,
                       const SafetensorsMetadata& metadata = {});
inline void write_safetensors(const std::filesystem::path& path,
                              std::initializer_list<SafetensorsTensorRef> tensors,
                              const SafetensorsMetadata& metadata = {}) {
  write_safetensors(path, std::span<const SafetensorsTensorRef>(tensors.begin(), tensors.size()),
                    metadata);
}

namespace detail {
// Whether elements of C++ type T can hold elements of `t` bit for bit: float is F32,
// uint16_t is U16, F16 or BF16, uint8_t is U8, BOOL or any F8, and so on.
template <typename T>
constexpr bool storage_fits(SafetensorsDType t) {
  using D = SafetensorsDType;
  if constexpr (std::is_same_v<T, float>)
    return t == D::kF32;
  else if constexpr (std::is_same_v<T, double>)
    return t == D::kF64;
  else if constexpr (std::is_same_v<T, std::complex<float>>)
    return t == D::kC64;
  else if constexpr (std::is_same_v<T, int8_t>)
    return t == D::kI8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return t == D::kU8 || t == D::kBool || t == D::kF8E5M2 || t == D::kF8E4M3 || t == D::kF8E8M0 ||
           t == D::kF8E4M3Fnuz || t == D::kF8E5M2Fnuz;
  else if constexpr (std::is_same_v<T, int16_t>)
    return t == D::kI16;
  else if constexpr (std::is_same_v<T, uint16_t>)
    return t == D::kU16 || t == D::kF16 || t == D::kBF16;
  else if constexpr (std::is_same_v<T, int32_t>)
    return t == D::kI32;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return t == D::kU32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return t == D::kI64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return t == D::kU64;
  else
    static_assert(sizeof(T) == 0, "no safetensors dtype is stored as this C++ type");
  return false;
}
}  // namespace detail

// One tensor of an open file: its header entry and its bytes in the mapping.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;
  std::span<const std::byte> bytes;  // valid while the SafetensorsFile is open
  std::string file;                  // the file's path, for error messages

  int64_t numel() const;
  // The elements as T (see detail::storage_fits). Throws IoError when the dtype is not
  // stored as T or the bytes are not aligned for T (a file from a writer that does not
  // order tensors by element size); read_into copies and needs no alignment.
  template <typename T>
  std::span<const T> as() const {
    check_view(detail::storage_fits<T>(dtype), alignof(T), "the C++ type asked for");
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }

 private:
  void check_view(bool dtype_fits, size_t alignment, const char* what) const;
};

// A safetensors file, mapped read-only and validated on open. Move-only; the spans it
// hands out stay valid until it is destroyed. The file must not be truncated while open
// (as for any mapping, reading a page that is gone raises SIGBUS).
class SafetensorsFile {
 public:
  // The largest header accepted (the reference implementation's limit, 100 MB).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Throws IoError naming the file when it cannot be opened or breaks a rule above.
  explicit SafetensorsFile(std::filesystem::path path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // In data order (sorted by data_offsets).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsMetadata& metadata() const { return metadata_; }
  uint64_t header_size() const { return header_size_; }
  uint64_t data_size() const { return data_size_; }

  // nullptr when there is no tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // Throws IoError naming the file, the tensor and a few of the names it does have.
  const SafetensorsTensor& tensor(std::string_view name) const;

  // Copies tensor `name` to dst after checking it has exactly this dtype and shape;
  // dst must hold product(shape) elements. Throws IoError saying what the file holds
  // and what was expected.
  void read_into(std::string_view name, void* dst, SafetensorsDType dtype,
                 std::span<const int64_t> shape) const;
  void read_into(std::string_view name, void* dst, SafetensorsDType dtype,
                 std::initializer_list<int64_t> shape) const {
    read_into(name, dst, dtype, std::span<const int64_t>(shape.begin(), shape.size()));
  }
  // The same with the dtype, shape and memory of a host view.
  void read_into(std::string_view name, const TensorView& dst) const;

 private:
  void unmap() noexcept;
  void parse_header(std::string_view header);
  // Sorts tensors_ by offset; throws unless they tile the data section exactly.
  void check_tiling();

  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  uint64_t header_size_ = 0;
  uint64_t data_size_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  SafetensorsMetadata metadata_;
};

}  // namespace etr
