// runtime/world.h: the World starts MPI so that Open MPI's blocking calls yield the core
// while they wait (mpi_yield_when_idle), unless the user set that parameter. Read back
// through MPI's tool interface (MPI_T), as Open MPI itself resolved it, not from the
// environment the World wrote. ctest runs it twice: as etr starts it (expects 1), and
// with `mpirun --mca mpi_yield_when_idle 0` and ETR_TEST_EXPECT_YIELD=0 (the user's wins).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>

#include "mpi/mpi_test_main.h"

namespace etr::testing {
namespace {

// The value of Open MPI's control variable `name` (an int or a bool), read through MPI_T;
// -1, with the failure recorded, when it cannot be read.
int control_variable(const char* name) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) {
    ADD_FAILURE() << "MPI_T_init_thread failed";
    return -1;
  }
  int value = -1;
  int index = -1, count = 0;
  MPI_T_cvar_handle handle;
  char cvar_name[256], desc[1024];
  int name_len = sizeof cvar_name, desc_len = sizeof desc, verbosity = 0, bind = 0, scope = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_T_enum enumtype;
  if (MPI_T_cvar_get_index(name, &index) != MPI_SUCCESS) {
    ADD_FAILURE() << name << " is not a control variable of this MPI";
  } else if (MPI_T_cvar_get_info(index, cvar_name, &name_len, &verbosity, &type, &enumtype, desc,
                                 &desc_len, &bind, &scope) != MPI_SUCCESS ||
             MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) {
    ADD_FAILURE() << "cannot read the control variable " << name;
  } else {
    EXPECT_EQ(count, 1);
    if (type == MPI_C_BOOL) {  // Open MPI's boolean parameters: one byte
      bool b = false;
      EXPECT_EQ(MPI_T_cvar_read(handle, &b), MPI_SUCCESS);
      value = b ? 1 : 0;
    } else if (type == MPI_INT) {
      EXPECT_EQ(MPI_T_cvar_read(handle, &value), MPI_SUCCESS);
    } else {
      ADD_FAILURE() << name << " is neither a bool nor an int";
    }
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return value;
}

TEST(World, OpenMpiYieldsTheCoreWhileItWaitsUnlessTheUserSaidOtherwise) {
  const char* expect = std::getenv("ETR_TEST_EXPECT_YIELD");
  const int expected = expect ? std::atoi(expect) : 1;
  EXPECT_EQ(control_variable("mpi_yield_when_idle"), expected)
      << "on rank " << world().rank() << " of " << world().size();
}

}  // namespace
}  // namespace etr::testing
