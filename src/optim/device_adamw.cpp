#include "optim/device_adamw.hpp"

#if ZT_HAVE_CUDA
#include "optim/cuda/adamw.cuh"
#include "runtime/cuda/cuda_device.hpp"
#endif

namespace zt {
namespace {

class DeviceAdamW final : public OptimizerPlacement {
 public:
  DeviceAdamW(Device& dev, const AdamWParams& hp) : dev_(dev), hp_(hp) {}
  const char* name() const override { return "device"; }

  void update(const OwnedShard& sh, const OptimizerStepScalars& s) override {
    AdamWParams hp = hp_;
    hp.lr = s.lr;
    for (const DecaySpan& span : sh.spans) {
      const int64_t off = span.begin - sh.begin, n = span.end - span.begin;
      float* p = sh.master + off;
      const float* g = sh.grad + off;
      float* m = sh.exp_avg + off;
      float* v = sh.exp_avg_sq + off;
#if ZT_HAVE_CUDA
      if (dev_.kind() == DeviceKind::cuda) {
        adamw_update_cuda(p, g, m, v, n, hp, s.step, s.grad_scale, span.decay, nullptr, DType::f32,
                          static_cast<CudaDevice&>(dev_).stream());
        continue;
      }
#endif
      ZT_CHECK(dev_.kind() == DeviceKind::cpu, "AdamW on ", dev_.name(), ": this build has no CUDA AdamW");
      adamw_update(p, g, m, v, n, hp, s.step, s.grad_scale, span.decay);
    }
  }

 private:
  Device& dev_;
  AdamWParams hp_;
};

}  // namespace

std::unique_ptr<OptimizerPlacement> make_device_adamw(Device& dev, const AdamWParams& hp) {
  return std::make_unique<DeviceAdamW>(dev, hp);
}

}  // namespace zt
