// CudaKernels: argument checks (the CPU reference's, plus "in GPU memory")
// and dispatch to the launchers of this folder.
#include "modules/cuda/classifier.cuh"
#include "modules/cuda/common.cuh"
#include "modules/cuda/cuda_kernels.hpp"
#include "modules/cuda/elementwise.cuh"
#include "modules/cuda/embedding.cuh"
#include "modules/cuda/gelu.cuh"
#include "modules/cuda/layernorm.cuh"
#include "modules/cuda/llama.cuh"
#include "modules/cuda/matmul.cuh"
#include "modules/cuda/reduce.cuh"

#include <algorithm>

#include <cstdlib>
#include <string>

namespace zt {

using cuda::check_dtype;
using cuda::check_on_device;
using cuda::cols;
using cuda::rows;

namespace {

// doc_start (B, T) i32 in device memory, or null when undefined
// ([Note: document masking] in modules/kernels.hpp).
const int32_t* doc_start_of(const Tensor& doc_start, int64_t B, int64_t T) {
  if (!doc_start.defined()) return nullptr;
  check_on_device(doc_start, "doc_start");
  check_dtype(doc_start, DType::i32, "doc_start");
  ZT_CHECK(doc_start.numel() == B * T, "doc_start must be (", B, ", ", T, "), got ", doc_start.shape.str());
  return static_cast<const int32_t*>(doc_start.data);
}

// [Note: residual stream] in modules/kernels.hpp. The norm kernels write
// x_copy in their pass when it has x's dtype and shape; otherwise the caller
// casts after (null).
void* fused_copy_target(const Tensor& x_copy, const Tensor& x, const char* what) {
  if (!x_copy.defined()) return nullptr;
  ZT_CHECK(x_copy.numel() == x.numel(), what, ": x_copy ", x_copy.shape.str(), " does not match x ", x.shape.str());
  check_on_device(x_copy, what);
  return x_copy.dtype == x.dtype ? x_copy.data : nullptr;
}

// dres (f32, x's size) for dx = dres + the norm's gradient, or null.
const float* residual_grad(const Tensor& dres, const Tensor& dx, const Tensor& dout, bool accumulate_dx,
                           const char* what) {
  if (!dres.defined()) return nullptr;
  ZT_CHECK(!accumulate_dx && dres.numel() == dx.numel() && dx.data != dout.data, what,
           ": dres needs accumulate_dx false, dx's size and dx apart from dout");
  check_on_device(dres, what);
  check_dtype(dres, DType::f32, "residual gradient");
  return static_cast<const float*>(dres.data);
}

}  // namespace

CudaKernels::CudaKernels(CudaDevice& dev, const CudaKernelsOptions& opts) : CudaKernels(dev, dev.stream(), opts) {}

CudaKernels::CudaKernels(CudaDevice& dev, cudaStream_t stream, const CudaKernelsOptions& opts)
    : dev_(dev), stream_(stream), lt_(CublasLtHandle::create()),
      lt_workspace_(dev, opts.cublaslt_workspace_bytes, MemTag::workspace),
      matmul_(std::make_unique<cuda::Matmul>(lt_.get(), lt_workspace_.data(), opts.cublaslt_workspace_bytes,
                                             opts.allow_tf32)),
      classifier_plans_(make_classifier_plans()),
      classifier_chunk_bytes_(opts.classifier_chunk_bytes),
      classifier_one_pass_chunk_bytes_(opts.classifier_one_pass_chunk_bytes) {}

CudaKernels::~CudaKernels() = default;

void* CudaKernels::scratch(size_t bytes) {
  if (scratch_.bytes() < bytes) {
    // The old block returns to the device's cache; work already queued on the
    // stream finishes with it before anything queued later can reuse it.
    scratch_.reset();
    scratch_ = Buffer(dev_, bytes, MemTag::workspace);
  }
  return scratch_.data();
}

// ---- dense -----------------------------------------------------------------------

void CudaKernels::matmul(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a, const Tensor& b,
                         bool trans_b, bool accumulate, const Tensor& bias) {
  matmul_->run(ws, out, a, trans_a, b, trans_b, accumulate, bias, stream_);
}

void CudaKernels::bias_grad(const Tensor& dbias, const Tensor& dout) {
  const int64_t N = cols(dout), R = rows(dout);
  ZT_CHECK(dbias.numel() == N, "bias_grad: dbias ", dbias.shape.str(), " for dout ", dout.shape.str());
  check_on_device(dbias, "dbias");
  check_on_device(dout, "dout");
  check_dtype(dbias, DType::f32, "dbias");
  check_dtype(dout, DType::f32, "dout");
  cuda::bias_grad(static_cast<float*>(dbias.data), static_cast<const float*>(dout.data), R, N,
                  scratch(cuda::bias_grad_workspace_bytes(R, N)), stream_);
}

// ---- layer norm -------------------------------------------------------------------

void CudaKernels::layernorm_fwd(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                                const Tensor& w, const Tensor& b, const Tensor& x_copy) {
  const int64_t C = cols(x), N = rows(x);
  ZT_CHECK(out.numel() == x.numel() && w.numel() == C && b.numel() == C && mean.numel() == N && rstd.numel() == N,
           "layernorm_fwd shapes: x ", x.shape.str(), " out ", out.shape.str(), " w ", w.shape.str());
  ZT_CHECK(out.dtype == x.dtype && b.dtype == w.dtype, "layernorm_fwd: out/x or w/b dtypes differ");
  for (const Tensor* t : {&out, &mean, &rstd, &x, &w, &b}) check_on_device(*t, "layernorm_fwd tensor");
  check_dtype(mean, DType::f32, "mean");
  check_dtype(rstd, DType::f32, "rstd");
  void* copy = fused_copy_target(x_copy, x, "layernorm_fwd");
  cuda::layernorm_fwd(out.data, static_cast<float*>(mean.data), static_cast<float*>(rstd.data), x.data, x.dtype,
                      w.data, b.data, w.dtype, copy, N, C, stream_);
  if (x_copy.defined() && copy == nullptr) cast(x_copy, x);
}

void CudaKernels::layernorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& db,
                                const Tensor& dout, const Tensor& x, const Tensor& w, const Tensor& mean,
                                const Tensor& rstd, const Tensor& dres) {
  const int64_t C = cols(x), N = rows(x);
  ZT_CHECK(dx.numel() == x.numel() && dout.numel() == x.numel() && w.numel() == C && dw.numel() == C &&
               db.numel() == C && mean.numel() == N && rstd.numel() == N,
           "layernorm_bwd shapes: x ", x.shape.str(), " dx ", dx.shape.str());
  const float* dres_p = residual_grad(dres, dx, dout, accumulate_dx, "layernorm_bwd");
  for (const Tensor* t : {&dx, &dw, &db, &dout, &x, &w, &mean, &rstd}) check_on_device(*t, "layernorm_bwd tensor");
  for (const Tensor* t : {&dx, &dw, &db, &mean, &rstd}) check_dtype(*t, DType::f32, "layernorm_bwd gradient");
  if (dout.dtype != x.dtype) check_dtype(dout, DType::f32, "layernorm_bwd dout");  // [Note: norms' dout in 16 bits]
  cuda::layernorm_bwd(static_cast<float*>(dx.data), accumulate_dx, dres_p, static_cast<float*>(dw.data),
                      static_cast<float*>(db.data), dout.data, dout.dtype, x.data, x.dtype, w.data,
                      w.dtype, static_cast<const float*>(mean.data), static_cast<const float*>(rstd.data), N, C,
                      scratch(cuda::layernorm_bwd_workspace_bytes(N, C)), stream_);
}

