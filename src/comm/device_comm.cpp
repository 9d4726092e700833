#include "comm/device_comm.hpp"

#include <cstring>
#include <vector>

#include "comm/nccl_communicator.hpp"
#include "comm/staged_mpi_communicator.hpp"

namespace zt {

void wait_host(CommRequest& r) {
  if (!r) return;
  if (auto* d = dynamic_cast<DeviceCommHandle*>(r.get())) {
    d->wait_host();
  } else {
    r->wait();
  }
  r.reset();
}

bool group_shares_a_gpu(MpiCommunicator& group) {
  int dev = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  ZT_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  constexpr int kUuid = sizeof(prop.uuid.bytes);
  std::vector<char> all(static_cast<size_t>(kUuid) * group.size());
  ZT_MPI_CHECK(MPI_Allgather(prop.uuid.bytes, kUuid, MPI_BYTE, all.data(), kUuid, MPI_BYTE, group.comm()));
  for (int a = 0; a < group.size(); ++a)
    for (int b = a + 1; b < group.size(); ++b)
      if (std::memcmp(&all[static_cast<size_t>(a) * kUuid], &all[static_cast<size_t>(b) * kUuid], kUuid) == 0)
        return true;
  return false;
}

std::unique_ptr<DeviceCommunicator> make_device_communicator(MpiCommunicator& group, const std::string& backend,
                                                             cudaStream_t compute, Device* staging_memory) {
  std::string b = backend;
  if (b == "auto") b = group_shares_a_gpu(group) ? "mpi" : "nccl";
  if (b == "nccl") return std::make_unique<NcclCommunicator>(group, compute);
  if (b == "mpi") return std::make_unique<StagedMpiCommunicator>(group, compute, staging_memory);
  ZT_USER_ERROR("communicator backend '", backend, "': expected \"nccl\", \"mpi\" or \"auto\"");
}

}  // namespace zt
