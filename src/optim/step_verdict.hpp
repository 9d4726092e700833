// The step's verdict computed where the gradients are ([Note: verdict on the
// device] in train/grad_finalize.hpp): on the GPU's compute stream, or at
// once on the CPU, on the arithmetic of optim/clip_math.hpp. `verdict` points
// to kVerdictLength doubles of the device's memory.
#pragma once

#include "runtime/device.hpp"

namespace zt {

// verdict[kVerdictSkip] = 0 when verdict[kVerdictSumSq] and *loss_sum (the
// step's summed loss on the device; null: none) are finite, else 1.
void step_verdict_flag(Device& dev, double* verdict, const double* loss_sum);
// verdict[kVerdictNorm] and [kVerdictGradScale] from the reduced sum of squares.
void step_verdict_finish(Device& dev, double* verdict, double max_norm, double loss_scale);

}  // namespace zt
