// Internal to modules/cuda/attention*: the argument blocks of one attention
// call, host code (attention_cudnn.cpp includes them without the device
// helpers of attention_detail.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace zt::attn {

// Shapes and layout of one call. Query head h reads key/value head
// h / (NH / NKV) (NKV = NH: multi-head; NKV = 1: multi-query). Row (b, t) of
// a matrix starts at base + (b * T + t) * ld and head h's columns at + h * hs:
// q and dq have row stride ld_q / ld_dq, k, v, dk, dv ld_kv / ld_dkv, and out,
// dout and dout_s are dense (B, T, NH * hs). The packed (B, T, 3C) qkv of
// the GPT block is q = qkv, k = qkv + C, v = qkv + 2C with ld = 3C.
struct Dims {
  int B, T, NH, NKV, hs;
  int64_t ld_q, ld_kv;  // in elements of the storage dtype
  int64_t C;            // NH * hs: row stride of out, dout, dout_s
  __host__ __device__ int group() const { return NH / NKV; }
};

// [Note: document masking] in modules/kernels.hpp: doc_start (B, T) i32 or
// null. Query t of row b sees keys doc_start[b, t] <= j <= t; documents are
// contiguous, so doc_start is non-decreasing along t, and the first query of
// a tile has the smallest doc_start of the tile.
struct FwdArgs {
  Dims d;
  const void* q;               // storage
  const void* k;
  const void* v;
  void* out;                   // (B, T, C) storage
  float* lse;                  // (B, NH, T)
  const int32_t* doc_start;    // (B, T) or null
};

struct BwdArgs {
  Dims d;
  const void* q;               // storage
  const void* k;
  const void* v;
  const void* dout_s;          // (B, T, C) dout in the storage dtype
  const float* lse;            // (B, NH, T)
  const float* delta;          // (B, NH, T) rowsum(dout * out) per head
  float* dq;                   // fully written, row stride ld_dq
  float* dk;                   // fully written, row stride ld_dkv
  float* dv;
  int64_t ld_dq, ld_dkv;
  const int32_t* doc_start;    // (B, T) or null
  // cuDNN only (attn::cudnn_bwd): when dq16 is set, dq, dk, dv are written in
  // the storage dtype at dq16, dk16 and dv16, with row stride ld_g16 for all
  // three (the packed (B, T, 3C) layout) or, ld_g16 = 0, dense ((B, T, C),
  // (B, T, NKV * hs) twice; [Note: attention's gradients in 16 bits] in
  // modules/kernels.hpp), and dq, dk, dv above are unused.
  void* dq16;
  void* dk16;
  void* dv16;
  int64_t ld_g16;
};

}  // namespace zt::attn
