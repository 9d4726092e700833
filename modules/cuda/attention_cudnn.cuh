// Causal attention through cuDNN's fused attention (the cudnn-frontend graph
// API: Graph::sdpa and Graph::sdpa_backward), for 16-bit storage without
// document masking. Internal to modules/cuda/attention*.cu, except for the
// queries at the end, which tests use.
//
// [Note: two attention paths] run_fwd / run_bwd (attention.cu) offer every
// bf16 / f16 call without doc_start to cudnn_fwd / cudnn_bwd first; these
// return false, and the flash kernels run instead, when
//   - ZTRAIN_ATTENTION=flash (the default is cudnn), or the build has no
//     cuDNN (the cudnn-frontend headers or libcudnn were not found; the
//     value cudnn is then refused by name),
//   - the shape is one cuDNN's kernels do not take: hs not a multiple of 8
//     or above 128, T = 1 (the backward rejects s_q = s_kv = 1), a pointer or
//     row stride not 16-byte aligned,
//   - cuDNN refuses to build a graph for the shape (remembered per shape and
//     logged once as a warning).
// The results mean the same as the flash kernels': out (B, T, NH * hs), lse
// (B, NH, T) the natural-log log-sum-exp of the scaled scores (cuDNN's
// "Stats"), and the backward's dq, dk, dv in f32 with their row strides,
// computed from dout rounded to the storage dtype. cuDNN writes its
// gradients in the storage dtype (into the workspace), which one more kernel
// widens into the f32 outputs: so the gradients carry one more rounding to
// bf16 / f16 than the flash kernels' (a relative u/2 per element). With
// BwdArgs::dq16 set (attention_bwd_cuda_16bit's packed buffer, or the
// grouped-query backward's 16-bit gradients), cuDNN writes them in 16 bits
// straight into the caller's buffers instead, and nothing is widened.
//
// The backward asks cuDNN for its deterministic algorithm: the same inputs
// give the same bits, as with the flash kernels. On Hopper that algorithm
// keeps dP in the workspace, B * NH * T * T * 2 bytes (T rounded up to 64):
// 0.4 GB at B 16, T 1024, 12 heads. The workspace comes from the Arena of
// the call, like the flash path's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.hpp"
#include "runtime/device.hpp"

namespace zt {
namespace attn {

// attention_detail.cuh (device code: kept out of this header, which host
// C++ such as the tests includes).
struct FwdArgs;
struct BwdArgs;

// Runs the forward of `a` (16-bit storage `t`, a.doc_start null) on cuDNN and
// returns true, or returns false having done nothing (see the Note).
bool cudnn_fwd(const FwdArgs& a, DType t, Arena& ws, cudaStream_t stream);

// The backward of `a` on cuDNN: a.dout_s and a.delta are not used (cuDNN
// rounds nothing itself: dout (B, T, NH * hs) in f32 is rounded here into the
// workspace, one already in `t` is taken as it is, and cuDNN computes its own
// rowsum(dO * O)). `out` is the forward's output (B, T, NH * hs) in storage
// `t`. Returns false having done nothing when the flash kernels must run.
bool cudnn_bwd(const BwdArgs& a, DType t, const void* out, const void* dout, DType dout_dtype, Arena& ws,
               cudaStream_t stream);

}  // namespace attn

// True when this build can run attention on cuDNN (headers and library found
// at configure time).
bool attention_cudnn_compiled();

// True when this process's calls go to cuDNN first: the build has it and
// ZTRAIN_ATTENTION does not say flash (read at every call).
bool attention_cudnn_selected();

// Calls (forward and backward) that ran on cuDNN in this process so far: a
// test's way to see which path a call took.
uint64_t attention_cudnn_calls();

}  // namespace zt
