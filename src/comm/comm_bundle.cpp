#include "comm/comm_bundle.hpp"

namespace zt {

CommBundle::CommBundle(Topology& topo) : topo_(topo) {
  data_ = CommAxis{&topo.dp_mpi(), &topo.dp_mpi()};
  pipeline_ = CommAxis{&topo.pp_mpi(), &topo.pp_mpi()};
  if (topo.embedding_tie() != nullptr) tie_ = CommAxis{topo.embedding_tie(), topo.embedding_tie()};
}

const CommAxis& CommBundle::axis(Axis a) const {
  switch (a) {
    case Axis::data: return data_;
    case Axis::pipeline: return pipeline_;
    case Axis::tie: return tie_;
  }
  ZT_THROW("unknown communicator axis");
}

CommAxis& CommBundle::mutable_axis(Axis a) { return const_cast<CommAxis&>(axis(a)); }

void CommBundle::set_tensors(Axis a, std::unique_ptr<Communicator> c) {
  CommAxis& ax = mutable_axis(a);
  ZT_CHECK(ax.present(), "set_tensors on an axis this rank is not part of");
  ZT_CHECK(c != nullptr && c->size() == ax.size() && c->rank() == ax.rank(), "device communicator of ",
           c ? c->size() : 0, " ranks (rank ", c ? c->rank() : -1, ") for an axis of ", ax.size(), " (rank ",
           ax.rank(), ")");
  ax.tensors = c.get();
  owned_.push_back(std::move(c));
}

}  // namespace zt
