// Attention forward and backward for f32 storage with fp32 arithmetic on the
// CUDA cores (tensor cores would round to tf32 and miss fp32 parity).
//
// [Note: row groups] A row (a query in forward and dq, a key in dkdv) is held
// by G = DP / 16 consecutive lanes, 16 of its DP (padded) dimensions each, in
// registers; a dot product is 16 FMAs per lane and a butterfly over the G
// lanes. Lane `part` of a group holds dimensions 4*G*j + 4*part + i (j, i <
// 4), so the G lanes of a group read G consecutive float4s of a shared-memory
// row: no bank conflicts, and every other group of the warp reads the same
// addresses (broadcast). All threads of a block walk the same tiles and
// elements, so the shuffles never diverge; masking is done with selects.
#include <cmath>

#include "core/error.hpp"
#include "modules/cuda/attention_detail.cuh"

namespace zt::attn {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 32;  // rows of the tile streamed through shared memory

template <int G>
struct RowGroup {
  static constexpr int DP = 16 * G;
  int part;
  __device__ explicit RowGroup(int p) : part(p) {}
  __device__ int dim(int j, int i) const { return 4 * G * j + 4 * part + i; }
  // 16 of the row's elements from global memory (zero past hs), times mul.
  __device__ void load(float v[16], const float* row, int hs, bool valid, float mul) const {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int d = dim(j, i);
        v[4 * j + i] = valid && d < hs ? row[d] * mul : 0.0f;
      }
  }
  __device__ void store(float* row, const float v[16], int hs, float mul) const {
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int d = dim(j, i);
        if (d < hs) row[d] = v[4 * j + i] * mul;
      }
  }
  // Partial dot product of v with a shared-memory row (DP floats, 16-byte aligned).
  __device__ float dot(const float v[16], const float* srow) const {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 x = *reinterpret_cast<const float4*>(srow + 4 * G * j + 4 * part);
      acc = fmaf(v[4 * j], x.x, acc);
      acc = fmaf(v[4 * j + 1], x.y, acc);
      acc = fmaf(v[4 * j + 2], x.z, acc);
      acc = fmaf(v[4 * j + 3], x.w, acc);
    }
    return acc;
  }
  // acc += w * srow
  __device__ void axpy(float acc[16], float w, const float* srow) const {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 x = *reinterpret_cast<const float4*>(srow + 4 * G * j + 4 * part);
      acc[4 * j] = fmaf(w, x.x, acc[4 * j]);
      acc[4 * j + 1] = fmaf(w, x.y, acc[4 * j + 1]);
      acc[4 * j + 2] = fmaf(w, x.z, acc[4 * j + 2]);
      acc[4 * j + 3] = fmaf(w, x.w, acc[4 * j + 3]);
    }
  }
  __device__ static float sum(float x) {
#pragma unroll
    for (int off = G / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
  }
};

// grid (B * NH, ceil(T / RB)), RB = 128 / G queries per block; blockIdx.y = 0
// takes the last (longest) query block.
template <int G>
__global__ void __launch_bounds__(kThreads) fwd_simt_kernel(FwdArgs a) {
  using RG = RowGroup<G>;
  constexpr int DP = RG::DP, RB = kThreads / G;
  __shared__ __align__(16) float ks[kTile * DP];
  __shared__ __align__(16) float vs[kTile * DP];
  const int T = a.d.T, hs = a.d.hs, NH = a.d.NH;
  const int64_t C = a.d.C, ldq = a.d.ld_q, ldkv = a.d.ld_kv;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH, hk = h / a.d.group();
  const int r0 = (gridDim.y - 1 - blockIdx.y) * RB;
  const int64_t row_b = static_cast<int64_t>(b) * T;
  const float* qg = static_cast<const float*>(a.q) + row_b * ldq + static_cast<int64_t>(h) * hs;
  const float* kg = static_cast<const float*>(a.k) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const float* vg = static_cast<const float*>(a.v) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const RG rg(threadIdx.x % G);
  const int t = r0 + threadIdx.x / G;
  const int ds = doc_first(a.doc_start, b, T, t);
  const float sl2 = kLog2e / sqrtf(static_cast<float>(hs));

  float q[16], o[16];
  rg.load(q, qg + static_cast<int64_t>(t) * ldq, hs, t < T, sl2);  // scores come out in log2 units
#pragma unroll
  for (int i = 0; i < 16; ++i) o[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const int last = min(r0 + RB, T) - 1;  // last query of the block
  for (int k0 = doc_first(a.doc_start, b, T, r0) / kTile * kTile; k0 <= last; k0 += kTile) {
    __syncthreads();
    load_tile_scalar<kTile, DP, DP, kThreads>(ks, kg, ldkv, k0, T, hs);
    load_tile_scalar<kTile, DP, DP, kThreads>(vs, vg, ldkv, k0, T, hs);
    __syncthreads();
    const int n = min(kTile, last - k0 + 1);
    for (int c = 0; c < n; c += 8) {  // 8 keys per online-softmax step
      float s[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) s[u] = RG::sum(rg.dot(q, ks + (c + u) * DP));
      float mx = m;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int key = k0 + c + u;
        if (key > t || key >= T || key < ds) s[u] = -INFINITY;
        mx = fmaxf(mx, s[u]);
      }
      // Until the row reaches its document's first key, mx is -inf:
      // subtracting mu = 0 keeps o, l and p at 0 (no -inf - -inf).
      const float mu = mx == -INFINITY ? 0.0f : mx;
      const float al = exp2f(m - mu);
      m = mx;
      l *= al;
#pragma unroll
      for (int i = 0; i < 16; ++i) o[i] *= al;
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float p = exp2f(s[u] - mu);
        l += p;
        rg.axpy(o, p, vs + (c + u) * DP);
      }
    }
  }
  if (t < T) {
    rg.store(static_cast<float*>(a.out) + (static_cast<int64_t>(b) * T + t) * C + static_cast<int64_t>(h) * hs, o,
             hs, 1.0f / l);
    if (rg.part == 0) a.lse[(static_cast<int64_t>(b) * NH + h) * T + t] = m * kLn2 + logf(l);
  }
}

