// MPI_CHECK(MPI_Isend(...)) throws CommError:
//   "MPI_Isend(...) failed: MPI_ERR_TRUNCATE: message truncated at collectives/x.cc:88"
// The communicators etr creates use MPI_ERRORS_RETURN so that errors reach this check.
#pragma once

#include <mpi.h>

#include <string>

namespace etr::detail {

[[noreturn]] void mpi_failed(const char* call, int code, const char* file, int line);

// "MPI_ERR_TRUNCATE: message truncated"
std::string mpi_error_string(int code);

}  // namespace etr::detail

#define MPI_CHECK(call)                                                        \
  do {                                                                         \
    int etr_mpi_rc_ = (call);                                                  \
    if (__builtin_expect(etr_mpi_rc_ != MPI_SUCCESS, 0))                       \
      ::etr::detail::mpi_failed(#call, etr_mpi_rc_, __FILE__, __LINE__);       \
  } while (0)
