// The GPU path of the communicator bundle (CUDA build): device communicators
// for each axis of a CommBundle.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "comm/comm_bundle.hpp"

namespace zt {

// Attaches a device communicator (make_device_communicator: "nccl", "mpi" or
// "auto") on the compute stream to the data axis, to the pipeline axis when
// P > 1, and to the tie axis where this rank has one. Collective over each
// axis; call select_cuda_device first.
void attach_device_communicators(CommBundle& comms, const std::string& backend, cudaStream_t compute);

}  // namespace zt