// dK, dV: a thread group per key of a key/value head, RB keys per block,
// walking the query tiles of each query head of the group from the block's
// first key on. blockIdx.y = 0 (keys 0..) has the most work.
template <int G>
__global__ void __launch_bounds__(kThreads) dkdv_simt_kernel(BwdArgs a) {
  using RG = RowGroup<G>;
  constexpr int DP = RG::DP, RB = kThreads / G;
  __shared__ __align__(16) float qs[kTile * DP];
  __shared__ __align__(16) float dos[kTile * DP];
  __shared__ float lse2_s[kTile], delta_s[kTile];
  __shared__ int ds_s[kTile];
  const int T = a.d.T, hs = a.d.hs, NH = a.d.NH, NKV = a.d.NKV;
  const int64_t C = a.d.C, ldq = a.d.ld_q, ldkv = a.d.ld_kv;
  const int b = blockIdx.x / NKV, hk = blockIdx.x % NKV;
  const int k0 = blockIdx.y * RB;
  const int64_t row_b = static_cast<int64_t>(b) * T;
  const RG rg(threadIdx.x % G);
  const int c = k0 + threadIdx.x / G;  // this group's key
  const float scale = 1.0f / sqrtf(static_cast<float>(hs)), sl2 = scale * kLog2e;
  const int q_end = doc_query_end(a.doc_start, b, T, min(k0 + RB, T) - 1);

  float k[16], v[16], dk[16], dv[16];
  const int64_t kv_off = row_b * ldkv + static_cast<int64_t>(hk) * hs + static_cast<int64_t>(c) * ldkv;
  rg.load(k, static_cast<const float*>(a.k) + kv_off, hs, c < T, 1.0f);
  rg.load(v, static_cast<const float*>(a.v) + kv_off, hs, c < T, 1.0f);
#pragma unroll
  for (int i = 0; i < 16; ++i) dk[i] = dv[i] = 0.0f;

  // Every query head of this key/value head's group, in order.
  for (int h = hk * a.d.group(); h < (hk + 1) * a.d.group(); ++h)
  for (int q0 = k0 / kTile * kTile; q0 < q_end; q0 += kTile) {
    const int64_t head = static_cast<int64_t>(h) * hs;
    const int64_t stat = (static_cast<int64_t>(b) * NH + h) * T;
    __syncthreads();
    load_tile_scalar<kTile, DP, DP, kThreads>(qs, static_cast<const float*>(a.q) + row_b * ldq + head, ldq, q0, T, hs);
    load_tile_scalar<kTile, DP, DP, kThreads>(dos, static_cast<const float*>(a.dout_s) + row_b * C + head, C, q0, T,
                                              hs);
    if (threadIdx.x < kTile) {
      const int t = q0 + threadIdx.x;
      lse2_s[threadIdx.x] = t < T ? a.lse[stat + t] * kLog2e : 0.0f;
      delta_s[threadIdx.x] = t < T ? a.delta[stat + t] : 0.0f;
      ds_s[threadIdx.x] = doc_first(a.doc_start, b, T, t);
    }
    __syncthreads();
#pragma unroll 4
    for (int u = 0; u < kTile; ++u) {
      const float* qrow = qs + u * DP;
      const float* dorow = dos + u * DP;
      const float s = RG::sum(rg.dot(k, qrow));
      const float dp = RG::sum(rg.dot(v, dorow));
      const int t = q0 + u;
      const float p = (t >= c && t < T && c >= ds_s[u]) ? exp2f(s * sl2 - lse2_s[u]) : 0.0f;
      const float ds = p * (dp - delta_s[u]);
      rg.axpy(dv, p, dorow);
      rg.axpy(dk, ds, qrow);
    }
  }
  if (c < T) {
    const int64_t off = (row_b + c) * a.ld_dkv + static_cast<int64_t>(hk) * hs;
    rg.store(a.dk + off, dk, hs, scale);
    rg.store(a.dv + off, dv, hs, 1.0f);
  }
}

