// The memory tier's host RAM per rank (memory_tier_bytes, parallel/checkpoint_cadence.h)
// and the buddies behind it (buddy_ranks, checkpoint/buddy_link.h): the rank at the same
// local index (mod the next host's ranks) on the next host. Worked out by hand for uneven
// hosts, where one rank receives two ranks' copies, and for owners of uneven size.
#include <gtest/gtest.h>

#include <vector>

#include "checkpoint/buddy_link.h"
#include "parallel/checkpoint_cadence.h"
#include "unit/ragged_layout.h"

namespace etr {
namespace {

TEST(BuddyRanks, TheSameLocalIndexOnTheNextHost) {
  // Hosts 0, 1, 2 with ranks {0, 3}, {1, 4}, {2, 5}.
  EXPECT_EQ(buddy_ranks({0, 1, 2, 0, 1, 2}), (std::vector<int>{1, 2, 0, 4, 5, 3}));
  // Host 0 {0, 1}, host 1 {2}: both of host 0's ranks send to rank 2, which sends to 0.
  EXPECT_EQ(buddy_ranks({0, 0, 1}), (std::vector<int>{2, 2, 0}));
  // Host 0 {0}, host 1 {1, 2, 3}, host 2 {4}.
  EXPECT_EQ(buddy_ranks({0, 1, 1, 1, 2}), (std::vector<int>{1, 4, 4, 4, 0}));
  EXPECT_EQ(buddy_ranks({0, 0, 0}), (std::vector<int>{-1, -1, -1}));  // one host: none
  EXPECT_EQ(buddy_ranks({}), std::vector<int>{});
}

config::CheckpointConfig tier(int every, int keep) {
  config::CheckpointConfig c;
  c.set_memory_every(every);
  c.set_memory_keep(keep);
  return c;
}

TEST(MemoryTierBytes, OwnFileAndTheCopiesItReceivesForEachKeptSave) {
  const ParamLayout layout = testing::ragged_layout();
  const int64_t n = layout.numel();
  // Owners of uneven size: rank 0 a tenth, rank 1 a fifth, rank 2 the rest.
  const ShardOwners owners = {{{0, n / 10}}, {{n / 10, n * 3 / 10}}, {{n * 3 / 10, n}}};
  const ShardPlan plan(layout, 3, {"param", "adam.m", "adam.v"}, &owners);
  const size_t f0 = plan.file_bytes(0), f1 = plan.file_bytes(1), f2 = plan.file_bytes(2);
  ASSERT_LT(f0, f1);
  ASSERT_LT(f1, f2);
  // Hosts {0, 1} and {2}: 0 and 1 send to 2, 2 to 0; keep 1: two saves at the peak.
  EXPECT_EQ(memory_tier_bytes(tier(1, 1), plan, {0, 0, 1}),
            (std::vector<size_t>{2 * (f0 + f2), 2 * f1, 2 * (f2 + f0 + f1)}));
  // Three hosts: each receives its predecessor's; keep 2: three saves.
  EXPECT_EQ(memory_tier_bytes(tier(1, 2), plan, {0, 1, 2}),
            (std::vector<size_t>{3 * (f0 + f2), 3 * (f1 + f0), 3 * (f2 + f1)}));
  // One host: no copy elsewhere, only its own files.
  EXPECT_EQ(memory_tier_bytes(tier(4, 1), plan, {0, 0, 0}), (std::vector<size_t>{2 * f0, 2 * f1, 2 * f2}));
  // No tier: nothing.
  EXPECT_EQ(memory_tier_bytes(tier(0, 1), plan, {0, 1, 2}), (std::vector<size_t>{0, 0, 0}));
}

}  // namespace
}  // namespace etr
