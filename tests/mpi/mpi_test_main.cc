// main() of the multi-rank GoogleTest binaries that ctest runs under etr-mpirun.
//
// Rank 0 prints GoogleTest's usual output; other ranks print only their failures,
// prefixed with the rank. Every rank exits non-zero when any rank saw a failure, so
// mpirun's status (and ctest's verdict) never depends on which rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <memory>

#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr::testing {
namespace {

World* g_world = nullptr;  // test harness only: tests reach the World through world()

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

World& world() { return *g_world; }

}  // namespace etr::testing

int main(int argc, char** argv) {
  std::unique_ptr<etr::World> world;
  try {
    world = std::make_unique<etr::World>(&argc, &argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  etr::testing::g_world = world.get();
  ::testing::InitGoogleTest(&argc, argv);
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new etr::testing::RankFailurePrinter(world->rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = failed;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, world->group().comm());
  etr::testing::g_world = nullptr;
  world.reset();
  return any_failed;
}
