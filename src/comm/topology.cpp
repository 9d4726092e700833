#include "comm/topology.hpp"

#include <sstream>

namespace zt {
namespace {

std::vector<std::string> split_order(const std::string& order) {
  std::vector<std::string> axes;
  std::stringstream ss(order);
  std::string a;
  while (std::getline(ss, a, '-')) axes.push_back(a);
  return axes;
}

std::unique_ptr<MpiCommunicator> split(MPI_Comm parent, int color, int key, const std::string& name) {
  MPI_Comm c;
  ZT_MPI_CHECK(MPI_Comm_split(parent, color, key, &c));
  return std::make_unique<MpiCommunicator>(c, name);
}

}  // namespace

RankGrid::RankGrid(std::vector<std::string> axes, std::vector<int> sizes)
    : axes_(std::move(axes)), sizes_(std::move(sizes)) {
  ZT_CHECK(axes_.size() == sizes_.size(), "rank grid: ", axes_.size(), " axes but ", sizes_.size(), " sizes");
  for (int s : sizes_) ZT_CHECK(s >= 1, "rank grid: axis size ", s);
}

int RankGrid::world_size() const {
  int n = 1;
  for (int s : sizes_) n *= s;
  return n;
}

int RankGrid::axis(const std::string& name) const {
  for (size_t i = 0; i < axes_.size(); ++i)
    if (axes_[i] == name) return static_cast<int>(i);
  ZT_THROW("rank grid has no axis '", name, "'");
}

int RankGrid::rank_of(const std::vector<int>& coords) const {
  int rank = 0, stride = 1;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    rank += coords[i] * stride;
    stride *= sizes_[i];
  }
  return rank;
}

std::vector<int> RankGrid::coords_of(int rank) const {
  std::vector<int> c(sizes_.size());
  for (size_t i = 0; i < sizes_.size(); ++i) {
    c[i] = rank % sizes_[i];
    rank /= sizes_[i];
  }
  return c;
}

std::vector<int> RankGrid::group_along(int rank, const std::string& name) const {
  const int a = axis(name);
  std::vector<int> c = coords_of(rank);
  std::vector<int> ranks;
  for (int i = 0; i < sizes_[a]; ++i) {
    c[a] = i;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

static RankGrid make_grid(int pp_size, const std::string& order, int world_size) {
  if (pp_size < 1 || world_size % pp_size != 0) {
    ZT_USER_ERROR("pipeline.parallel_size (", pp_size, ") must divide the number of ranks (", world_size, ")");
  }
  std::vector<std::string> axes = split_order(order);
  if (axes.size() != 2 || !((axes[0] == "dp" && axes[1] == "pp") || (axes[0] == "pp" && axes[1] == "dp"))) {
    ZT_USER_ERROR("rank order '", order, "': expected \"dp-pp\" or \"pp-dp\"");
  }
  std::vector<int> sizes;
  for (const std::string& a : axes) sizes.push_back(a == "pp" ? pp_size : world_size / pp_size);
  return RankGrid(axes, sizes);
}

static int world_size_of_mpi() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

Topology::Topology(int pp_size, const std::string& order)
    : grid_(make_grid(pp_size, order, world_size_of_mpi())) {
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  pp_size_ = grid_.size("pp");
  dp_size_ = grid_.size("dp");
  const std::vector<int> c = grid_.coords_of(world_rank_);
  pp_rank_ = c[grid_.axis("pp")];
  dp_rank_ = c[grid_.axis("dp")];

  world_ = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
  // A group's color is the first rank of the group; keys order members by
  // their coordinate along the group's axis.
  dp_ = split(MPI_COMM_WORLD, grid_.group_along(world_rank_, "dp")[0], dp_rank_, "dp");
  pp_ = split(MPI_COMM_WORLD, grid_.group_along(world_rank_, "pp")[0], pp_rank_, "pp");

  // Collective over the world: every rank calls the split, the ranks outside
  // the first and last stage with MPI_UNDEFINED.
  const bool holds_tie = pp_size_ > 1 && (pp_rank_ == 0 || pp_rank_ == pp_size_ - 1);
  MPI_Comm tie;
  ZT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, holds_tie ? dp_rank_ : MPI_UNDEFINED, pp_rank_, &tie));
  if (tie != MPI_COMM_NULL) tie_ = std::make_unique<MpiCommunicator>(tie, "embedding_tie");

  MPI_Comm local;
  ZT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &local));
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  MPI_Comm_free(&local);
}

}  // namespace zt
