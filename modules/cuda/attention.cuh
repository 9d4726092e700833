// Causal multi-head and grouped-query self-attention on the GPU, flash-style:
// the (T, T) score matrix never exists in device memory. Semantics are those
// of Kernels::attention_* and gqa_attention_* (modules/kernels.hpp), document
// masking included, and of the CPU reference (modules/cpu_kernels_attention.cpp).
// With document masking, key tiles that no query of a tile can see are
// skipped, so packed documents cost what their own lengths cost.
//
// Paths (chosen from the storage dtype of qkv):
//   bf16, f16  cuDNN's fused attention where the build has cuDNN and there is
//              no document masking ([Note: two attention paths] in
//              attention_cudnn.cuh; ZTRAIN_ATTENTION=flash turns it off);
//              else tensor cores (mma.sync m16n8k16, fp32 accumulation),
//              tiles of 64 queries x 64 keys per block of 4 warps;
//   f32        SIMT fp32 (exact fp32 products, for parity with the CPU).
// f64 storage is CPU-only. Head size hs = C / n_head may be 1..128; it is
// zero-padded to 16, 32, 64 or 128 inside the kernels.
//
// All work is enqueued on `stream`; nothing synchronises the host.
#pragma once

#include <cuda_runtime.h>

#include "core/tensor.hpp"
#include "runtime/device.hpp"

namespace zt {

// out (B, T, C) storage = softmax(q k^T / sqrt(hs), causal) v per head;
// lse (B, n_head, T) f32 = each query's log-sum-exp of the scaled scores.
// qkv (B, T, 3C) storage holds [q | k | v]. out and lse are fully written.
// doc_start: (B, T) i32 in device memory, or undefined (no document masking).
// The cuDNN path takes its workspace from `ws`, as the backward below does.
void attention_fwd_cuda(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head, const Tensor& doc_start,
                        Arena& ws, cudaStream_t stream);

// dqkv (B, T, 3C) f32 is fully written (not accumulated) from dout (B, T, C)
// f32, or already in a 16-bit storage dtype ([Note: attention's dout in 16
// bits] in modules/kernels.hpp; the flash kernels then take its f32
// widening), recomputing the probabilities from qkv and lse (FlashAttention-2).
// out (B, T, C) storage is the forward's output. Workspace taken from `ws`
// (and returned before this call does): delta (B, n_head, T) f32 and, for
// 16-bit storage, dout rounded to the storage dtype (B, T, C). The arena's
// memory is handed back while the kernels may still run, so later users of
// the arena must run on the same stream (or after it).
//
// Deterministic: dq is computed by its own kernel (no atomics), so the same
// inputs give the same bits on every run.
void attention_bwd_cuda(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, const Tensor& doc_start, Arena& ws, cudaStream_t stream);

// attention_bwd_cuda without document masking where cuDNN runs the call
// ([Note: two attention paths]): dqkv16 (B, T, 3C), in qkv's 16-bit dtype,
// receives cuDNN's gradients as it writes them, which attention_bwd_cuda
// would widen into f32 (so widening dqkv16 gives its bits). dout is f32, or
// already in qkv's dtype ([Note: attention's dout in 16 bits] in
// modules/kernels.hpp: the rounding attention_bwd_cuda makes, done before).
// Returns false, having done nothing, where the flash kernels would run
// instead.
bool attention_bwd_cuda_16bit(const Tensor& dqkv16, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, int n_head, Arena& ws, cudaStream_t stream);

// Grouped-query attention on separate q (B, T, n_head * hs) and k, v (B, T,
// n_kv_head * hs): query head h reads key/value head h / (n_head / n_kv_head).
// out, lse as above. The backward writes dq, dk, dv (f32, shapes of q, k, v);
// a key/value head's gradient sums its group's query heads in registers
// (one block walks them all), so it is deterministic too.
void gqa_attention_fwd_cuda(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            int n_head, int n_kv_head, const Tensor& doc_start, Arena& ws, cudaStream_t stream);
void gqa_attention_bwd_cuda(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, int n_head,
                            int n_kv_head, const Tensor& doc_start, Arena& ws, cudaStream_t stream);

}  // namespace zt
