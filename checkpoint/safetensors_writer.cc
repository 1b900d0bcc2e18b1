// safetensors writer (format and rules in safetensors.h).
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint/durable_file.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_detail.h"
#include "runtime/error.h"

namespace etr {

using namespace safetensors_detail;

SafetensorsTensorRef SafetensorsTensorRef::of(std::string name, const TensorView& view) {
  if (!view.device().is_cpu()) {
    throw InvalidArgument("tensor " + in_quotes(name) + " is on " + view.device().str() +
                          "; copy it to host memory before writing it to a safetensors file");
  }
  std::vector<int64_t> shape;
  for (int i = 0; i < view.shape().ndim(); ++i) shape.push_back(view.shape()[i]);
  return {std::move(name), to_safetensors_dtype(view.dtype()), std::move(shape), view.data()};
}

void write_safetensors(const std::filesystem::path& path,
                       std::span<const SafetensorsTensorRef> tensors,
                       const SafetensorsMetadata& metadata) {
  const std::string where = " for safetensors file " + in_quotes(path.string());
  // Data order: element size, largest first, so every tensor is aligned to its element.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return safetensors_dtype_size(tensors[a].dtype) > safetensors_dtype_size(tensors[b].dtype);
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  std::vector<uint64_t> sizes(tensors.size());
  uint64_t offset = 0;
  for (size_t i : order) {
    const SafetensorsTensorRef& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__") {
      throw InvalidArgument("tensor name " + in_quotes(t.name) + where +
                            " is reserved or empty; give the tensor another name");
    }
    if (!names.insert(t.name).second) {
      throw InvalidArgument("tensor " + in_quotes(t.name) + " is given twice" + where +
                            "; names in a safetensors file are unique");
    }
    std::optional<uint64_t> bytes = checked_nbytes(t.shape, t.dtype);
    if (!bytes) {
      throw InvalidArgument("tensor " + in_quotes(t.name) + where + " has shape " +
                            shape_text(t.shape) + ", which has a negative extent or too many " +
                            "elements");
    }
    if (*bytes > 0 && t.data == nullptr) {
      throw InvalidArgument("tensor " + in_quotes(t.name) + where + " has " +
                            std::to_string(*bytes) + " bytes but no data pointer");
    }
    sizes[i] = *bytes;
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument("a tensor name or metadata entry" + where + " is not valid UTF-8 (" +
                          e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::array<unsigned char, 8> length;
  for (int b = 0; b < 8; ++b) length[b] = static_cast<unsigned char>(text.size() >> (8 * b));

  DurableFile file(path);
  file.write(length.data(), length.size());
  file.write(text.data(), text.size());
  for (size_t i : order)
    if (sizes[i] > 0) file.write(tensors[i].data, sizes[i]);
  file.commit();
}

}  // namespace etr
