// CommBundle over the rank grid on 1 to 4 ranks: each axis spans the ranks
// of its group in the topology's order, the tie axis exists exactly on the
// first and last pipeline stage, and a device communicator attached to an
// axis must span the same ranks.
#include <gtest/gtest.h>

#include "comm/comm_bundle.hpp"

using namespace zt;

TEST(CommBundle, AxesFollowTheTopology) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  for (int pp = 1; pp <= world; ++pp) {
    if (world % pp != 0) continue;
    for (const char* order : {"dp-pp", "pp-dp"}) {
      SCOPED_TRACE(std::string("pp ") + std::to_string(pp) + " " + order);
      Topology topo(pp, order);
      CommBundle comms(topo);
      EXPECT_EQ(comms.data().size(), world / pp);
      EXPECT_EQ(comms.data().rank(), topo.dp_rank());
      EXPECT_EQ(comms.pipeline().size(), pp);
      EXPECT_EQ(comms.pipeline().rank(), topo.pp_rank());
      // On the CPU each axis moves tensors through its own MPI group.
      EXPECT_EQ(comms.data().tensors, comms.data().host);
      const bool end_stage = topo.pp_rank() == 0 || topo.pp_rank() == pp - 1;
      EXPECT_EQ(comms.tie().present(), pp > 1 && end_stage);
      if (comms.tie().present()) {
        EXPECT_EQ(comms.tie().size(), 2);
        EXPECT_EQ(comms.tie().rank(), topo.pp_rank() == 0 ? 0 : 1);
        // The two copies sum: every tie pair reduces its own values.
        double v = topo.pp_rank() + 1;
        all_reduce_sync(*comms.tie().tensors, Tensor(&v, DType::f64, Shape{1}));
        EXPECT_EQ(v, 1 + pp);
      }
      EXPECT_EQ(comms.world().size(), world);
    }
  }
}

TEST(CommBundle, AttachedCommunicatorMustSpanTheAxis) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  Topology topo(1);
  CommBundle comms(topo);
  // A communicator over this rank alone fits the data axis only on one rank.
  MPI_Comm self;
  MPI_Comm_dup(MPI_COMM_SELF, &self);
  auto mine = std::make_unique<MpiCommunicator>(self, "self");
  Communicator* raw = mine.get();
  if (world == 1) {
    comms.set_tensors(Axis::data, std::move(mine));
    EXPECT_EQ(comms.data().tensors, raw);
    EXPECT_NE(comms.data().host, nullptr);
  } else {
    EXPECT_THROW(comms.set_tensors(Axis::data, std::move(mine)), Error);
  }
}
