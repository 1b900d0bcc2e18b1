// For multi-rank GoogleTest binaries: the World of this test process.
#pragma once

#include "runtime/world.h"

namespace etr::testing {

// Valid for the whole of RUN_ALL_TESTS (created by mpi_test_main.cc).
World& world();

}  // namespace etr::testing
