#include "runtime/world.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>

#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/control_ops.h"

namespace etr {

namespace {

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

}  // namespace

World::World(int* argc, char*** argv) {
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Open MPI's blocking calls (communicator creation, the control collectives) poll
    // without pause while they wait, unless mpirun saw the node oversubscribed. A waiting
    // rank then takes a core from the ranks and threads with work: on the chaos soak's
    // hosts (3 of 0.6 CPU on 2 cores) a 3-rank session took 0.78 s to build instead of
    // 0.48 s, budget-and-device 130 ms instead of 9. With mpi_yield_when_idle its poll
    // yields the core when nothing progressed (a syscall of ~0.3 us on an idle core; no
    // change to the steps measured). The user's setting (environment, mpirun --mca) wins.
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (owns_mpi_) MPI_Finalize();
    owns_mpi_ = false;
    throw CommError(std::string("the MPI library provides only ") + thread_level_name(provided) +
                    " but etr's progress engines need MPI_THREAD_MULTIPLE; use an MPI built "
                    "with thread support (Debian's Open MPI has it)");
  }
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  world_ = std::make_unique<Group>(Group(MPI_COMM_WORLD, "world", false).dup("world"));
  MPI_Comm local;
  MPI_CHECK(MPI_Comm_split_type(world_->comm(), MPI_COMM_TYPE_SHARED, world_->rank(),
                                MPI_INFO_NULL, &local));
  MPI_CHECK(MPI_Comm_set_errhandler(local, MPI_ERRORS_RETURN));
  local_ = std::make_unique<Group>(local, "local");
  char host[HOST_NAME_MAX + 1] = {0};
  gethostname(host, HOST_NAME_MAX);
  hostname_ = host;
  log_ = std::make_unique<Logger>("etr " + std::to_string(rank()) + "/" +
                                  std::to_string(size()) + " " + hostname_);
}

World::~World() {
  local_.reset();
  world_.reset();
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
}

void World::barrier() const { control::barrier(world_->comm(), "a barrier of the world (World::barrier)"); }

void World::abort(const std::string& message, int code) const {
  log_->error(message);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest.
}

}  // namespace etr
