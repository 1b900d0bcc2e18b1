// allreduce_hello: the smallest etr program. Every rank contributes the vector
// (rank + 1) * [1, 2, ..., 7]; after an allreduce (sum) element i must equal
// (i + 1) * n (n + 1) / 2 on every rank. Rank 0 prints one line; the job exits non-zero
// when any rank saw a wrong sum or an etr error.
//
//   etr-mpirun -np 2 ./allreduce_hello
//   -> [etr 0/2 host] allreduce_hello: 2 ranks, sum of 7 f32 ok (3, 6, ..., 21)
#include <cstdint>
#include <cstdio>
#include <exception>

#include "collectives/host_communicator.h"
#include "runtime/allocator.h"
#include "runtime/host_allocator.h"
#include "runtime/world.h"

namespace {

constexpr int kCount = 7;

// Returns the number of ranks that saw a wrong sum (the same on every rank).
int run(etr::World& world) {
  const int n = world.size(), rank = world.rank();
  world.log().debug("rank ", rank, " of ", n, " on ", world.hostname());

  etr::HostAllocator host;  // budget: available memory, or ETR_HOST_MEMORY_BUDGET
  etr::Buffer buffer(host, kCount * sizeof(float));
  etr::TensorView v = buffer.view(etr::DType::kF32);
  float* x = v.data_as<float>();
  for (int i = 0; i < kCount; ++i) x[i] = static_cast<float>((rank + 1) * (i + 1));

  etr::HostCommunicator comm(world.group());
  comm.allreduce(v, etr::ReduceOp::kSum)->wait();

  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  int32_t wrong = 0;
  for (int i = 0; i < kCount; ++i) {
    if (x[i] != ranks_sum * static_cast<float>(i + 1)) {
      world.log().error("allreduce_hello: element ", i, " is ", x[i], ", expected ",
                        ranks_sum * static_cast<float>(i + 1));
      wrong = 1;
    }
  }
  // Every rank learns how many ranks failed, so the job's exit status says it.
  comm.allreduce(etr::TensorView::flat(&wrong, 1, etr::DType::kI32), etr::ReduceOp::kSum)->wait();
  if (rank == 0 && wrong == 0) {
    world.log().info("allreduce_hello: ", n, " ranks, sum of ", kCount, " f32 ok (", x[0], ", ",
                     x[1], ", ..., ", x[kCount - 1], ")");
  }
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    etr::World world(&argc, &argv);
    return run(world) == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_hello: error: %s\n", e.what());
    return 1;
  }
}
