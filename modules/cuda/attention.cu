// Launchers for causal multi-head attention on the GPU: argument checks,
// dispatch by storage dtype and padded head size, and the backward's
// preprocessing kernel. The kernels are in attention_mma_{fwd,bwd}.cu
// (bf16 / f16, tensor cores) and attention_simt.cu (f32).
#include "modules/cuda/attention.cuh"

#include <cstdint>
#include <limits>

#include "core/error.hpp"
#include "modules/cuda/attention_detail.cuh"

namespace zt {
namespace {

using attn::Dims;

Dims attention_dims(const Tensor& qkv, int n_head) {
  ZT_CHECK(qkv.shape.rank() == 3 && qkv.shape[2] % 3 == 0, "attention: qkv must be (B, T, 3C), got ",
           qkv.shape.str());
  const int64_t B = qkv.shape[0], T = qkv.shape[1], C = qkv.shape[2] / 3;
  ZT_CHECK(n_head > 0 && C % n_head == 0, "attention: C ", C, " not divisible by n_head ", n_head);
  const int64_t hs = C / n_head;
  ZT_CHECK(hs >= 1 && hs <= 128, "attention on CUDA supports head sizes 1..128, got ", hs);
  ZT_CHECK(B >= 1 && T >= 1, "attention: empty qkv ", qkv.shape.str());
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  // grid.y counts query blocks of 16 rows or more (the f32 path at hs > 64).
  ZT_CHECK(B * n_head <= kMax && T <= int64_t{65535} * 16, "attention: B * n_head or T too large for the grid");
  return Dims{static_cast<int>(B), static_cast<int>(T), n_head, static_cast<int>(hs), C};
}

int padded_head(int hs) { return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Returns the arena to its mark on every exit, exceptions included.
struct ArenaScope {
  Arena& ws;
  Arena::Mark mark;
  explicit ArenaScope(Arena& a) : ws(a), mark(a.mark()) {}
  ~ArenaScope() { ws.release_to(mark); }
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;
};

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

void attention_fwd_cuda(const Tensor& out, const Tensor& lse, const Tensor& qkv, int n_head,
                        cudaStream_t stream) {
  const Dims d = attention_dims(qkv, n_head);
  check_cuda(qkv, "qkv");
  check_cuda(out, "out");
  check_cuda(lse, "lse");
  ZT_CHECK(out.shape == (Shape{d.B, d.T, d.C}) && out.dtype == qkv.dtype, "attention_fwd: out ",
           out.shape.str(), " ", dtype_name(out.dtype), " for qkv ", qkv.shape.str(), " ",
           dtype_name(qkv.dtype));
  ZT_CHECK(lse.numel() == static_cast<int64_t>(d.B) * d.NH * d.T && lse.dtype == DType::f32,
           "attention_fwd: lse must be (B, n_head, T) f32, got ", lse.shape.str(), " ", dtype_name(lse.dtype));
  const attn::FwdArgs a{d, qkv.data, out.data, static_cast<float*>(lse.data)};
  const int dp = padded_head(d.hs);
  const bool vec = d.hs % 8 == 0 && aligned16(qkv.data);
  switch (qkv.dtype) {
    case DType::f32: attn::fwd_simt_f32(a, dp, stream); return;
    case DType::bf16: attn::fwd_mma_bf16(a, dp, vec, stream); return;
    case DType::f16: attn::fwd_mma_f16(a, dp, vec, stream); return;
    default: ZT_THROW("attention_fwd on CUDA: storage must be f32, bf16 or f16, got ", dtype_name(qkv.dtype));
  }
}

void attention_bwd_cuda(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, int n_head, Arena& ws, cudaStream_t stream) {
  const Dims d = attention_dims(qkv, n_head);
  check_cuda(dqkv, "dqkv");
  check_cuda(dout, "dout");
  check_cuda(qkv, "qkv");
  check_cuda(out, "out");
  check_cuda(lse, "lse");
  const int64_t n_out = static_cast<int64_t>(d.B) * d.T * d.C, n_stat = static_cast<int64_t>(d.B) * d.NH * d.T;
  ZT_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype == DType::f32, "attention_bwd: dqkv must be ",
           qkv.shape.str(), " f32, got ", dqkv.shape.str(), " ", dtype_name(dqkv.dtype));
  ZT_CHECK(dout.numel() == n_out && dout.dtype == DType::f32, "attention_bwd: dout must be (B, T, C) f32");
  ZT_CHECK(out.numel() == n_out && out.dtype == qkv.dtype, "attention_bwd: out must be (B, T, C) in ",
           dtype_name(qkv.dtype));
  ZT_CHECK(lse.numel() == n_stat && lse.dtype == DType::f32, "attention_bwd: lse must be (B, n_head, T) f32");

  const ArenaScope scope(ws);
  const Tensor delta = ws.alloc(DType::f32, Shape{d.B, d.NH, d.T});
  check_cuda(delta, "workspace arena");
  const int dp = padded_head(d.hs);
  attn::BwdArgs a{d, qkv.data, nullptr, static_cast<const float*>(lse.data),
                  static_cast<const float*>(delta.data), static_cast<float*>(dqkv.data)};
  const float* g = static_cast<const float*>(dout.data);
  float* dl = static_cast<float*>(delta.data);
  switch (qkv.dtype) {
    case DType::f32:
      launch_prep<float>(g, out.data, nullptr, dl, d, stream);
      a.dout_s = dout.data;
      attn::bwd_simt_f32(a, dp, stream);
      break;
    case DType::bf16:
    case DType::f16: {
      const Tensor dout_s = ws.alloc(qkv.dtype, Shape{d.B, d.T, d.C});
      a.dout_s = dout_s.data;
      const bool vec = d.hs % 8 == 0 && aligned16(qkv.data) && aligned16(dout_s.data);
      if (qkv.dtype == DType::bf16) {
        launch_prep<__nv_bfloat16>(g, out.data, dout_s.data, dl, d, stream);
        attn::bwd_mma_bf16(a, dp, vec, stream);
      } else {
        launch_prep<__half>(g, out.data, dout_s.data, dl, d, stream);
        attn::bwd_mma_f16(a, dp, vec, stream);
      }
      break;
    }
    default:
      ZT_THROW("attention_bwd on CUDA: storage must be f32, bf16 or f16, got ", dtype_name(qkv.dtype));
  }
}

}  // namespace zt