// ---- GELU ----------------------------------------------------------------------------

void CudaKernels::gelu_fwd(const Tensor& out, const Tensor& x) {
  ZT_CHECK(out.numel() == x.numel() && out.dtype == x.dtype, "gelu_fwd: out ", out.shape.str(), " x ",
           x.shape.str());
  check_on_device(out, "gelu out");
  check_on_device(x, "gelu x");
  cuda::gelu_fwd(out.data, x.data, x.dtype, x.numel(), stream_);
}

void CudaKernels::gelu_bwd(const Tensor& din, const Tensor& dout, const Tensor& x) {
  ZT_CHECK(din.numel() == x.numel() && dout.numel() == x.numel(), "gelu_bwd shapes");
  for (const Tensor* t : {&din, &dout, &x}) check_on_device(*t, "gelu_bwd tensor");
  check_dtype(din, DType::f32, "gelu_bwd din");
  check_dtype(dout, DType::f32, "gelu_bwd dout");
  cuda::gelu_bwd(static_cast<float*>(din.data), static_cast<const float*>(dout.data), x.data, x.dtype, x.numel(),
                 stream_);
}

// ---- embedding -------------------------------------------------------------------------

void CudaKernels::embedding_fwd(const Tensor& out, const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                const Tensor& doc_start) {
  ZT_CHECK(tokens.shape.rank() == 2 && out.shape.rank() == 3, "embedding: tokens (B, T), out (B, T, C)");
  const int64_t B = tokens.shape[0], T = tokens.shape[1], C = out.shape[2], V = wte.shape[0];
  ZT_CHECK(out.shape == (Shape{B, T, C}) && wte.shape[1] == C, "embedding shapes: out ", out.shape.str(), " wte ",
           wte.shape.str());
  if (wpe.defined()) {
    ZT_CHECK(wpe.shape[1] == C && wpe.shape[0] >= T, "embedding: wpe ", wpe.shape.str(), " for T ", T, ", C ", C);
    ZT_CHECK(wpe.dtype == wte.dtype, "embedding: wte and wpe dtypes differ");
    check_on_device(wpe, "embedding wpe");
  }
  check_dtype(tokens, DType::i32, "tokens");
  for (const Tensor* t : {&out, &tokens, &wte}) check_on_device(*t, "embedding tensor");
  cuda::embedding_fwd(out.data, out.dtype, static_cast<const int32_t*>(tokens.data), wte.data,
                      wpe.defined() ? wpe.data : nullptr, wte.dtype, doc_start_of(doc_start, B, T), B, T, C, V,
                      stream_);
}

