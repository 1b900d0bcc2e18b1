// Tests of parallel/process_grid.h at np 1-4: for every pipeline size that divides the
// world, the coordinates, the dp and pp groups (their members gathered with
// MPI_Allgather and compared with the mapping r = dp_rank * pp + pp_rank), the pipeline
// neighbours (checked by sending along them), and the ConfigError for every impossible
// layout, raised alike on all ranks.
#include "parallel/process_grid.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "mpi/mpi_test_main.h"
#include "runtime/error.h"

namespace etr {
namespace {

using testing::world;

// The world ranks of the members of `g`, in g's rank order.
std::vector<int> members(const Group& g) {
  int me = world().rank();
  std::vector<int> out(static_cast<size_t>(g.size()));
  EXPECT_EQ(MPI_Allgather(&me, 1, MPI_INT, out.data(), 1, MPI_INT, g.comm()), MPI_SUCCESS);
  return out;
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

TEST(ProcessGrid, CoordinatesFollowTheDocumentedMapping) {
  const int n = world().size(), r = world().rank();
  for (int pp : divisors(n)) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    ProcessGrid grid(world().group(), pp);
    EXPECT_EQ(grid.size(), n);
    EXPECT_EQ(grid.rank(), r);
    EXPECT_EQ(grid.pp_size(), pp);
    EXPECT_EQ(grid.dp_size(), n / pp);
    EXPECT_EQ(grid.pp_rank(), r % pp);
    EXPECT_EQ(grid.dp_rank(), r / pp);
    EXPECT_EQ(grid.world_rank(grid.dp_rank(), grid.pp_rank()), r);
    EXPECT_EQ(grid.str(), "dp " + std::to_string(n / pp) + " x pp " + std::to_string(pp) +
                              ", this rank: replica " + std::to_string(r / pp) + ", stage " +
                              std::to_string(r % pp));
  }
}

// Every (replica, stage) cell is held by exactly one rank.
TEST(ProcessGrid, CellsCoverTheGridOnce) {
  const int n = world().size();
  for (int pp : divisors(n)) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    ProcessGrid grid(world().group(), pp);
    int mine[2] = {grid.dp_rank(), grid.pp_rank()};
    std::vector<int> all(2 * static_cast<size_t>(n));
    ASSERT_EQ(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, world().group().comm()),
              MPI_SUCCESS);
    std::vector<int> holders(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      int d = all[2 * i], s = all[2 * i + 1];
      ASSERT_TRUE(d >= 0 && d < n / pp && s >= 0 && s < pp) << d << "," << s;
      holders[static_cast<size_t>(d * pp + s)] += 1;
      EXPECT_EQ(grid.world_rank(d, s), i);
    }
    for (int h : holders) EXPECT_EQ(h, 1);
  }
}

TEST(ProcessGrid, GroupsHoldTheExpectedRanksInOrder) {
  const int n = world().size(), r = world().rank();
  for (int pp : divisors(n)) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    ProcessGrid grid(world().group(), pp);
    const int dp = n / pp;
    std::vector<int> want_dp, want_pp;
    for (int d = 0; d < dp; ++d) want_dp.push_back(d * pp + r % pp);    // same stage
    for (int s = 0; s < pp; ++s) want_pp.push_back((r / pp) * pp + s);  // same replica
    EXPECT_EQ(grid.dp_group().name(), "dp");
    EXPECT_EQ(grid.pp_group().name(), "pp");
    EXPECT_EQ(grid.dp_group().size(), dp);
    EXPECT_EQ(grid.dp_group().rank(), grid.dp_rank());
    EXPECT_EQ(grid.pp_group().size(), pp);
    EXPECT_EQ(grid.pp_group().rank(), grid.pp_rank());
    EXPECT_EQ(members(grid.dp_group()), want_dp);
    EXPECT_EQ(members(grid.pp_group()), want_pp);
    // A reduction over each group sums exactly its members.
    int me = r, sum = -1;
    ASSERT_EQ(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, grid.dp_group().comm()), MPI_SUCCESS);
    EXPECT_EQ(sum, std::accumulate(want_dp.begin(), want_dp.end(), 0));
  }
}

