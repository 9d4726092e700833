// OwnedShard: the slice of one unit that this rank owns under ZeRO, with the
// optimizer state that goes with it. ZeRO makes the shards; the optimizer
// placement updates them (optimizer_placement.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "zero/flat_layout.hpp"

namespace zt {

struct OwnedShard;

// [Note: parameter offload to NVMe] (zero/param_swap.hpp): where an
// offloaded optimizer hands a shard's new working parameters when they live
// in a file rather than in memory it can write.
class ParamSink {
 public:
  // Bytes [byte_offset, byte_offset + bytes) of `sh`'s new working
  // parameters, from host memory `src` (free again when put returns). A
  // shard's pieces cover it once per update or write_state(master).
  virtual void put(const OwnedShard& sh, size_t byte_offset, const void* src, size_t bytes) = 0;

 protected:
  ~ParamSink() = default;
};

struct OwnedShard {
  int index = 0;  // position among the rank's owned shards
  int unit = 0;
  int64_t begin = 0;  // unit-local element range
  int64_t end = 0;
  // The gradient, summed over the data-parallel group: fp32, or bf16 when
  // it is on the host and offload.grad_dtype is "bf16" ([Note: bf16
  // gradients on the host] in zero/grad_landing.hpp).
  void* grad = nullptr;
  DType grad_dtype = DType::f32;
  // [Note: gradients on the host]: `grad` is host memory (it moves between
  // two buffers by step when the placement asks for two).
  bool grad_on_host = false;
  float* grad_f32() const {  // `grad`, which must be fp32
    ZT_CHECK(grad_dtype == DType::f32, "the gradient of shard ", index, " is ", dtype_name(grad_dtype),
             " where fp32 is needed");
    return static_cast<float*>(grad);
  }
  // fp32 master weights and Adam moments on the device, when the placement
  // keeps its states there (OptimizerPlacement::states_on_device); null
  // when they are offloaded.
  float* master = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  // Offloaded states: the device's working copy of this shard (param
  // dtype), which the placement refreshes from the master after each update
  // and after write_state(master). States on the device: the working copy
  // when it is a separate 16-bit buffer (stage 0 and stage 3 in bf16/f16),
  // which a placement that refreshes_working_copy() writes in its update
  // ([Note: working copy from the update] in zero_engine.hpp); else null.
  void* param = nullptr;
  DType param_dtype = DType::f32;
  bool param_on_host = false;  // offload_param: the parameters are off the device
  // offload_param "nvme": set for a shard whose working parameters are in the
  // swap file (`param` is null): the placement hands them to the sink.
  ParamSink* param_sink = nullptr;
  // offload.param_from_master ([Note: parameters from the master] in
  // zero_engine.hpp): no working copy is kept (`param` is null); each upload
  // is made from the placement's host master, so the placement writes none.
  bool param_from_master = false;
  // Whether the placement writes the working parameters straight into
  // `param` (host memory) rather than through a copy.
  bool param_in_place() const { return param_on_host && param_sink == nullptr && !param_from_master; }
  std::vector<DecaySpan> spans;  // unit-local, covering [begin, end)
  int64_t numel() const { return end - begin; }
};

}  // namespace zt
