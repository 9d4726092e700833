// Element-wise launchers on raw device pointers (any stream): residual add,
// dtype casts, in-place scaling, bias broadcast and the inf/NaN check. Math
// in fp32; 16-byte vector accesses when every pointer allows them. Each
// launcher checks its launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"

namespace zt::cuda {

// out[i] = a[i] + b[i]; a and b share in_t; out may alias a or b.
void add(void* out, DType out_t, const void* a, const void* b, DType in_t, int64_t n, cudaStream_t stream);

// dst[i] = src[i] converted (f32, f64, bf16, f16; rounding to nearest even).
// Equal dtypes and distinct pointers: a device-to-device copy.
void cast(void* dst, DType dst_t, const void* src, DType src_t, int64_t n, cudaStream_t stream);

// x[i] *= alpha (in fp32, or f64 for f64 storage).
void scale(void* x, DType t, double alpha, int64_t n, cudaStream_t stream);

// out (rows, cols) = [out +] bias broadcast over rows, rounded once.
void bias_broadcast(void* out, DType out_t, const void* bias, DType bias_t, int64_t rows, int64_t cols,
                    bool accumulate, cudaStream_t stream);

// *flag = 1 when any of x[0, n) is inf or NaN; *flag is left alone otherwise.
void check_overflow(const void* x, DType t, int64_t n, int32_t* flag, cudaStream_t stream);

}  // namespace zt::cuda
