// How programs print an error: one line "PROGRAM: error: MESSAGE", with the message's
// non-printable bytes escaped, so that a mutated config or a binary file named in a
// message cannot put control bytes (a raw 0x7f, an escape sequence) on the user's
// terminal.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace etr {

// `text` with every control byte (below 0x20, and 0x7f) but newline and tab written as
// \xNN; bytes from 0x80 (UTF-8) and everything printable as they are.
std::string printable(std::string_view text);

// "PROGRAM: error: MESSAGE\n" on stderr, the message through printable(); `kind` replaces
// "error" (e.g. "internal error").
void print_error(std::string_view program, std::string_view message, std::string_view kind = "error");

}  // namespace etr