void CudaKernels::embedding_bwd(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout, const Tensor& tokens,
                                const Tensor& doc_start) {
  ZT_CHECK(tokens.shape.rank() == 2, "embedding_bwd: tokens (B, T)");
  const int64_t B = tokens.shape[0], T = tokens.shape[1], C = cols(dout), V = dwte.shape[0];
  ZT_CHECK(dout.numel() == B * T * C && dwte.shape[1] == C, "embedding_bwd shapes");
  if (dwpe.defined()) {
    ZT_CHECK(dwpe.shape[1] == C && dwpe.shape[0] >= T, "embedding_bwd: dwpe ", dwpe.shape.str());
    check_dtype(dwpe, DType::f32, "embedding gradient");
    check_on_device(dwpe, "embedding_bwd dwpe");
  }
  check_dtype(tokens, DType::i32, "tokens");
  for (const Tensor* t : {&dwte, &dout}) check_dtype(*t, DType::f32, "embedding gradient");
  for (const Tensor* t : {&dwte, &dout, &tokens}) check_on_device(*t, "embedding_bwd tensor");
  cuda::embedding_bwd(static_cast<float*>(dwte.data), dwpe.defined() ? static_cast<float*>(dwpe.data) : nullptr,
                      static_cast<const float*>(dout.data), static_cast<const int32_t*>(tokens.data),
                      doc_start_of(doc_start, B, T), B, T, C, V,
                      scratch(cuda::embedding_bwd_workspace_bytes(B, T, V)), stream_);
}

// ---- Llama -------------------------------------------------------------------------------
// RMSNorm, RoPE and SwiGLU run here (llama.cu); grouped-query attention with
// the other attention kernels (cuda_kernels_fused.cu, attention.cu).

void CudaKernels::rmsnorm_fwd(const Tensor& out, const Tensor& rstd, const Tensor& x, const Tensor& w, double eps,
                              const Tensor& x_copy) {
  const int64_t C = cols(x), N = rows(x);
  ZT_CHECK(out.shape == x.shape && out.dtype == x.dtype && w.numel() == C && rstd.numel() == N,
           "rmsnorm_fwd: out ", out.shape.str(), " x ", x.shape.str(), " w ", w.shape.str());
  ZT_CHECK(eps > 0, "rmsnorm_fwd: eps must be > 0, got ", eps);
  for (const Tensor* t : {&out, &rstd, &x, &w}) check_on_device(*t, "rmsnorm_fwd tensor");
  check_dtype(rstd, DType::f32, "rmsnorm rstd");
  void* copy = fused_copy_target(x_copy, x, "rmsnorm_fwd");
  cuda::rmsnorm_fwd(out.data, static_cast<float*>(rstd.data), x.data, x.dtype, w.data, w.dtype, copy, N, C,
                    static_cast<float>(eps), stream_);
  if (x_copy.defined() && copy == nullptr) cast(x_copy, x);
}

