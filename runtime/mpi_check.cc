#include "runtime/mpi_check.h"

#include <string>

#include "runtime/error.h"

namespace etr::detail {

std::string mpi_error_string(int code) {
  char klass_text[MPI_MAX_ERROR_STRING];
  char text[MPI_MAX_ERROR_STRING];
  int klass = code, len = 0;
  MPI_Error_class(code, &klass);
  text[0] = klass_text[0] = '\0';
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) text[0] = '\0';
  // Error classes have no symbolic name in the API; give the common ones.
  const char* name = "MPI error";
  switch (klass) {
    case MPI_ERR_BUFFER: name = "MPI_ERR_BUFFER"; break;
    case MPI_ERR_COUNT: name = "MPI_ERR_COUNT"; break;
    case MPI_ERR_TYPE: name = "MPI_ERR_TYPE"; break;
    case MPI_ERR_TAG: name = "MPI_ERR_TAG"; break;
    case MPI_ERR_COMM: name = "MPI_ERR_COMM"; break;
    case MPI_ERR_RANK: name = "MPI_ERR_RANK"; break;
    case MPI_ERR_REQUEST: name = "MPI_ERR_REQUEST"; break;
    case MPI_ERR_ROOT: name = "MPI_ERR_ROOT"; break;
    case MPI_ERR_OP: name = "MPI_ERR_OP"; break;
    case MPI_ERR_ARG: name = "MPI_ERR_ARG"; break;
    case MPI_ERR_TRUNCATE: name = "MPI_ERR_TRUNCATE"; break;
    case MPI_ERR_OTHER: name = "MPI_ERR_OTHER"; break;
    case MPI_ERR_INTERN: name = "MPI_ERR_INTERN"; break;
    case MPI_ERR_PENDING: name = "MPI_ERR_PENDING"; break;
    case MPI_ERR_IN_STATUS: name = "MPI_ERR_IN_STATUS"; break;
    case MPI_ERR_NO_MEM: name = "MPI_ERR_NO_MEM"; break;
    default: break;
  }
  return std::string(name) + ": " + text;
}

void mpi_failed(const char* call, int code, const char* file, int line) {
  throw CommError(std::string(call) + " failed: " + mpi_error_string(code) + " at " + file + ":" +
                  std::to_string(line));
}

}  // namespace etr::detail
