// Internal to modules/cuda/attention*.cu: the per-path launch
// functions, and the device helpers the kernels share (element conversion,
// tile loads into shared memory, mma.sync / ldmatrix / cp.async wrappers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "modules/cuda/attention_args.hpp"
#include "modules/cuda/common.cuh"

namespace zt::attn {

// First key query t of row b may see (0 without document masking); rows
// past T use the last row's.
__device__ __forceinline__ int doc_first(const int32_t* doc_start, int b, int T, int t) {
  return doc_start == nullptr ? 0 : doc_start[static_cast<int64_t>(b) * T + min(t, T - 1)];
}
// One past the last query of row b that may see key `key` (T without
// document masking): the first t > key whose document starts after key.
__device__ __forceinline__ int doc_query_end(const int32_t* doc_start, int b, int T, int key) {
  if (doc_start == nullptr) return T;
  const int32_t* row = doc_start + static_cast<int64_t>(b) * T;
  int lo = key + 1, hi = T;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (row[mid] > key) hi = mid; else lo = mid + 1;
  }
  return lo;
}

// Per-path launchers (attention_simt.cu, attention_mma_fwd.cu,
// attention_mma_bwd.cu). dp: padded head size (16, 32, 64 or 128). vec:
// 16-byte loads are allowed (hs % 8 == 0 and 16-byte aligned qkv and dout_s).
void fwd_simt_f32(const FwdArgs& a, int dp, cudaStream_t s);
void bwd_simt_f32(const BwdArgs& a, int dp, cudaStream_t s);
void fwd_mma_bf16(const FwdArgs& a, int dp, bool vec, cudaStream_t s);
void fwd_mma_f16(const FwdArgs& a, int dp, bool vec, cudaStream_t s);
void bwd_mma_bf16(const BwdArgs& a, int dp, bool vec, cudaStream_t s);
void bwd_mma_f16(const BwdArgs& a, int dp, bool vec, cudaStream_t s);

using cuda::kLog2e;
constexpr float kLn2 = 0.6931471805599453f;

// ---- element conversion -----------------------------------------------------
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename S>
__device__ __forceinline__ S from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }

// ---- tile loads -------------------------------------------------------------
// A tile is rows [t0, t0 + R) and columns [0, DP) of a row-major matrix `src`
// (row stride ld elements, already offset to the head's first column), stored
// in shared memory with row stride SD. Rows >= T and columns >= hs are zero,
// so padded rows and columns contribute nothing to any dot product.
template <int R, int DP, int SD, int NT, typename Src, typename Dst>
__device__ __forceinline__ void load_tile_scalar(Dst* tile, const Src* src, int64_t ld, int t0, int T,
                                                 int hs) {
  for (int i = threadIdx.x; i < R * DP; i += NT) {
    const int r = i / DP, c = i % DP;
    float v = 0.0f;
    if (t0 + r < T && c < hs) v = to_f32(src[static_cast<int64_t>(t0 + r) * ld + c]);
    tile[r * SD + c] = from_f32<Dst>(v);
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global -> shared; src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// 16-bit tile with 16-byte copies (requires hs % 8 == 0 and aligned rows);
// falls back to element loads otherwise. Call cp_async_commit() after it.
template <int R, int DP, int SD, int NT, typename S>
__device__ __forceinline__ void load_tile(S* tile, const S* src, int64_t ld, int t0, int T, int hs,
                                          bool vec) {
  if (!vec) {
    load_tile_scalar<R, DP, SD, NT>(tile, src, ld, t0, T, hs);
    return;
  }
  constexpr int kChunks = DP / 8;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < R * kChunks; i += NT) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool ok = t0 + r < T && c < hs;
    const S* g = ok ? src + static_cast<int64_t>(t0 + r) * ld + c : src;
    cp_async_16(tile + r * SD + c, g, ok ? 16 : 0);
  }
}

// ---- tensor-core fragments ----------------------------------------------------
// [Note: mma fragments] mma.sync.m16n8k16 with g = lane / 4, q = lane % 4:
//   A (16x16, row):  a0 (g, 2q..2q+1)  a1 (g+8, 2q..)  a2 (g, 2q+8..)  a3 (g+8, 2q+8..)
//   B (16x8, col):   b0 (k 2q..2q+1, n g)  b1 (k 2q+8.., n g)
//   C (16x8, f32):   c0,c1 (g, 2q..2q+1)  c2,c3 (g+8, 2q..2q+1)
// So the C fragments of two adjacent n-tiles (16 columns) are, packed to 16
// bits, the A fragment of a 16-wide k-slice: probabilities go from one
// product into the next without touching shared memory.
// ldmatrix.x4 gives four 8x8 matrices, lanes 8i..8i+7 naming the rows of
// matrix i; with .trans each thread receives the transposed elements.
//   A fragment of rows r0.., cols k0.. (row-major tile):   ldsm_a
//   B fragments of n-tiles n0, n0+8 at k0 from a tile stored (n, k): ldsm_b
//   B fragments of n-tiles n0, n0+8 at k0 from a tile stored (k, n): ldsm_bt
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
// tile: row-major (rows, SD). Returns a0..a3 of rows r0..r0+15, cols k0..k0+15.
template <int SD, typename S>
__device__ __forceinline__ void ldsm_a(uint32_t a[4], const S* tile, int r0, int k0, int lane) {
  ldsm_x4(a, tile + (r0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * SD + k0 + 8 * (lane >> 4));
}
// tile stored (n, k) row-major: b[0..1] for n-tile n0, b[2..3] for n0+8.
template <int SD, typename S>
__device__ __forceinline__ void ldsm_b(uint32_t b[4], const S* tile, int n0, int k0, int lane) {
  ldsm_x4(b, tile + (n0 + (lane & 7) + 8 * (lane >> 4)) * SD + k0 + 8 * ((lane >> 3) & 1));
}
// tile stored (k, n) row-major: b[0..1] for n-tile n0, b[2..3] for n0+8.
template <int SD, typename S>
__device__ __forceinline__ void ldsm_bt(uint32_t b[4], const S* tile, int k0, int n0, int lane) {
  ldsm_x4_t(b, tile + (k0 + (lane & 7) + 8 * ((lane >> 3) & 1)) * SD + n0 + 8 * (lane >> 4));
}

// d += a * b, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t* b,
                                          __nv_bfloat16*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t* b, __half*) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <typename S>
__device__ __forceinline__ void mma(float d[4], const uint32_t a[4], const uint32_t* b) {
  mma_16816(d, a, b, static_cast<S*>(nullptr));
}

// Two floats -> one register of two 16-bit values (lo in the low half).
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __nv_bfloat16*) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack2(float lo, float hi, __half*) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}
// A fragment of a 16-wide k-slice from the C fragments of n-tiles c0, c1.
template <typename S>
__device__ __forceinline__ void c_to_a(uint32_t a[4], const float c0[4], const float c1[4]) {
  a[0] = pack2(c0[0], c0[1], static_cast<S*>(nullptr));
  a[1] = pack2(c0[2], c0[3], static_cast<S*>(nullptr));
  a[2] = pack2(c1[0], c1[1], static_cast<S*>(nullptr));
  a[3] = pack2(c1[2], c1[3], static_cast<S*>(nullptr));
}

}  // namespace zt::attn
