// The classifier fused with softmax cross-entropy on the GPU: semantics of
// Kernels::classifier_fwd / classifier_bwd (modules/kernels.hpp) and of the
// CPU reference (modules/cpu_kernels_classifier.cpp, [Note: chunked
// classifier]). Classes are processed in slices whose logits fit in
// `chunk_bytes` of workspace; the (N, V) logits never exist at once.
//
// Both directions walk the vocabulary in slices of Vc classes over all N
// rows ([Note: classifier backward by class slices] in classifier.cu), so
// every product has N rows and each class's dw row is written once. Forward,
// per slice: logits (N, Vc) f32 = x . w_slice^T by cuBLASLt (bf16 or f16
// inputs with fp32 accumulation and output; f32 inputs in plain fp32, never
// TF32), stored class-major ([Note: transposed logits]); per-row max and sum
// of exponentials per slab of 512 classes; one merge into the log-sum-exp at
// the end. Backward, per slice: the logits again, dlogits = (softmax -
// onehot) * dloss (in the storage dtype, since the two following products take
// both inputs in one type; in place for f32), dx (+)= dlogits . w_slice and
// dw_slice += dlogits^T . x (fp32 output).

// The cuBLASLt handle and its workspace (device memory, 32 MiB advised on
// Hopper; may be 0 bytes) belong to the caller, e.g. CudaKernels, and are
// used on `stream` only. The logits slice comes from `ws` and is returned
// before the call returns while kernels may still run: later users of the
// arena must run on the same stream.
//
// A target >= V (invalid; the CPU throws) makes that row's loss NaN and its
// gradients NaN, so the failure shows in the loss rather than silently.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "core/tensor.hpp"
#include "runtime/device.hpp"

namespace zt {

// The products' plans, kept across calls by whoever owns the handle
// (CudaKernels): each shape's descriptors are built and its algorithm chosen
// once ([Note: timed algorithm choice] in lt_tune.cuh). Without them every
// call builds its plans and takes the heuristic's first choice.
struct ClassifierPlans;
std::shared_ptr<ClassifierPlans> make_classifier_plans();

struct ClassifierBlas {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  ClassifierPlans* plans = nullptr;  // may be null
};

// Default bound on one slice's logits (f32) plus, in the backward with
// 16-bit storage, its dlogits. (When both directions still walked chunks of
// rows, measured on an H200 at bf16, N 16384, C 768, V 50257, forward +
// backward: 64 MiB 5.6 + 18.0 ms, 256 MiB 3.5 + 9.1 ms, 1 GiB 3.1 + 7.2 ms.)
constexpr size_t kClassifierChunkBytes = size_t{256} << 20;

// losses (N) f32, lse (N) f32 written; x (N, C) and w (V, C) in one storage
// dtype (f32, bf16, f16); targets (N) i32, negative = ignored (loss 0).
void classifier_fwd_cuda(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x,
                         const Tensor& w, const Tensor& targets, const ClassifierBlas& blas,
                         cudaStream_t stream, size_t chunk_bytes = kClassifierChunkBytes);

// dx (N, C) f32 written; dw (V, C) f32 accumulated (+=); dloss (N) f32 is the
// weight of each row's loss; lse (N) f32 from the forward.
void classifier_bwd_cuda(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss,
                         const Tensor& x, const Tensor& w, const Tensor& targets, const Tensor& lse,
                         const ClassifierBlas& blas, cudaStream_t stream,
                         size_t chunk_bytes = kClassifierChunkBytes);

// Training's one pass ([Note: classifier in one pass] in classifier.cu):
// losses (N) f32 written, dx (N, C) f32 written, dw (V, C) f32 accumulated,
// with three products over chunks of rows (all V classes each) whose logits,
// in `logits` (f32 or x's dtype), fit in `chunk_bytes`; for V not a multiple
// of 8, another C * (V rounded up to 8) * 6 bytes of workspace (a padded copy
// of w and an f32 dw buffer). Same results as
// classifier_fwd_cuda then classifier_bwd_cuda up to rounding; with 16-bit
// logits the loss is that of the rounded logits.
void classifier_fwd_bwd_cuda(Arena& ws, const Tensor& losses, const Tensor& dx, const Tensor& dw,
                             const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& targets,
                             const ClassifierBlas& blas, cudaStream_t stream, size_t chunk_bytes, DType logits);

}  // namespace zt
