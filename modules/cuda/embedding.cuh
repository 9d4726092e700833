// Token + position embedding on raw device pointers; tokens (B, T) i32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace zt::cuda {

// out (B, T, C) = wte[tokens[b, t]] + wpe[t - doc_start[b, t]], rounded once
// to out_t; wte (V, C) and wpe (>= T, C) of dtype w_t. wpe null: no position
// table (out = wte[tokens]); doc_start null: positions t. A token outside [0, V) gives a row of
// NaN (the host cannot check tokens in GPU memory without a synchronisation;
// NaN makes the bad input visible in the loss instead of reading out of bounds).
void embedding_fwd(void* out, DType out_t, const int32_t* tokens, const void* wte, const void* wpe, DType w_t,
                   const int32_t* doc_start, int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream);

// Bytes of workspace embedding_bwd needs.
size_t embedding_bwd_workspace_bytes(int64_t B, int64_t T, int64_t V);
// dwte (V, C) +=, dwpe (>= T, C) += from dout (B, T, C), all fp32; tokens
// outside [0, V) are skipped; dwpe null: no position table; positions as in
// embedding_fwd. Deterministic, and bit-identical to the CPU reference: see
// [Note: embedding backward].
void embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, const int32_t* doc_start,
                   int64_t B, int64_t T, int64_t C, int64_t V, void* workspace, cudaStream_t stream);

}  // namespace zt::cuda
