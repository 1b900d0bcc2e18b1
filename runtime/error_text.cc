#include "runtime/error_text.h"

namespace etr {

std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out;
}

void print_error(std::string_view program, std::string_view message, std::string_view kind) {
  const std::string line = std::string(program) + ": " + std::string(kind) + ": " + printable(message) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace etr