void CudaKernels::rmsnorm_bwd(const Tensor& dx, bool accumulate_dx, const Tensor& dw, const Tensor& dout,
                              const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dres,
                              const Tensor& dx_operand) {
  const int64_t C = cols(x), N = rows(x);
  ZT_CHECK(dx.numel() == x.numel() && dout.numel() == x.numel() && w.numel() == C && dw.numel() == C &&
               rstd.numel() == N,
           "rmsnorm_bwd shapes: x ", x.shape.str(), " dx ", dx.shape.str());
  const float* dres_p = residual_grad(dres, dx, dout, accumulate_dx, "rmsnorm_bwd");
  for (const Tensor* t : {&dx, &dw, &dout, &x, &w, &rstd}) check_on_device(*t, "rmsnorm_bwd tensor");
  for (const Tensor* t : {&dx, &dw, &rstd}) check_dtype(*t, DType::f32, "rmsnorm_bwd gradient");
  if (dout.dtype != x.dtype) check_dtype(dout, DType::f32, "rmsnorm_bwd dout");  // [Note: norms' dout in 16 bits]
  if (dx_operand.defined()) {  // [Note: the norm writes the products' operand]
    ZT_CHECK(norm_bwd_writes_operand(x, dx_operand.dtype) && dx_operand.numel() == x.numel(),
             "rmsnorm_bwd: dx operand ", dx_operand.shape.str(), " ", dtype_name(dx_operand.dtype), " for x ",
             x.shape.str(), " ", dtype_name(x.dtype), " (x's shape and 16-bit dtype)");
    check_on_device(dx_operand, "rmsnorm_bwd dx operand");
  }
  cuda::rmsnorm_bwd(static_cast<float*>(dx.data), dx_operand.data, accumulate_dx, dres_p,
                    static_cast<float*>(dw.data), dout.data, dout.dtype, x.data, x.dtype, w.data, w.dtype,
                    static_cast<const float*>(rstd.data), N, C, scratch(cuda::rmsnorm_bwd_workspace_bytes(N, C)),
                    stream_);
}

namespace {

// q and, when defined, k of one (B, T) and dtype, for one rope launch.
void check_rope_pair(const Tensor& q, const Tensor& k, const char* what) {
  ZT_CHECK(q.shape.rank() == 3, what, ": q must be (B, T, H * head_dim), got ", q.shape.str());
  check_on_device(q, what);
  if (k.defined()) {
    ZT_CHECK(k.shape.rank() == 3 && k.shape[0] == q.shape[0] && k.shape[1] == q.shape[1] && k.dtype == q.dtype,
             what, ": k ", k.shape.str(), " ", dtype_name(k.dtype), " does not go with q ", q.shape.str(), " ",
             dtype_name(q.dtype));
    check_on_device(k, what);
  }
}

}  // namespace

void CudaKernels::rope_fwd(const Tensor& q, const Tensor& k, const RopeConfig& rope, const Tensor& doc_start) {
  check_rope_pair(q, k, "rope_fwd");
  cuda::rope(q.data, q.shape[2], k.defined() ? k.data : nullptr, k.defined() ? k.shape[2] : 0, q.dtype, q.shape[0],
             q.shape[1], rope, false, doc_start_of(doc_start, q.shape[0], q.shape[1]), stream_);
}

void CudaKernels::rope_bwd(const Tensor& dq, const Tensor& dk, const RopeConfig& rope, const Tensor& doc_start) {
  check_rope_pair(dq, dk, "rope_bwd");
  ZT_CHECK(dq.dtype == DType::f32 || dq.dtype == DType::bf16 || dq.dtype == DType::f16,
           "rope_bwd gradient: f32, bf16 or f16, got ", dtype_name(dq.dtype));
  cuda::rope(dq.data, dq.shape[2], dk.defined() ? dk.data : nullptr, dk.defined() ? dk.shape[2] : 0, dq.dtype,
             dq.shape[0], dq.shape[1], rope, true, doc_start_of(doc_start, dq.shape[0], dq.shape[1]), stream_);
}

