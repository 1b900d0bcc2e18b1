// cuBLAS and cuBLASLt opened at their first call (cublas_loader.cc): etr_runtime defines
// the functions etr calls and forwards each to the library's, so that a program that never
// calls one (every CPU run) never loads them.
#pragma once

#include <span>
#include <string>

namespace etr::cublas_loader {

// Opens both libraries (once); "" when both opened, else why the first one did not.
std::string open_error();
// The names of the functions forwarded, and whether the library has `name`.
std::span<const char* const> forwarded();
bool resolves(const char* name);

}  // namespace etr::cublas_loader
