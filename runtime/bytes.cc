#include "runtime/bytes.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/error.h"

namespace etr {

size_t parse_bytes(std::string_view text) {
  std::string s(text);
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string unit;
  for (char c : s.substr(pos))
    if (!std::isspace(static_cast<unsigned char>(c))) unit += static_cast<char>(std::tolower(c));
  double scale = -1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  if (pos == 0 || scale < 0 || !(value >= 0) || !std::isfinite(value)) {
    throw ConfigError("'" + s + "' is not a byte count; write e.g. 4096, 64KiB, 1.5GiB or 2GB");
  }
  // Rounded in double: below 2^64 every double converts to size_t exactly.
  double total = std::round(value * scale);
  if (total >= 18446744073709551616.0) {
    throw ConfigError("'" + s + "' is more bytes than 64 bits can count; write a smaller size");
  }
  return static_cast<size_t>(total);
}

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.4g %s", bytes, kUnits[u]);
  return buf;
}

}  // namespace etr
