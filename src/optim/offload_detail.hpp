// Inside the offloaded placements only (offload_adamw.cpp, nvme_offload_adamw.cpp):
// the pieces the host and NVMe paths share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/clock.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "optim/adamw.hpp"
#include "runtime/device.hpp"
#include "runtime/transfer.hpp"
#include "zero/owned_shard.hpp"

namespace zt::offload_detail {

// Working parameters into a shard's copy: on the device through `copies`
// (after the compute mark `after_compute`, if any), in host memory when
// the parameters are offloaded too (offload_param), or to the swap file's
// sink (offload_param "nvme", [Note: parameter offload to NVMe]).
inline TransferTicket put_param(TransferQueue& copies, const OwnedShard& sh, size_t byte_offset, const void* src,
                                size_t bytes, TransferTicket after_compute = {}) {
  if (sh.param_sink != nullptr) {
    sh.param_sink->put(sh, byte_offset, src, bytes);
    return TransferTicket{};
  }
  char* dst = static_cast<char*>(sh.param) + byte_offset;
  if (!sh.param_on_host) return copies.to_device(dst, src, bytes, after_compute);
  host_memcpy(dst, src, bytes);
  return TransferTicket{};
}

// fp32 values in the working dtype, rounded to nearest even as the device's
// cast kernel does.
inline void to_working(void* dst, DType t, const float* src, int64_t n) {
  switch (t) {
    case DType::f32: host_memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::bf16:
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
      for (int64_t i = 0; i < n; ++i) static_cast<bf16*>(dst)[i] = from_f32<bf16>(src[i]);
      return;
    case DType::f16:
#pragma omp parallel for schedule(static) if (n > (int64_t{1} << 20))
      for (int64_t i = 0; i < n; ++i) static_cast<f16*>(dst)[i] = from_f32<f16>(src[i]);
      return;
    default: ZT_THROW("offloaded optimizer: working parameters in ", dtype_name(t), " are not supported");
  }
}

// The decay spans of shard elements [off, off + n), relative to off.
inline std::vector<DecayRange> tile_ranges(const OwnedShard& sh, int64_t off, int64_t n) {
  std::vector<DecayRange> r;
  for (const DecaySpan& span : sh.spans) {
    const int64_t b = std::max(span.begin - sh.begin, off), e = std::min(span.end - sh.begin, off + n);
    if (b < e) r.push_back({b - off, e - off, span.decay});
  }
  return r;
}

// The host AdamW of n elements: master, m and v in place, and the new
// working parameters (in sh.param_dtype) into `out` in the same pass (fp32
// working parameters: a copy of the master, none when `out` is the master).
// A null `out` writes no working parameters. `g` holds n gradients of
// `gt` (fp32, or bf16: [Note: bf16 gradients on the host]).
template <typename Grad>
void host_adamw_from(const OwnedShard& sh, float* master, const Grad* g, float* m, float* v, int64_t n,
                     const std::vector<DecayRange>& ranges, const AdamWParams& hp, int64_t step, float grad_scale,
                     void* out) {
  if (out == nullptr) {
    adamw_update_ranges(master, g, m, v, n, ranges, hp, step, grad_scale);
    return;
  }
  switch (sh.param_dtype) {
    case DType::bf16:
      adamw_update_ranges(master, g, m, v, n, ranges, hp, step, grad_scale, static_cast<bf16*>(out));
      break;
    case DType::f16:
      adamw_update_ranges(master, g, m, v, n, ranges, hp, step, grad_scale, static_cast<f16*>(out));
      break;
    default:
      adamw_update_ranges(master, g, m, v, n, ranges, hp, step, grad_scale);
      if (out != master) std::memcpy(out, master, static_cast<size_t>(n) * sizeof(float));
  }
}

inline void host_adamw(const OwnedShard& sh, float* master, const void* g, DType gt, float* m, float* v, int64_t n,
                       const std::vector<DecayRange>& ranges, const AdamWParams& hp, int64_t step, float grad_scale,
                       void* out) {
  if (gt == DType::bf16) {
    host_adamw_from(sh, master, static_cast<const bf16*>(g), m, v, n, ranges, hp, step, grad_scale, out);
    return;
  }
  ZT_CHECK(gt == DType::f32, "the host AdamW reads fp32 or bf16 gradients, not ", dtype_name(gt));
  host_adamw_from(sh, master, static_cast<const float*>(g), m, v, n, ranges, hp, step, grad_scale, out);
}

// `p` advanced by n elements of `t`.
inline const void* advance(const void* p, DType t, int64_t n) {
  return static_cast<const char*>(p) + static_cast<size_t>(n) * dtype_size(t);
}

}  // namespace zt::offload_detail
