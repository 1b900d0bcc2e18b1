// Byte counts as people write them: "512", "64KiB", "1.5GiB", "2GB" (SI) and back.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace etr {

// Throws ConfigError with the offending text when it is not a byte count.
size_t parse_bytes(std::string_view text);

// "1.5 GiB", "64 KiB", "17 B".
std::string format_bytes(double bytes);

}  // namespace etr
