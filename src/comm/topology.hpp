// Topology: the rank grid (pp x dp, room left for tp) and its communicators.
//
// [Note: rank order] Axes are listed from fastest- to slowest-varying, as in
// Megatron's rank generator: with the default order "dp-pp", a rank is
// dp_index + dp_size * pp_index, so each pipeline stage's data-parallel group
// is a block of consecutive ranks (ZeRO's heavy all-gathers stay inside a node
// when ranks are packed by node) and the light pipeline p2p crosses nodes.
// "pp-dp" puts a pipeline on consecutive ranks instead.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"

namespace zt {

class RankGrid {
 public:
  // axes: names fastest first; sizes in the same order.
  RankGrid(std::vector<std::string> axes, std::vector<int> sizes);
  int world_size() const;
  int rank_of(const std::vector<int>& coords) const;  // coords in axes order
  std::vector<int> coords_of(int rank) const;
  int axis(const std::string& name) const;  // index of an axis, throws if absent
  int size(const std::string& name) const { return sizes_[axis(name)]; }
  // Ranks that share every coordinate with `rank` except along `name`, in
  // order of that axis: the group `rank` belongs to for that axis.
  std::vector<int> group_along(int rank, const std::string& name) const;

 private:
  std::vector<std::string> axes_;
  std::vector<int> sizes_;
};

class Topology {
 public:
  // Splits MPI_COMM_WORLD into the groups of a grid of pp x dp ranks, where
  // dp = world_size / pp, with the given axis order ("dp-pp" or "pp-dp").
  Topology(int pp_size, const std::string& order = "dp-pp");

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int pp_size() const { return pp_size_; }
  int dp_size() const { return dp_size_; }
  int pp_rank() const { return pp_rank_; }  // pipeline stage
  int dp_rank() const { return dp_rank_; }
  // Node-local rank and size, from MPI_COMM_TYPE_SHARED: picks the GPU.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const RankGrid& grid() const { return grid_; }

  // The two ranks that hold the tied embedding when the pipeline has more
  // than one stage: (first stage, dp_rank) and (last stage, dp_rank), ordered
  // by stage. Null on the other ranks and when pp_size is 1.
  MpiCommunicator* embedding_tie() { return tie_.get(); }
  Communicator& world() { return *world_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  // The same groups as MPI communicators, to build device communicators from
  // (make_device_communicator in comm/device_comm.hpp).
  MpiCommunicator& world_mpi() { return *world_; }
  MpiCommunicator& dp_mpi() { return *dp_; }
  MpiCommunicator& pp_mpi() { return *pp_; }

 private:
  RankGrid grid_;
  int world_rank_ = 0, world_size_ = 1, pp_size_ = 1, dp_size_ = 1, pp_rank_ = 0, dp_rank_ = 0;
  int local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<MpiCommunicator> world_, dp_, pp_, tie_;
};

}  // namespace zt
