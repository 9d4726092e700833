#include "comm/device_bundle.hpp"

#include "comm/device_comm.hpp"

namespace zt {

void attach_device_communicators(CommBundle& comms, const std::string& backend, cudaStream_t compute) {
  Topology& topo = comms.topology();
  comms.set_tensors(Axis::data, make_device_communicator(topo.dp_mpi(), backend, compute));
  if (topo.pp_size() > 1) comms.set_tensors(Axis::pipeline, make_device_communicator(topo.pp_mpi(), backend, compute));
  if (comms.tie().present())
    comms.set_tensors(Axis::tie, make_device_communicator(*comms.tie().host, backend, compute));
}

}  // namespace zt
