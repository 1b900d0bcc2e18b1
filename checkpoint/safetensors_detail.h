// Helpers shared by the safetensors reader and writer (not part of the API).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "checkpoint/safetensors.h"

namespace etr::safetensors_detail {

// 'text', for messages.
std::string in_quotes(std::string_view s);
// Product of the extents, or nothing when it does not fit in int64_t.
std::optional<int64_t> checked_numel(std::span<const int64_t> shape);
// Bytes of a tensor of this shape and dtype, or nothing on overflow or a negative extent.
std::optional<uint64_t> checked_nbytes(std::span<const int64_t> shape, SafetensorsDType t);

}  // namespace etr::safetensors_detail
