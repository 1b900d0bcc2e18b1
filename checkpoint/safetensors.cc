// safetensors: the reader (format and rules in safetensors.h); element types are in
// safetensors_types.cc, the writer in safetensors_writer.cc.
#include "checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "checkpoint/safetensors_detail.h"

namespace etr {

namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; etr reads and writes it in place");

// The reference implementation's sub-byte types, which etr refuses by name.
constexpr std::string_view kSubByteDTypes[] = {"F4", "F6_E2M3", "F6_E3M2"};

}  // namespace

using namespace safetensors_detail;

// ---------------------------------------------------------------------------------------
// Reader

int64_t SafetensorsTensor::numel() const {
  return checked_numel(shape).value_or(0);
}

void SafetensorsTensor::check_view(bool dtype_fits, size_t alignment, const char* what) const {
  if (!dtype_fits) {
    throw IoError("tensor " + in_quotes(name) + " in " + in_quotes(file) + " is " +
                  std::string(safetensors_dtype_name(dtype)) + ", which is not stored as " + what +
                  "; view it with a matching type or convert it");
  }
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignment != 0) {
    throw IoError("tensor " + in_quotes(name) + " in " + in_quotes(file) +
                  " starts at data offset " + std::to_string(begin) + ", not aligned to its " +
                  std::to_string(alignment) +
                  "-byte elements; copy it with read_into instead of viewing it");
  }
}

SafetensorsFile::SafetensorsFile(std::filesystem::path path) : path_(std::move(path)) {
  const std::string file = in_quotes(path_.string());
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw IoError("cannot open safetensors file " + file + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw IoError("cannot stat safetensors file " + file + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError("safetensors file " + file + " is not a regular file");
  }
  map_size_ = static_cast<size_t>(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    throw IoError("safetensors file " + file + " is " + std::to_string(map_size_) +
                  " bytes long, too short for the 8-byte header length; it is truncated or " +
                  "not a safetensors file");
  }
  void* map = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) {
    throw IoError("cannot map safetensors file " + file + ": " + std::strerror(err));
  }
  map_ = map;
  try {
    const auto* base = static_cast<const unsigned char*>(map_);
    for (int b = 0; b < 8; ++b) header_size_ |= static_cast<uint64_t>(base[b]) << (8 * b);
    if (header_size_ > kMaxHeaderBytes) {
      throw IoError("safetensors file " + file + " declares a header of " +
                    std::to_string(header_size_) + " bytes, more than the limit of " +
                    std::to_string(kMaxHeaderBytes) + "; it is corrupt or not a safetensors file");
    }
    if (header_size_ > map_size_ - 8) {
      throw IoError("safetensors file " + file + " declares a header of " +
                    std::to_string(header_size_) + " bytes but has only " +
                    std::to_string(map_size_ - 8) + " bytes after the length; it is truncated " +
                    "or not a safetensors file");
    }
    data_size_ = map_size_ - 8 - header_size_;
    parse_header({reinterpret_cast<const char*>(base + 8), header_size_});
  } catch (...) {
    unmap();
    throw;
  }
}

namespace {

// Parses JSON and rejects a key repeated within one object, which nlohmann::json would
// silently resolve to the last value. Throws IoError.
nlohmann::json parse_json_without_duplicates(std::string_view text, const std::string& file) {
  std::vector<std::set<std::string>> open_objects;
  std::string entry;  // the top-level key being parsed
  std::string duplicate;
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      open_objects.pop_back();
    } else if (event == E::key && duplicate.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (open_objects.size() == 1) entry = key;
      if (!open_objects.back().insert(key).second) {
        duplicate = open_objects.size() == 1
                        ? "tensor " + in_quotes(key) + " appears twice"
                        : "entry " + in_quotes(entry) + " has the key " + in_quotes(key) + " twice";
      }
    }
    return true;
  };
  // nlohmann::json stops at a NUL as if the input ended there; JSON allows none outside
  // strings and none unescaped inside them, and the reference implementation rejects it.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw IoError("the header of safetensors file " + file + " has a NUL byte at offset " +
                  std::to_string(8 + nul) + ", which JSON does not allow (headers are padded " +
                  "with spaces); the file is corrupt or not a safetensors file");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::exception& e) {  // parse_error; out_of_range for 1e999
    throw IoError("the header of safetensors file " + file + " is not valid JSON (" + e.what() +
                  "); the file is corrupt or not a safetensors file");
  }
  if (!duplicate.empty()) {
    throw IoError("in the header of safetensors file " + file + ", " + duplicate +
                  "; names must be unique");
  }
  return header;
}

