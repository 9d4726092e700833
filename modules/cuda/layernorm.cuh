// LayerNorm over the last dimension (eps = 1e-5) on raw device pointers.
// x and out share the storage dtype xt; w and b share wt, which is xt or f32;
// mean, rstd and every gradient are fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace zt::cuda {

// out (N, C) = (x - mean) * rstd * w + b; mean, rstd (N). One warp per row,
// two-pass variance (as the CPU reference). x_copy (xt), when not null,
// receives x in the same pass (the residual stream).
void layernorm_fwd(void* out, float* mean, float* rstd, const void* x, DType xt, const void* w, const void* b,
                   DType wt, void* x_copy, int64_t N, int64_t C, cudaStream_t stream);

// Bytes of workspace layernorm_bwd needs.
size_t layernorm_bwd_workspace_bytes(int64_t N, int64_t C);
// dx (N, C) = (or += when accumulate_dx) the input gradient; with dres
// (not null) dx = dres + the input gradient. dw, db (C) +=. dx may alias
// dout (f32) or dres. dw and db are summed deterministically (no atomics).
// [Note: norms' dout in 16 bits] (modules/kernels.hpp): dout (dtype dt) is f32 or x's dtype;
// a 16-bit dout is widened as it is loaded, so the results are those of
// its f32 widening, bit for bit.
void layernorm_bwd(float* dx, bool accumulate_dx, const float* dres, float* dw, float* db, const void* dout,
                   DType dt, const void* x, DType xt, const void* w, DType wt, const float* mean, const float* rstd,
                   int64_t N, int64_t C, void* workspace, cudaStream_t stream);
// Calls of layernorm_bwd that took the one pass ([Note: LayerNorm backward
// in one pass] in layernorm.cu) since the process started: tests check which
// path ran.
uint64_t layernorm_bwd_one_pass_calls();

}  // namespace zt::cuda