// dQ: a thread group per query, walking the key tiles up to the block's last
// query. blockIdx.y = 0 takes the last (longest) query block.
template <int G>
__global__ void __launch_bounds__(kThreads) dq_simt_kernel(BwdArgs a) {
  using RG = RowGroup<G>;
  constexpr int DP = RG::DP, RB = kThreads / G;
  __shared__ __align__(16) float ks[kTile * DP];
  __shared__ __align__(16) float vs[kTile * DP];
  const int T = a.d.T, hs = a.d.hs, NH = a.d.NH;
  const int64_t C = a.d.C, ldq = a.d.ld_q, ldkv = a.d.ld_kv;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH, hk = h / a.d.group();
  const int64_t head = static_cast<int64_t>(h) * hs, row_b = static_cast<int64_t>(b) * T;
  const int r0 = (gridDim.y - 1 - blockIdx.y) * RB;
  const float* qg = static_cast<const float*>(a.q) + row_b * ldq + head;
  const float* kg = static_cast<const float*>(a.k) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const float* vg = static_cast<const float*>(a.v) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const float* dog = static_cast<const float*>(a.dout_s) + row_b * C + head;
  const int64_t stat = (static_cast<int64_t>(b) * NH + h) * T;
  const RG rg(threadIdx.x % G);
  const int t = r0 + threadIdx.x / G;
  const int ds = doc_first(a.doc_start, b, T, t);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs)), sl2 = scale * kLog2e;

  float q[16], dO[16], dq[16];
  rg.load(q, qg + static_cast<int64_t>(t) * ldq, hs, t < T, 1.0f);
  rg.load(dO, dog + static_cast<int64_t>(t) * C, hs, t < T, 1.0f);
#pragma unroll
  for (int i = 0; i < 16; ++i) dq[i] = 0.0f;
  const float lse2 = t < T ? a.lse[stat + t] * kLog2e : 0.0f;
  const float delta = t < T ? a.delta[stat + t] : 0.0f;

  const int last = min(r0 + RB, T) - 1;
  for (int k0 = doc_first(a.doc_start, b, T, r0) / kTile * kTile; k0 <= last; k0 += kTile) {
    __syncthreads();
    load_tile_scalar<kTile, DP, DP, kThreads>(ks, kg, ldkv, k0, T, hs);
    load_tile_scalar<kTile, DP, DP, kThreads>(vs, vg, ldkv, k0, T, hs);
    __syncthreads();
    const int n = min(kTile, last - k0 + 1);
#pragma unroll 4
    for (int u = 0; u < n; ++u) {
      const float* krow = ks + u * DP;
      const float s = RG::sum(rg.dot(q, krow));
      const float dp = RG::sum(rg.dot(dO, vs + u * DP));
      const int key = k0 + u;
      const float p = (key <= t && key < T && key >= ds) ? exp2f(s * sl2 - lse2) : 0.0f;
      rg.axpy(dq, p * (dp - delta), krow);
    }
  }
  if (t < T) rg.store(a.dq + (row_b + t) * a.ld_dq + head, dq, hs, scale);
}

template <int G>
void launch_fwd(const FwdArgs& a, cudaStream_t s) {
  constexpr int RB = kThreads / G;
  const dim3 grid(static_cast<unsigned>(a.d.B * a.d.NH), static_cast<unsigned>((a.d.T + RB - 1) / RB));
  fwd_simt_kernel<G><<<grid, kThreads, 0, s>>>(a);
  ZT_CUDA_CHECK_LAUNCH();
}

template <int G>
void launch_bwd(const BwdArgs& a, cudaStream_t s) {
  constexpr int RB = kThreads / G;
  const unsigned blocks = static_cast<unsigned>((a.d.T + RB - 1) / RB);
  dkdv_simt_kernel<G><<<dim3(static_cast<unsigned>(a.d.B * a.d.NKV), blocks), kThreads, 0, s>>>(a);
  ZT_CUDA_CHECK_LAUNCH();
  dq_simt_kernel<G><<<dim3(static_cast<unsigned>(a.d.B * a.d.NH), blocks), kThreads, 0, s>>>(a);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void fwd_simt_f32(const FwdArgs& a, int dp, cudaStream_t s) {
  switch (dp) {
    case 16: launch_fwd<1>(a, s); return;
    case 32: launch_fwd<2>(a, s); return;
    case 64: launch_fwd<4>(a, s); return;
    case 128: launch_fwd<8>(a, s); return;
    default: ZT_THROW("attention: no kernel for padded head size ", dp);
  }
}

void bwd_simt_f32(const BwdArgs& a, int dp, cudaStream_t s) {
  switch (dp) {
    case 16: launch_bwd<1>(a, s); return;
    case 32: launch_bwd<2>(a, s); return;
    case 64: launch_bwd<4>(a, s); return;
    case 128: launch_bwd<8>(a, s); return;
    default: ZT_THROW("attention: no kernel for padded head size ", dp);
  }
}

}  // namespace zt::attn
