// Whether a command line asks for help (-h or --help anywhere), so that a program prints
// its help without starting MPI first: a login node may not be able to start it, and a
// singleton's start (its orted) costs half a second for a help text.
#pragma once

#include <string_view>

namespace etr {

inline bool asks_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

}  // namespace etr
