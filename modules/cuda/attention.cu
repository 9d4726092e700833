// Launchers for causal multi-head attention on the GPU: argument checks,
// dispatch by storage dtype and padded head size, and the backward's
// preprocessing kernel. The kernels are in attention_mma_{fwd,bwd}.cu
// (bf16 / f16, tensor cores) and attention_simt.cu (f32).
#include "modules/cuda/attention.cuh"

#include <cstdint>
#include <limits>

#include "core/error.hpp"
#include "modules/cuda/common.cuh"
#include "modules/cuda/attention_cudnn.cuh"
#include "modules/cuda/attention_cudnn_cast.cuh"
#include "modules/cuda/attention_detail.cuh"

namespace zt {
namespace {

using attn::BwdArgs;
using attn::Dims;
using attn::FwdArgs;

// B, T, NH, NKV, hs of a call whose queries are q (B, T, NH * hs).
Dims attention_dims(const Shape& q, int64_t q_cols, int n_head, int n_kv_head, const char* what) {
  ZT_CHECK(q.rank() == 3, what, ": expected (B, T, columns), got ", q.str());
  const int64_t B = q[0], T = q[1], C = q_cols;
  ZT_CHECK(n_head > 0 && C % n_head == 0, what, ": ", C, " query columns not divisible by n_head ", n_head);
  ZT_CHECK(n_kv_head > 0 && n_head % n_kv_head == 0, what, ": n_head ", n_head, " not a multiple of n_kv_head ",
           n_kv_head);
  const int64_t hs = C / n_head;
  ZT_CHECK(hs >= 1 && hs <= 128, "attention on CUDA supports head sizes 1..128, got ", hs);
  ZT_CHECK(B >= 1 && T >= 1, what, ": empty input ", q.str());
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  // grid.y counts query blocks of 16 rows or more (the f32 path at hs > 64).
  ZT_CHECK(B * n_head <= kMax && T <= int64_t{65535} * 16, "attention: B * n_head or T too large for the grid");
  return Dims{static_cast<int>(B), static_cast<int>(T), n_head, n_kv_head, static_cast<int>(hs), 0, 0, C};
}

const int32_t* doc_start_ptr(const Tensor& doc_start, const Dims& d) {
  if (!doc_start.defined()) return nullptr;
  ZT_CHECK(doc_start.device == DeviceKind::cuda && doc_start.dtype == DType::i32 &&
               doc_start.numel() == static_cast<int64_t>(d.B) * d.T,
           "attention: doc_start must be (", d.B, ", ", d.T, ") i32 in CUDA memory, got ", doc_start.shape.str(),
           " ", dtype_name(doc_start.dtype));
  return static_cast<const int32_t*>(doc_start.data);
}

const void* offset(const void* p, int64_t elems, DType t) {
  return static_cast<const char*>(p) + elems * static_cast<int64_t>(dtype_size(t));
}

int padded_head(int hs) { return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }


void check_cuda(const Tensor& t, const char* what) {
  ZT_CHECK(t.device == DeviceKind::cuda && t.data != nullptr, "attention: ", what,
           " must be a defined tensor in CUDA memory");
}

// One warp per (b, t, h): delta[b, h, t] = sum_d dout * out over the head's
// columns, and (for 16-bit storage) dout rounded to the storage dtype.
//
// [Note: delta from the rounded dout] With 16-bit storage the products see
// dout rounded to the storage dtype (dO'), so delta is computed from dO' too:
// then dS = P (dP - delta) is the exact backward of dO' (up to the rounding
// of P), and where dS vanishes in exact arithmetic (a query attending to one
// key, e.g. T = 1, or a saturated softmax) it stays at fp32 noise. Mixing the
// fp32 dout in delta with dO' in dP would leave u * |dO| |V| of noise there.
template <typename S>
__global__ void bwd_prep_kernel(const float* __restrict__ dout, const S* __restrict__ out,
                                S* __restrict__ dout_s, float* __restrict__ delta, Dims d) {
  const int64_t w = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const int64_t rows = static_cast<int64_t>(d.B) * d.T;
  if (w >= rows * d.NH) return;  // whole warps leave together
  const int64_t row = w / d.NH;  // b * T + t
  const int h = static_cast<int>(w % d.NH);
  const int64_t off = row * d.C + static_cast<int64_t>(h) * d.hs;
  float acc = 0.0f;
  for (int i = lane; i < d.hs; i += 32) {
    float g = dout[off + i];
    if (dout_s != nullptr) {
      const S gs = attn::from_f32<S>(g);
      dout_s[off + i] = gs;
      g = attn::to_f32(gs);
    }
    acc = fmaf(g, attn::to_f32(out[off + i]), acc);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) {
    const int64_t b = row / d.T, t = row % d.T;
    delta[(b * d.NH + h) * d.T + t] = acc;
  }
}

template <typename S>
void launch_prep(const float* dout, const void* out, void* dout_s, float* delta, const Dims& d,
                 cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t warps = static_cast<int64_t>(d.B) * d.T * d.NH;
  const int64_t blocks = (warps * 32 + kThreads - 1) / kThreads;
  ZT_CHECK(blocks <= std::numeric_limits<int>::max(), "attention: too many rows for the prep grid");
  bwd_prep_kernel<S><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      dout, static_cast<const S*>(out), static_cast<S*>(dout_s), delta, d);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace

namespace {

void run_fwd(const FwdArgs& a, DType t, Arena& ws, cudaStream_t stream) {
  if (attn::cudnn_fwd(a, t, ws, stream)) return;  // declines f32, doc_start and odd shapes
  const Dims& d = a.d;
  const int dp = padded_head(d.hs);
  const bool vec = d.hs % 8 == 0 && d.ld_q % 8 == 0 && d.ld_kv % 8 == 0 && aligned16(a.q) && aligned16(a.k) &&
                   aligned16(a.v);
  switch (t) {
    case DType::f32: attn::fwd_simt_f32(a, dp, stream); return;
    case DType::bf16: attn::fwd_mma_bf16(a, dp, vec, stream); return;
    case DType::f16: attn::fwd_mma_f16(a, dp, vec, stream); return;
    default: ZT_THROW("attention_fwd on CUDA: storage must be f32, bf16 or f16, got ", dtype_name(t));
  }
}

void check_fwd_outputs(const Tensor& out, const Tensor& lse, const Dims& d, DType t) {
  check_cuda(out, "out");
  check_cuda(lse, "lse");
  ZT_CHECK(out.shape == (Shape{d.B, d.T, d.C}) && out.dtype == t, "attention_fwd: out must be (", d.B, ", ", d.T,
           ", ", d.C, ") ", dtype_name(t), ", got ", out.shape.str(), " ", dtype_name(out.dtype));
  ZT_CHECK(lse.numel() == static_cast<int64_t>(d.B) * d.NH * d.T && lse.dtype == DType::f32,
           "attention_fwd: lse must be (B, n_head, T) f32, got ", lse.shape.str(), " ", dtype_name(lse.dtype));
}

// Runs the backward once a's inputs and outputs are set: delta and the
// rounded dout come from the workspace. With cudnn_only, returns false having
// done nothing where cuDNN declines; otherwise the flash kernels run there.
bool run_bwd(BwdArgs a, DType t, const Tensor& dout, const Tensor& out, const Tensor& lse, Arena& ws,
             cudaStream_t stream, bool cudnn_only = false) {
  const Dims& d = a.d;
  check_cuda(dout, "dout");
  check_cuda(out, "out");
  check_cuda(lse, "lse");
  const int64_t n_out = static_cast<int64_t>(d.B) * d.T * d.C, n_stat = static_cast<int64_t>(d.B) * d.NH * d.T;
  ZT_CHECK(dout.numel() == n_out && (dout.dtype == DType::f32 || (dout.dtype == t && t != DType::f32)),
           "attention_bwd: dout must be (B, T, C) f32 or ", dtype_name(t));
  ZT_CHECK(out.numel() == n_out && out.dtype == t, "attention_bwd: out must be (B, T, C) in ", dtype_name(t));
  ZT_CHECK(lse.numel() == n_stat && lse.dtype == DType::f32, "attention_bwd: lse must be (B, n_head, T) f32");
  a.lse = static_cast<const float*>(lse.data);
  if (attn::cudnn_bwd(a, t, out.data, dout.data, dout.dtype, ws, stream)) return true;
  if (cudnn_only) return false;

  const ArenaScope scope(ws);
  // A 16-bit dout ([Note: attention's dout in 16 bits] in modules/kernels.hpp)
  // where cuDNN declined: the flash kernels take its f32 widening.
  const float* g = static_cast<const float*>(dout.data);
  if (dout.dtype != DType::f32) {
    float* wide = static_cast<float*>(ws.alloc(DType::f32, Shape{n_out}).data);
    cudnn_widen(t, dout.data, d.C, static_cast<int64_t>(d.B) * d.T, wide, d.C, stream);
    g = wide;
  }
  const Tensor delta = ws.alloc(DType::f32, Shape{d.B, d.NH, d.T});
  check_cuda(delta, "workspace arena");
  const int dp = padded_head(d.hs);
  a.delta = static_cast<const float*>(delta.data);
  float* dl = static_cast<float*>(delta.data);
  switch (t) {
    case DType::f32:
      launch_prep<float>(g, out.data, nullptr, dl, d, stream);
      a.dout_s = g;
      attn::bwd_simt_f32(a, dp, stream);
      break;
    case DType::bf16:
    case DType::f16: {
      const Tensor dout_s = ws.alloc(t, Shape{d.B, d.T, d.C});
      a.dout_s = dout_s.data;
      const bool vec = d.hs % 8 == 0 && d.ld_q % 8 == 0 && d.ld_kv % 8 == 0 && aligned16(a.q) && aligned16(a.k) &&
                       aligned16(a.v) && aligned16(dout_s.data);
      if (t == DType::bf16) {
        launch_prep<__nv_bfloat16>(g, out.data, dout_s.data, dl, d, stream);
        attn::bwd_mma_bf16(a, dp, vec, stream);
      } else {
        launch_prep<__half>(g, out.data, dout_s.data, dl, d, stream);
        attn::bwd_mma_f16(a, dp, vec, stream);
      }
      break;
    }
    default:
      ZT_THROW("attention_bwd on CUDA: storage must be f32, bf16 or f16, got ", dtype_name(t));
  }
  return true;
}

// Packed (B, T, 3C) qkv as separate matrices of row stride 3C.
Dims packed_dims(const Tensor& qkv, int n_head) {
  ZT_CHECK(qkv.shape.rank() == 3 && qkv.shape[2] % 3 == 0, "attention: qkv must be (B, T, 3C), got ",
           qkv.shape.str());
  Dims d = attention_dims(qkv.shape, qkv.shape[2] / 3, n_head, n_head, "attention");
  d.ld_q = d.ld_kv = 3 * d.C;
  return d;
}

Dims gqa_dims(const Tensor& q, const Tensor& k, const Tensor& v, int n_head, int n_kv_head) {
  ZT_CHECK(q.shape.rank() == 3, "gqa_attention: q must be (B, T, n_head * hs), got ", q.shape.str());
  Dims d = attention_dims(q.shape, q.shape[2], n_head, n_kv_head, "gqa_attention");
  const Shape kv{d.B, d.T, static_cast<int64_t>(n_kv_head) * d.hs};
  ZT_CHECK(k.shape == kv && v.shape == kv && k.dtype == q.dtype && v.dtype == q.dtype, "gqa_attention: k and v must be ",
           kv.str(), " ", dtype_name(q.dtype), ", got ", k.shape.str(), " and ", v.shape.str());
  check_cuda(q, "q");
  check_cuda(k, "k");
  check_cuda(v, "v");
  d.ld_q = d.C;
  d.ld_kv = kv[2];
  return d;
}

}  // namespace

void attention_fwd_cuda(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head, const Tensor& doc_start,
                        Arena& ws, cudaStream_t stream) {
  const Dims d = packed_dims(qkv, n_head);
  check_cuda(qkv, "qkv");
  check_fwd_outputs(out, lse, d, qkv.dtype);
  const FwdArgs a{d,        qkv.data,          offset(qkv.data, d.C, qkv.dtype), offset(qkv.data, 2 * d.C, qkv.dtype),
                  out.data, static_cast<float*>(lse.data), doc_start_ptr(doc_start, d)};
  run_fwd(a, qkv.dtype, ws, stream);
}

void attention_bwd_cuda(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, const Tensor& doc_start, Arena& ws, cudaStream_t stream) {
  const Dims d = packed_dims(qkv, n_head);
  check_cuda(dqkv, "dqkv");
  check_cuda(qkv, "qkv");
  ZT_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype == DType::f32, "attention_bwd: dqkv must be ",
           qkv.shape.str(), " f32, got ", dqkv.shape.str(), " ", dtype_name(dqkv.dtype));
  float* g = static_cast<float*>(dqkv.data);
  BwdArgs a{};
  a.d = d;
  a.q = qkv.data;
  a.k = offset(qkv.data, d.C, qkv.dtype);
  a.v = offset(qkv.data, 2 * d.C, qkv.dtype);
  a.dq = g;
  a.dk = g + d.C;
  a.dv = g + 2 * d.C;
  a.ld_dq = a.ld_dkv = 3 * d.C;
  a.doc_start = doc_start_ptr(doc_start, d);
  run_bwd(a, qkv.dtype, dout, out, lse, ws, stream);
}

bool attention_bwd_cuda_16bit(const Tensor& dqkv16, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                              const Tensor& lse, int n_head, Arena& ws, cudaStream_t stream) {
  const Dims d = packed_dims(qkv, n_head);
  check_cuda(dqkv16, "dqkv16");
  check_cuda(dout, "dout");
  check_cuda(out, "out");
  check_cuda(lse, "lse");
  const int64_t n_out = static_cast<int64_t>(d.B) * d.T * d.C, n_stat = static_cast<int64_t>(d.B) * d.NH * d.T;
  ZT_CHECK(dqkv16.numel() == qkv.numel() && dqkv16.dtype == qkv.dtype, "attention_bwd: dqkv16 must be ",
           qkv.shape.str(), " ", dtype_name(qkv.dtype), ", got ", dqkv16.shape.str(), " ", dtype_name(dqkv16.dtype));
  ZT_CHECK(dout.numel() == n_out && (dout.dtype == DType::f32 || dout.dtype == qkv.dtype),
           "attention_bwd: dout must be (B, T, C) f32 or ", dtype_name(qkv.dtype));
  ZT_CHECK(out.numel() == n_out && out.dtype == qkv.dtype, "attention_bwd: out must be (B, T, C) in ",
           dtype_name(qkv.dtype));
  ZT_CHECK(lse.numel() == n_stat && lse.dtype == DType::f32, "attention_bwd: lse must be (B, n_head, T) f32");
  BwdArgs a{};
  a.d = d;
  a.q = qkv.data;
  a.k = offset(qkv.data, d.C, qkv.dtype);
  a.v = offset(qkv.data, 2 * d.C, qkv.dtype);
  a.lse = static_cast<const float*>(lse.data);
  a.dq16 = dqkv16.data;
  a.dk16 = const_cast<void*>(offset(dqkv16.data, d.C, qkv.dtype));
  a.dv16 = const_cast<void*>(offset(dqkv16.data, 2 * d.C, qkv.dtype));
  a.ld_g16 = 3 * d.C;
  return attn::cudnn_bwd(a, qkv.dtype, out.data, dout.data, dout.dtype, ws, stream);
}

void gqa_attention_fwd_cuda(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                            int n_head, int n_kv_head, const Tensor& doc_start, Arena& ws, cudaStream_t stream) {
  const Dims d = gqa_dims(q, k, v, n_head, n_kv_head);
  check_fwd_outputs(out, lse, d, q.dtype);
  const FwdArgs a{d, q.data, k.data, v.data, out.data, static_cast<float*>(lse.data), doc_start_ptr(doc_start, d)};
  run_fwd(a, q.dtype, ws, stream);
}

void gqa_attention_bwd_cuda(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout, const Tensor& q,
                            const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse, int n_head,
                            int n_kv_head, const Tensor& doc_start, Arena& ws, cudaStream_t stream) {
  const Dims d = gqa_dims(q, k, v, n_head, n_kv_head);
  for (const Tensor* t : {&dq, &dk, &dv}) check_cuda(*t, "gradient");
  // f32, or the 16-bit storage dtype of q ([Note: attention's gradients in 16
  // bits] in modules/kernels.hpp).
  const DType g = dq.dtype;
  ZT_CHECK(dq.numel() == q.numel() && dk.numel() == k.numel() && dv.numel() == v.numel() && dk.dtype == g &&
               dv.dtype == g && (g == DType::f32 || (g == q.dtype && g != DType::f32)),
           "gqa_attention_bwd: dq, dk, dv must be of the shapes of q, k, v, all f32 or all ", dtype_name(q.dtype));
  BwdArgs a{};
  a.d = d;
  a.q = q.data;
  a.k = k.data;
  a.v = v.data;
  a.ld_dq = d.ld_q;
  a.ld_dkv = d.ld_kv;
  a.doc_start = doc_start_ptr(doc_start, d);
  if (g == DType::f32) {
    a.dq = static_cast<float*>(dq.data);
    a.dk = static_cast<float*>(dk.data);
    a.dv = static_cast<float*>(dv.data);
    run_bwd(a, q.dtype, dout, out, lse, ws, stream);
    return;
  }
  // cuDNN writes them as they are; where it declines, the flash kernels
  // write f32 into the workspace, rounded once into the outputs.
  a.dq16 = dq.data;
  a.dk16 = dk.data;
  a.dv16 = dv.data;
  if (run_bwd(a, q.dtype, dout, out, lse, ws, stream, true)) return;
  const ArenaScope scope(ws);
  a.dq16 = a.dk16 = a.dv16 = nullptr;
  const Tensor wq = ws.alloc(DType::f32, dq.shape), wk = ws.alloc(DType::f32, dk.shape),
               wv = ws.alloc(DType::f32, dv.shape);
  a.dq = static_cast<float*>(wq.data);  // dense, as d.ld_q and d.ld_kv say
  a.dk = static_cast<float*>(wk.data);
  a.dv = static_cast<float*>(wv.data);
  run_bwd(a, q.dtype, dout, out, lse, ws, stream);
  cudnn_round(g, a.dq, dq.data, dq.numel(), stream);
  cudnn_round(g, a.dk, dk.data, dk.numel(), stream);
  cudnn_round(g, a.dv, dv.data, dv.numel(), stream);
}

}  // namespace zt
