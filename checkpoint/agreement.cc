#include "checkpoint/agreement.h"

#include <cstdint>

#include "runtime/mpi_check.h"

namespace etr {

std::string first_error(const Group& group, const std::string& local) {
  int mine = local.empty() ? group.size() : group.rank();
  int first = group.size();
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, group.comm()));
  if (first == group.size()) return "";
  uint64_t length = local.size();
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_UINT64_T, first, group.comm()));
  std::string text = group.rank() == first ? local : std::string(length, '\0');
  MPI_CHECK(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, first, group.comm()));
  return text;
}

bool all_true(const Group& group, bool flag) {
  int mine = flag ? 1 : 0, all = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, group.comm()));
  return all == 1;
}


}  // namespace etr