// A JSON value that must be a non-negative integer: nlohmann parses those as unsigned.
std::optional<uint64_t> as_count(const nlohmann::json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  return v.get<uint64_t>();
}

// What parse_entry needs to know about the file.
struct DataSection {
  std::string path;       // for SafetensorsTensor::file
  std::string file;       // the path quoted, for messages
  const std::byte* data;  // start of the data section in the mapping
  uint64_t size;
};

SafetensorsDType parse_dtype(const nlohmann::json& dtype, const std::string& tensor) {
  const std::string* text = dtype.is_string() ? &dtype.get_ref<const std::string&>() : nullptr;
  if (text != nullptr) {
    if (std::optional<SafetensorsDType> t = parse_safetensors_dtype(*text)) return *t;
  }
  bool sub_byte = text != nullptr && std::find(std::begin(kSubByteDTypes), std::end(kSubByteDTypes),
                                               *text) != std::end(kSubByteDTypes);
  throw IoError(
      tensor + " has dtype " + dtype.dump() +
      (sub_byte ? ", a sub-byte type that etr does not support" : ", which etr does not know") +
      "; etr reads " + safetensors_dtype_list());
}

std::vector<int64_t> parse_shape(const nlohmann::json& shape, const std::string& tensor) {
  if (!shape.is_array()) throw IoError(tensor + " has a shape that is not a JSON array");
  std::vector<int64_t> out;
  for (const nlohmann::json& d : shape) {
    std::optional<uint64_t> extent = as_count(d);
    if (!extent || *extent > static_cast<uint64_t>(INT64_MAX)) {
      throw IoError(tensor + " has shape " + shape.dump() + "; extents are non-negative integers");
    }
    out.push_back(static_cast<int64_t>(*extent));
  }
  return out;
}

// One tensor's header entry, checked on its own: dtype known, shape well formed, offsets
// inside the data section and exactly as long as shape x dtype size.
SafetensorsTensor parse_entry(const std::string& name, const nlohmann::json& entry,
                              const DataSection& section) {
  const std::string tensor = "tensor " + in_quotes(name) + " in safetensors file " + section.file;
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    throw IoError(tensor + " is not an object with dtype, shape and data_offsets");
  }
  SafetensorsTensor t;
  t.name = name;
  t.file = section.path;
  t.dtype = parse_dtype(entry["dtype"], tensor);
  t.shape = parse_shape(entry["shape"], tensor);
  const nlohmann::json& offsets = entry["data_offsets"];
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_count(offsets[0]);
    end = as_count(offsets[1]);
  }
  if (!begin || !end || *begin > *end) {
    throw IoError(tensor + " has data_offsets " + offsets.dump() +
                  "; they must be [begin, end] with 0 <= begin <= end");
  }
  if (*end > section.size) {
    throw IoError(tensor + " has data_offsets " + offsets.dump() + " beyond the data section" +
                  " of " + std::to_string(section.size) + " bytes; the file is truncated or " +
                  "corrupt");
  }
  std::optional<uint64_t> bytes = checked_nbytes(t.shape, t.dtype);
  if (!bytes || *bytes != *end - *begin) {
    throw IoError(tensor + " is " + std::string(safetensors_dtype_name(t.dtype)) + " " +
                  shape_text(t.shape) + ", which needs " +
                  (bytes ? std::to_string(*bytes) : std::string("at least 2^63")) +
                  " bytes, but its data_offsets " + offsets.dump() + " span " +
                  std::to_string(*end - *begin) + " bytes");
  }
  t.begin = *begin;
  t.end = *end;
  t.bytes = {section.data + *begin, *end - *begin};
  return t;
}

SafetensorsMetadata parse_metadata(const nlohmann::json& entry, const std::string& file) {
  if (!entry.is_object()) {
    throw IoError("__metadata__ in safetensors file " + file + " is not a JSON object");
  }
  SafetensorsMetadata metadata;
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      throw IoError("__metadata__ entry " + in_quotes(key) + " in safetensors file " + file +
                    " is not a string; metadata maps strings to strings");
    }
    metadata[key] = value.get<std::string>();
  }
  return metadata;
}

}  // namespace

