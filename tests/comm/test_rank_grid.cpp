#include <gtest/gtest.h>

#include <set>

#include "comm/topology.hpp"

using zt::RankGrid;

TEST(RankGrid, DefaultOrderKeepsDataParallelGroupsConsecutive) {
  RankGrid g({"dp", "pp"}, {4, 2});  // dp fastest
  EXPECT_EQ(g.world_size(), 8);
  EXPECT_EQ(g.group_along(5, "dp"), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(g.group_along(5, "pp"), (std::vector<int>{1, 5}));
}

TEST(RankGrid, PipelineFirstOrder) {
  RankGrid g({"pp", "dp"}, {2, 4});
  EXPECT_EQ(g.group_along(5, "pp"), (std::vector<int>{4, 5}));
  EXPECT_EQ(g.group_along(5, "dp"), (std::vector<int>{1, 3, 5, 7}));
}

TEST(RankGrid, CoordsRoundTripAndGroupsPartitionTheWorld) {
  RankGrid g({"dp", "pp"}, {3, 4});
  std::set<std::vector<int>> groups;
  for (int r = 0; r < g.world_size(); ++r) {
    EXPECT_EQ(g.rank_of(g.coords_of(r)), r);
    groups.insert(g.group_along(r, "dp"));
  }
  EXPECT_EQ(groups.size(), 4u);  // one dp group per stage
  std::set<int> seen;
  for (const auto& grp : groups)
    for (int r : grp) EXPECT_TRUE(seen.insert(r).second);
  EXPECT_EQ(static_cast<int>(seen.size()), 12);
}
