// The Llama operations on raw device pointers: RMSNorm, rotary embeddings and
// SwiGLU. Arithmetic in fp32 as the other CUDA kernels; storage f32, bf16 or
// f16; every gradient fp32. (Grouped-query attention is in attention.cuh.)
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"
#include "modules/rope.hpp"

namespace zt::cuda {

// out (N, C) = x * rstd * w, rstd (N) = 1 / sqrt(mean(x^2) + eps). One warp
// per row. w's dtype is x's or f32. x_copy (xt), when not null, receives x in
// the same pass (the residual stream).
void rmsnorm_fwd(void* out, float* rstd, const void* x, DType xt, const void* w, DType wt, void* x_copy, int64_t N,
                 int64_t C, float eps, cudaStream_t stream);
size_t rmsnorm_bwd_workspace_bytes(int64_t N, int64_t C);
// dx (N, C) = (or += when accumulate_dx) rstd (g - xhat mean(g xhat)), g =
// dout w; with dres (not null) dx = dres + that. dw (C) += column sums of
// dout xhat (deterministic, no atomics). dx may alias dout (f32) or dres.
// dout (dtype dt) is f32 or x's dtype, widened as it is loaded ([Note:
// norms' dout in 16 bits] in modules/kernels.hpp). dx16, when not null (x's
// dtype, 16-bit), also receives each dx element rounded to nearest even
// ([Note: the norm writes the products' operand]).
void rmsnorm_bwd(float* dx, void* dx16, bool accumulate_dx, const float* dres, float* dw, const void* dout, DType dt,
                 const void* x, DType xt, const void* w, DType wt, const float* rstd, int64_t N, int64_t C,
                 void* workspace, cudaStream_t stream);

// x (B, T, width) and y (B, T, width_y; null for none), of dtype t, rotated
// in place (rotate-half, position t - doc_start[b, t] within each sequence, t
// when doc_start is null); inverse: the transpose, for gradients. The angles
// t f_i are formed and their cos/sin taken in double, as on the CPU, once per
// (row, i) for every head of x and y. head_dim <= 512.
void rope(void* x, int64_t width, void* y, int64_t width_y, DType t, int64_t B, int64_t T, const RopeConfig& rope,
          bool inverse, const int32_t* doc_start, cudaStream_t stream);

// out = silu(gate) * up, all (n) in storage dtype t.
void swiglu_fwd(void* out, const void* gate, const void* up, DType t, int64_t n, cudaStream_t stream);
// dgate, dup from dout (fp32): fp32 (either may alias dout), or with
// grads_in_storage in the storage dtype t, rounded once.
void swiglu_bwd(void* dgate, void* dup, bool grads_in_storage, const float* dout, const void* gate, const void* up,
                DType t, int64_t n, cudaStream_t stream);

}  // namespace zt::cuda