void CudaKernels::swiglu_fwd(const Tensor& out, const Tensor& gate, const Tensor& up) {
  ZT_CHECK(out.numel() == gate.numel() && up.numel() == gate.numel() && out.dtype == gate.dtype &&
               up.dtype == gate.dtype,
           "swiglu_fwd: out ", out.shape.str(), " gate ", gate.shape.str(), " up ", up.shape.str());
  for (const Tensor* t : {&out, &gate, &up}) check_on_device(*t, "swiglu_fwd tensor");
  cuda::swiglu_fwd(out.data, gate.data, up.data, gate.dtype, gate.numel(), stream_);
}

void CudaKernels::swiglu_bwd(const Tensor& dgate, const Tensor& dup, const Tensor& dout, const Tensor& gate,
                             const Tensor& up) {
  const int64_t n = gate.numel();
  ZT_CHECK(dgate.numel() == n && dup.numel() == n && dout.numel() == n && up.numel() == n && up.dtype == gate.dtype,
           "swiglu_bwd shapes: dgate ", dgate.shape.str(), " gate ", gate.shape.str());
  for (const Tensor* t : {&dgate, &dup, &dout, &gate, &up}) check_on_device(*t, "swiglu_bwd tensor");
  check_dtype(dout, DType::f32, "swiglu_bwd dout");
  const bool in_storage = dgate.dtype == gate.dtype && gate.dtype != DType::f32;
  for (const Tensor* t : {&dgate, &dup}) check_dtype(*t, in_storage ? gate.dtype : DType::f32, "swiglu_bwd gradient");
  cuda::swiglu_bwd(dgate.data, dup.data, in_storage, static_cast<const float*>(dout.data), gate.data, up.data,
                   gate.dtype, n, stream_);
}

// ---- element-wise ------------------------------------------------------------------------

void CudaKernels::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  ZT_CHECK(out.numel() == a.numel() && out.numel() == b.numel(), "add: ", a.shape.str(), " + ", b.shape.str(),
           " -> ", out.shape.str());
  ZT_CHECK(b.dtype == a.dtype, "add: a and b must share a dtype");
  for (const Tensor* t : {&out, &a, &b}) check_on_device(*t, "add tensor");
  cuda::add(out.data, out.dtype, a.data, b.data, a.dtype, out.numel(), stream_);
}

void CudaKernels::cast(const Tensor& dst, const Tensor& src) {
  ZT_CHECK(dst.numel() == src.numel(), "cast: ", src.shape.str(), " into ", dst.shape.str());
  check_on_device(dst, "cast dst");
  check_on_device(src, "cast src");
  cuda::cast(dst.data, dst.dtype, src.data, src.dtype, src.numel(), stream_);
}

Tensor CudaKernels::matmul_operand(Arena& ws, const Tensor& t, DType partner) {
  // As the product would (matmul.cu: input_type, as_type): an f32 operand
  // beside a 16-bit one is rounded to that dtype by the same cast.
  if (t.dtype != DType::f32 || (partner != DType::bf16 && partner != DType::f16)) return t;
  check_on_device(t, "matmul operand");
  Tensor out = ws.alloc(partner, t.shape);
  cuda::cast(out.data, partner, t.data, t.dtype, t.numel(), stream_);
  return out;
}

// The fused forms of Kernels' defaults (bias_grad, gelu_bwd, matmul_operand)
// for the case the products convert: an f32 gradient beside a 16-bit
// partner. Otherwise the operand is the gradient itself, and the defaults
// run.
Tensor CudaKernels::bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout, DType partner) {
  if (dout.dtype != DType::f32 || (partner != DType::bf16 && partner != DType::f16))
    return Kernels::bias_grad_and_operand(ws, dbias, dout, partner);
  const int64_t N = cols(dout), R = rows(dout);
  ZT_CHECK(dbias.numel() == N, "bias_grad_and_operand: dbias ", dbias.shape.str(), " for dout ", dout.shape.str());
  check_on_device(dbias, "dbias");
  check_on_device(dout, "dout");
  check_dtype(dbias, DType::f32, "dbias");
  Tensor out = ws.alloc(partner, dout.shape);
  cuda::bias_grad_and_cast(static_cast<float*>(dbias.data), out.data, partner, static_cast<const float*>(dout.data), R,
                           N, scratch(cuda::bias_grad_workspace_bytes(R, N)), stream_);
  return out;
}

