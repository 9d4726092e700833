#include "optim/device_adamw.hpp"

#include <vector>

#include "optim/clip_math.hpp"

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
  bool states_on_device() const override { return true; }
  bool refreshes_working_copy() const override { return true; }

  void update(const OwnedShard& sh, const OptimizerStepScalars& s) override {
    AdamWParams hp = hp_;
    hp.lr = s.lr;
    // The whole shard at once (one parallel region on the CPU, one launch per
    // 32 spans on the GPU), its spans in shard-local offsets; the shard's
    // 16-bit working copy, where ZeRO keeps one (sh.param), written in the
    // same pass ([Note: working copy from the update] in zero_engine.hpp).
    ranges_.clear();
    for (const DecaySpan& span : sh.spans) ranges_.push_back({span.begin - sh.begin, span.end - sh.begin, span.decay});
#if ZT_HAVE_CUDA
    if (dev_.kind() == DeviceKind::cuda) {
      adamw_update_ranges_cuda(sh.master, sh.grad_f32(), sh.exp_avg, sh.exp_avg_sq, sh.numel(), ranges_, hp, s.step,
                               s.grad_scale, sh.param, sh.param_dtype, s.verdict,
                               static_cast<CudaDevice&>(dev_).stream());
      return;
    }
#endif
    ZT_CHECK(dev_.kind() == DeviceKind::cpu, "AdamW on ", dev_.name(), ": this build has no CUDA AdamW");
    // The CPU's device memory is the host's, and its work is done in order:
    // the verdict is read here as the GPU's kernels read it.
    float grad_scale = s.grad_scale;
    if (s.verdict != nullptr) {
      if (s.verdict[kVerdictSkip] != 0.0) return;
      grad_scale = static_cast<float>(s.verdict[kVerdictGradScale]);
    }
    if (sh.param == nullptr) {
      adamw_update_ranges(sh.master, sh.grad_f32(), sh.exp_avg, sh.exp_avg_sq, sh.numel(), ranges_, hp, s.step, grad_scale);
    } else if (sh.param_dtype == DType::bf16) {
      adamw_update_ranges(sh.master, sh.grad_f32(), sh.exp_avg, sh.exp_avg_sq, sh.numel(), ranges_, hp, s.step, grad_scale,
                          static_cast<bf16*>(sh.param));
    } else {
      ZT_CHECK(sh.param_dtype == DType::f16, "unit ", sh.unit, ": a ", dtype_name(sh.param_dtype),
               " working copy beside the master (bf16 or f16 expected)");
      adamw_update_ranges(sh.master, sh.grad_f32(), sh.exp_avg, sh.exp_avg_sq, sh.numel(), ranges_, hp, s.step, grad_scale,
                          static_cast<f16*>(sh.param));
    }
  }

  void read_state(const OwnedShard& sh, OptimizerState which, float* host_dst) override {
    dev_.copy_to_host(host_dst, state(sh, which), static_cast<size_t>(sh.numel()) * sizeof(float));
  }
  void write_state(const OwnedShard& sh, OptimizerState which, const float* host_src) override {
    dev_.copy_from_host(state(sh, which), host_src, static_cast<size_t>(sh.numel()) * sizeof(float));
  }

 private:
  static float* state(const OwnedShard& sh, OptimizerState which) {
    float* p = which == OptimizerState::master ? sh.master : which == OptimizerState::exp_avg ? sh.exp_avg : sh.exp_avg_sq;
    ZT_CHECK(p != nullptr, "unit ", sh.unit, ": no device ", optimizer_state_name(which), " (offloaded states?)");
    return p;
  }
  Device& dev_;
  AdamWParams hp_;
  std::vector<DecayRange> ranges_;  // reused from shard to shard
};

}  // namespace

std::unique_ptr<OptimizerPlacement> make_device_adamw(Device& dev, const AdamWParams& hp) {
  return std::make_unique<DeviceAdamW>(dev, hp);
}

}  // namespace zt
