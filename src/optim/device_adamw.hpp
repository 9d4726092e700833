// DeviceAdamW: the optimizer placement that updates each owned shard where
// ZeRO keeps it, on the run's device: the fused CUDA AdamW on the GPU's
// compute stream, or the vectorised CPU AdamW on the CPU. Both follow
// [Note: AdamW formula] (adamw_math.hpp) and give the same fp32 bits.
#pragma once

#include <memory>

#include "optim/adamw.hpp"
#include "runtime/device.hpp"
#include "zero/optimizer_placement.hpp"

namespace zt {

// The AdamW placement for `dev` (CPU or CUDA); `hp.lr` is replaced by each
// step's learning rate.
std::unique_ptr<OptimizerPlacement> make_device_adamw(Device& dev, const AdamWParams& hp);

}  // namespace zt