Tensor CudaKernels::gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, const Tensor& dout,
                                                   const Tensor& x, DType partner) {
  if (dout.dtype != DType::f32 || (partner != DType::bf16 && partner != DType::f16))
    return Kernels::gelu_bwd_bias_grad_and_operand(ws, dbias, dout, x, partner);
  const int64_t N = cols(dout), R = rows(dout);
  ZT_CHECK(dbias.numel() == N && x.numel() == dout.numel(), "gelu_bwd_bias_grad_and_operand: dbias ",
           dbias.shape.str(), ", x ", x.shape.str(), " for dout ", dout.shape.str());
  check_on_device(dbias, "dbias");
  check_on_device(dout, "dout");
  check_on_device(x, "x");
  check_dtype(dbias, DType::f32, "dbias");
  Tensor out = ws.alloc(partner, dout.shape);
  cuda::gelu_bwd_bias_grad_and_cast(static_cast<float*>(dbias.data), out.data, partner,
                                    static_cast<const float*>(dout.data), x.data, x.dtype, R, N,
                                    scratch(cuda::bias_grad_workspace_bytes(R, N)), stream_);
  return out;
}

namespace {
// ZTRAIN_GELU: unset, empty or "epilogue" puts GELU in the products'
// epilogues where they can take it; "separate" never does.
bool gelu_in_epilogue() {
  const char* env = std::getenv("ZTRAIN_GELU");
  const std::string path = env == nullptr ? "" : env;
  if (!path.empty() && path != "epilogue" && path != "separate")
    ZT_USER_ERROR("ZTRAIN_GELU=", path, ": unknown GELU path; use epilogue or separate");
  return path != "separate";
}
}  // namespace

void CudaKernels::matmul_bias_gelu(Arena& ws, const Tensor& out, const Tensor& pre, const Tensor& a,
                                   const Tensor& w, bool trans_w, const Tensor& bias) {
  if (gelu_in_epilogue() && bias.defined() && matmul_->run_bias_gelu(out, pre, a, false, w, trans_w, bias, stream_))
    return;
  Kernels::matmul_bias_gelu(ws, out, pre, a, w, trans_w, bias);
}

Tensor CudaKernels::matmul_gelu_bwd_bias_grad_and_operand(Arena& ws, const Tensor& dbias, DType math,
                                                          const Tensor& dout, const Tensor& w, bool trans_w,
                                                          const Tensor& pre, DType partner) {
  const bool fusable = gelu_in_epilogue() && (partner == DType::bf16 || partner == DType::f16) &&
                       dout.dtype == partner && w.dtype == partner && pre.dtype == partner &&
                       dbias.dtype == DType::f32 && dbias.numel() == cols(pre);
  if (fusable) {
    const Arena::Mark before = ws.mark();
    const Tensor out = ws.alloc(partner, pre.shape);
    if (matmul_->run_dgelu(out, dout, false, w, trans_w, pre, stream_)) {
      check_on_device(dbias, "dbias");
      const int64_t R = rows(out), F = cols(out);
      cuda::bias_grad_16(static_cast<float*>(dbias.data), out.data, partner, R, F,
                         scratch(cuda::bias_grad_workspace_bytes(R, F)), stream_);
      return out;
    }
    ws.release_to(before);  // nothing was enqueued on `out`: the fallback takes its own
  }
  return Kernels::matmul_gelu_bwd_bias_grad_and_operand(ws, dbias, math, dout, w, trans_w, pre, partner);
}

void CudaKernels::zero(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return;
  check_on_device(t, "zero");
  ZT_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
}