void SafetensorsFile::parse_header(std::string_view text) {
  const std::string file = in_quotes(path_.string());
  nlohmann::json header = parse_json_without_duplicates(text, file);
  if (!header.is_object()) {
    throw IoError("the header of safetensors file " + file + " is JSON but not an object; " +
                  "the file is corrupt or not a safetensors file");
  }
  const DataSection section{path_.string(), file,
                            static_cast<const std::byte*>(map_) + 8 + header_size_, data_size_};
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(entry, file);
    } else {
      tensors_.push_back(parse_entry(name, entry, section));
    }
  }
  check_tiling();
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

void SafetensorsFile::check_tiling() {
  // Sorted by offset, the entries must tile the data section exactly; as `covered` only
  // grows past a tensor that passed, the one before tensors_[i] is the one it overlaps.
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  const std::string file = in_quotes(path_.string());
  auto range = [](const SafetensorsTensor& t) {
    return "(data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "])";
  };
  uint64_t covered = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const SafetensorsTensor& t = tensors_[i];
    if (t.begin < covered) {
      throw IoError("tensor " + in_quotes(t.name) + " in safetensors file " + file + " " +
                    range(t) + " overlaps tensor " + in_quotes(tensors_[i - 1].name) + " " +
                    range(tensors_[i - 1]) + "; the file is corrupt");
    }
    if (t.begin > covered) {
      throw IoError("safetensors file " + file + " has a hole of " +
                    std::to_string(t.begin - covered) + " bytes at data offset " +
                    std::to_string(covered) + ", before tensor " + in_quotes(t.name) +
                    "; the format has no unused bytes, so the file is corrupt");
    }
    covered = t.end;
  }
  if (covered != data_size_) {
    throw IoError("safetensors file " + file + " has " + std::to_string(data_size_ - covered) +
                  " bytes after its last tensor" +
                  (tensors_.empty() ? std::string() : " " + in_quotes(tensors_.back().name)) +
                  " that no tensor covers; the file is corrupt or its header is incomplete");
  }
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      header_size_(other.header_size_),
      data_size_(other.data_size_),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    header_size_ = other.header_size_;
    data_size_ = other.data_size_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(std::exchange(map_, nullptr), map_size_);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(std::string_view name) const {
  if (const SafetensorsTensor* t = find(name)) return *t;
  std::string some;
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < tensors_.size() && i < kShown; ++i)
    some += (i ? ", " : "") + in_quotes(tensors_[i].name);
  if (tensors_.size() > kShown) some += ", ...";
  throw IoError("safetensors file " + in_quotes(path_.string()) + " has no tensor " +
                in_quotes(name) + "; it has " + std::to_string(tensors_.size()) + " tensors" +
                (some.empty() ? "" : " (" + some + ")"));
}

void SafetensorsFile::read_into(std::string_view name, void* dst, SafetensorsDType dtype,
                                std::span<const int64_t> shape) const {
  const SafetensorsTensor& t = tensor(name);
  if (t.dtype != dtype || !std::equal(t.shape.begin(), t.shape.end(), shape.begin(), shape.end())) {
    throw IoError(
        "tensor " + in_quotes(name) + " in safetensors file " + in_quotes(path_.string()) + " is " +
        std::string(safetensors_dtype_name(t.dtype)) + " " + shape_text(t.shape) + ", but " +
        std::string(safetensors_dtype_name(dtype)) + " " + shape_text(shape) +
        " was expected; the file was saved from a " + "different model configuration or dtype");
  }
  if (!t.bytes.empty()) std::memcpy(dst, t.bytes.data(), t.bytes.size());
}

void SafetensorsFile::read_into(std::string_view name, const TensorView& dst) const {
  if (!dst.device().is_cpu()) {
    throw InvalidArgument("cannot read tensor " + in_quotes(name) + " into memory on " +
                          dst.device().str() + "; read it into host memory and copy it");
  }
  std::vector<int64_t> shape;
  for (int i = 0; i < dst.shape().ndim(); ++i) shape.push_back(dst.shape()[i]);
  read_into(name, dst.data(), to_safetensors_dtype(dst.dtype()), shape);
}

}  // namespace etr