TEST(ProcessGrid, NeighboursAreTheAdjacentStagesOfTheSameReplica) {
  const int n = world().size(), r = world().rank();
  for (int pp : divisors(n)) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    ProcessGrid grid(world().group(), pp);
    EXPECT_EQ(grid.is_first_stage(), r % pp == 0);
    EXPECT_EQ(grid.is_last_stage(), r % pp == pp - 1);
    EXPECT_EQ(grid.prev_stage().has_value(), r % pp != 0);
    EXPECT_EQ(grid.next_stage().has_value(), r % pp != pp - 1);
    if (grid.prev_stage()) {
      EXPECT_EQ(*grid.prev_stage(), grid.pp_rank() - 1);
    }
    if (grid.next_stage()) {
      EXPECT_EQ(*grid.next_stage(), grid.pp_rank() + 1);
    }
    // Send the world rank forward along the pipeline, as activations travel.
    int to = grid.next_stage().value_or(MPI_PROC_NULL);
    int from = grid.prev_stage().value_or(MPI_PROC_NULL);
    int sent = r, got = -1;
    ASSERT_EQ(MPI_Sendrecv(&sent, 1, MPI_INT, to, 7, &got, 1, MPI_INT, from, 7,
                           grid.pp_group().comm(), MPI_STATUS_IGNORE),
              MPI_SUCCESS);
    EXPECT_EQ(got, grid.is_first_stage() ? -1 : r - 1);
  }
}

TEST(ProcessGrid, CoordinatesOutsideTheGridAreInvalid) {
  const int n = world().size();
  ProcessGrid grid(world().group(), n);  // one replica of n stages
  EXPECT_THROW(grid.world_rank(1, 0), InvalidArgument);
  EXPECT_THROW(grid.world_rank(0, n), InvalidArgument);
  EXPECT_THROW(grid.world_rank(-1, 0), InvalidArgument);
  EXPECT_THROW(grid.world_rank(0, -1), InvalidArgument);
}

// Every rank throws the same ConfigError before any communication, so nothing hangs and
// the world stays usable afterwards.
TEST(ProcessGrid, ImpossibleLayoutsThrowConfigErrorOnEveryRank) {
  const int n = world().size();
  std::vector<int> bad = {0, -1, -4};
  for (int pp = 1; pp <= n + 2; ++pp)
    if (n % pp != 0) bad.push_back(pp);
  for (int pp : bad) {
    SCOPED_TRACE("pp " + std::to_string(pp));
    try {
      ProcessGrid grid(world().group(), pp);
      ADD_FAILURE() << "no exception";
    } catch (const ConfigError& e) {
      std::string what = e.what();
      if (pp < 1) {
        EXPECT_NE(what.find("pipeline size is " + std::to_string(pp)), std::string::npos) << what;
        EXPECT_NE(what.find("at least 1"), std::string::npos) << what;
      } else {
        EXPECT_NE(what.find("a pipeline of " + std::to_string(pp) +
                            " stages does not divide "
                            "the world of " +
                            std::to_string(n) + " ranks"),
                  std::string::npos)
            << what;
      }
    }
    int one = 1, count = 0;
    ASSERT_EQ(MPI_Allreduce(&one, &count, 1, MPI_INT, MPI_SUM, world().group().comm()),
              MPI_SUCCESS);
    EXPECT_EQ(count, n);
  }
}

// The grid works on any group, not only the world: here each half of the world.
TEST(ProcessGrid, BuildsOnASubgroup) {
  const int n = world().size(), r = world().rank();
  std::optional<Group> half = world().group().split(r < (n + 1) / 2 ? 0 : 1, r, "half");
  ASSERT_TRUE(half.has_value());
  ProcessGrid grid(*half, 1);
  EXPECT_EQ(grid.size(), half->size());
  EXPECT_EQ(grid.dp_rank(), half->rank());
  EXPECT_EQ(grid.pp_group().size(), 1);
  std::vector<int> got = members(grid.dp_group());
  std::vector<int> want = members(*half);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace etr