namespace {
// Up to kSpansPerLaunch spans in the kernel's parameters (16 KiB).
constexpr int kSpansPerLaunch = 1024;
struct SpanTable {
  int64_t begin[kSpansPerLaunch];
  int64_t end[kSpansPerLaunch];
};

// One block a span (each at most Kernels::kZeroSpanMax elements), four
// floats a store between its 16-byte boundaries.
__global__ void zero_spans_kernel(float* flat, const __grid_constant__ SpanTable t) {
  const int64_t b = t.begin[blockIdx.x], e = t.end[blockIdx.x];
  const bool aligned = reinterpret_cast<uintptr_t>(flat) % 16 == 0;
  const int64_t head = aligned ? min(e, (b + 3) / 4 * 4) : e;  // to the first 16-byte boundary
  for (int64_t j = b + threadIdx.x; j < head; j += blockDim.x) flat[j] = 0.0f;
  const int64_t body = head + (e - head) / 4 * 4;
  for (int64_t j = head + 4 * static_cast<int64_t>(threadIdx.x); j < body; j += 4 * static_cast<int64_t>(blockDim.x))
    *reinterpret_cast<float4*>(flat + j) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int64_t j = body + threadIdx.x; j < e; j += blockDim.x) flat[j] = 0.0f;
}
}  // namespace

void CudaKernels::zero_spans(const Tensor& flat, const std::vector<ZeroSpan>& spans) {
  if (spans.empty()) return;
  check_on_device(flat, "zero_spans");
  ZT_CHECK(flat.dtype == DType::f32, "zero_spans: f32 gradients expected, got ", dtype_name(flat.dtype));
  for (size_t at = 0; at < spans.size(); at += kSpansPerLaunch) {
    const size_t n = std::min<size_t>(kSpansPerLaunch, spans.size() - at);
    SpanTable t;
    for (size_t i = 0; i < n; ++i) {
      const ZeroSpan& s = spans[at + i];
      ZT_CHECK(s.begin >= 0 && s.begin <= s.end && s.end <= flat.numel() && s.end - s.begin <= kZeroSpanMax,
               "zero_spans: span [", s.begin, ", ", s.end, ") of a ", flat.numel(), "-element tensor");
      t.begin[i] = s.begin;
      t.end[i] = s.end;
    }
    zero_spans_kernel<<<static_cast<unsigned>(n), 256, 0, stream_>>>(static_cast<float*>(flat.data), t);
    ZT_CUDA_CHECK_LAUNCH();
  }
}

void CudaKernels::scale(const Tensor& x, double alpha) {
  check_on_device(x, "scale");
  cuda::scale(x.data, x.dtype, alpha, x.numel(), stream_);
}

namespace {
// acc (1) f64 += the sum of x (or of its squares): the checks both share.
void check_sum(const Tensor& x, const Tensor& acc, const char* what) {
  ZT_CHECK(acc.numel() == 1, what, ": acc must have one element");
  check_dtype(acc, DType::f64, what);
  check_on_device(acc, what);
  check_on_device(x, what);
}
}  // namespace

void CudaKernels::sum_squares(const Tensor& x, const Tensor& acc) {
  check_sum(x, acc, "sum_squares");
  const int64_t n = x.numel();
  cuda::sum_squares(x.data, x.dtype, n, static_cast<double*>(acc.data), scratch(cuda::sum_workspace_bytes(n)),
                    stream_);
}

void CudaKernels::sum_into(const Tensor& x, const Tensor& acc) {
  check_sum(x, acc, "sum_into");
  ZT_CHECK(x.dtype == DType::f32 || x.dtype == DType::f64, "sum_into: x must be f32 or f64, got ",
           dtype_name(x.dtype));
  const int64_t n = x.numel();
  cuda::sum_into(x.data, x.dtype, n, static_cast<double*>(acc.data), scratch(cuda::sum_workspace_bytes(n)), stream_);
}

void CudaKernels::check_overflow(const Tensor& x, const Tensor& flag) {
  ZT_CHECK(flag.numel() == 1, "check_overflow: flag must have one element");
  check_dtype(flag, DType::i32, "overflow flag");
  check_on_device(flag, "overflow flag");
  check_on_device(x, "check_overflow x");
  cuda::check_overflow(x.data, x.dtype, x.numel(), static_cast<int32_t*>(flag.data), stream_);
}

}  // namespace zt
