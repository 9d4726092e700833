#include "optim/step_verdict.hpp"

#include "core/error.hpp"
#include "optim/clip_math.hpp"

#if ZT_HAVE_CUDA
#include "optim/cuda/step_verdict.cuh"
#include "runtime/cuda/cuda_device.hpp"
#endif

namespace zt {

void step_verdict_flag(Device& dev, double* verdict, const double* loss_sum) {
#if ZT_HAVE_CUDA
  if (dev.kind() == DeviceKind::cuda) {
    step_verdict_flag_cuda(verdict, loss_sum, static_cast<CudaDevice&>(dev).stream());
    return;
  }
#endif
  ZT_CHECK(dev.kind() == DeviceKind::cpu, "the step's verdict on ", dev.name(), ": not built for it");
  flag_step_verdict(verdict, loss_sum);
}

void step_verdict_finish(Device& dev, double* verdict, double max_norm, double loss_scale) {
#if ZT_HAVE_CUDA
  if (dev.kind() == DeviceKind::cuda) {
    step_verdict_finish_cuda(verdict, max_norm, loss_scale, static_cast<CudaDevice&>(dev).stream());
    return;
  }
#endif
  ZT_CHECK(dev.kind() == DeviceKind::cpu, "the step's verdict on ", dev.name(), ": not built for it");
  finish_step_verdict(verdict, max_norm, loss_scale);
}

}  // namespace zt
