#include "comm/comm_bundle.hpp"

namespace zt {

CommBundle::CommBundle(Topology& topo) : topo_(topo) {
  axes_[static_cast<int>(Axis::data)] = CommAxis{&topo.dp_mpi(), &topo.dp_mpi()};
  axes_[static_cast<int>(Axis::pipeline)] = CommAxis{&topo.pp_mpi(), &topo.pp_mpi()};
  if (topo.embedding_tie() != nullptr)
    axes_[static_cast<int>(Axis::tie)] = CommAxis{topo.embedding_tie(), topo.embedding_tie()};
}

void CommBundle::set_tensors(Axis a, std::unique_ptr<Communicator> c) {
  CommAxis& ax = axes_[static_cast<int>(a)];
  ZT_CHECK(ax.present(), "set_tensors on an axis this rank is not part of");
  ZT_CHECK(c != nullptr && c->size() == ax.size() && c->rank() == ax.rank(), "device communicator of ",
           c ? c->size() : 0, " ranks (rank ", c ? c->rank() : -1, ") for an axis of ", ax.size(), " (rank ",
           ax.rank(), ")");
  ax.tensors = c.get();
  owned_.push_back(std::move(c));
}

}  // namespace zt
