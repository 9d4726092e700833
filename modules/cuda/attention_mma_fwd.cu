// Attention forward on tensor cores (bf16 / f16 storage), FlashAttention-2
// style. One block of 4 warps owns 64 queries of one (batch, head); each warp
// owns 16 of them and walks the key tiles 0..diagonal, keeping its scores,
// running max, running sum and output in registers (see [Note: mma
// fragments] in attention_detail.cuh). K and V tiles are double-buffered:
// the copies of tile j + 1 are in flight while tile j is computed.
#include <cmath>

#include "core/error.hpp"
#include "modules/cuda/attention_detail.cuh"

namespace zt::attn {
namespace {

constexpr int kThreads = 128;
constexpr int kBr = 64;  // queries per block (16 per warp)
constexpr int kBc = 64;  // keys per tile

// [Note: one m-tile per warp] Two m-tiles (32 query rows) per warp would halve
// the shared memory read per tensor-core product, each K / V fragment serving
// both; tried at D = 64 it took 248 registers (2 blocks per SM instead of 4)
// and the forward ran 35% slower on an H200 (0.227 vs 0.168 ms at B 16,
// T 1024, H 12).
template <int D>
constexpr size_t fwd_smem_bytes() {
  return static_cast<size_t>(kBr + 4 * kBc) * (D + 8) * 2;  // q, 2 x (k, v)
}

// grid (B * NH, ceil(T / 64)); blockIdx.y = 0 takes the last (longest) query
// tile so the heaviest blocks start first.
template <typename S, int D>
__global__ void __launch_bounds__(kThreads) fwd_mma_kernel(FwdArgs a, bool vec) {
  constexpr int SD = D + 8;    // +16 bytes per row: conflict-free ldmatrix
  constexpr int NT = kBc / 8;  // score n-tiles per warp
  constexpr int DT = D / 8;    // output n-tiles per warp
  extern __shared__ __align__(16) unsigned char smem[];
  S* qs = reinterpret_cast<S*>(smem);  // (64, SD)
  S* kbuf = qs + kBr * SD;             // 2 x (64, SD)
  S* vbuf = kbuf + 2 * kBc * SD;       // 2 x (64, SD)

  const int T = a.d.T, hs = a.d.hs, NH = a.d.NH;
  const int64_t C = a.d.C, ldq = a.d.ld_q, ldkv = a.d.ld_kv;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH, hk = h / a.d.group();
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int q0 = qt * kBr;
  const int64_t row_b = static_cast<int64_t>(b) * T;
  const S* qg = static_cast<const S*>(a.q) + row_b * ldq + static_cast<int64_t>(h) * hs;
  const S* kg = static_cast<const S*>(a.k) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const S* vg = static_cast<const S*>(a.v) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
  const float sl2 = kLog2e / sqrtf(static_cast<float>(hs));  // scores in log2 units
  // Key tiles before the tile holding the first query's document start are
  // masked for every query of this tile: skipped.
  const int kt0 = doc_first(a.doc_start, b, T, q0) / kBc;
  const int ds_last = doc_first(a.doc_start, b, T, q0 + kBr - 1);

  load_tile<kBr, D, SD, kThreads>(qs, qg, ldq, q0, T, hs, vec);
  cp_async_commit();
  load_tile<kBc, D, SD, kThreads>(kbuf, kg, ldkv, kt0 * kBc, T, hs, vec);
  load_tile<kBc, D, SD, kThreads>(vbuf, vg, ldkv, kt0 * kBc, T, hs, vec);
  cp_async_commit();
  cp_async_wait<1>();  // q has landed
  __syncthreads();
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldsm_a<SD>(qa[kk], qs, warp * 16, kk * 16, lane);

  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g and g + 8
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const int ds0 = doc_first(a.doc_start, b, T, row0), ds1 = doc_first(a.doc_start, b, T, row1);

  for (int kt = kt0; kt <= qt; ++kt) {  // kBc == kBr: key tiles up to the diagonal
    const int k0 = kt * kBc, cur = (kt - kt0) & 1;
    const S* ks = kbuf + cur * kBc * SD;
    const S* vs = vbuf + cur * kBc * SD;
    __syncthreads();  // every warp is done with the previous tile, whose buffers are refilled now
    if (kt < qt) {
      const int nb = (cur ^ 1) * kBc * SD;
      load_tile<kBc, D, SD, kThreads>(kbuf + nb, kg, ldkv, k0 + kBc, T, hs, vec);
      load_tile<kBc, D, SD, kThreads>(vbuf + nb, vg, ldkv, k0 + kBc, T, hs, vec);
    }
    cp_async_commit();   // possibly empty: keeps one group per iteration
    cp_async_wait<1>();  // tile kt has landed (tile kt + 1 may be in flight)
    __syncthreads();

    float s[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < NT / 2; ++nn) {
        uint32_t kb[4];
        ldsm_b<SD>(kb, ks, nn * 16, kk * 16, lane);
        mma<S>(s[2 * nn], qa[kk], kb);
        mma<S>(s[2 * nn + 1], qa[kk], kb + 2);
      }
    }
    // Scale, mask (causal, other documents, keys >= T), running max per row.
    const bool need_mask = (k0 + kBc > q0) || (k0 + kBc > T) || (k0 < ds_last);
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float v = s[nt][e] * sl2;
        if (need_mask) {
          const int key = k0 + nt * 8 + 2 * tq + (e & 1);
          const int row = e < 2 ? row0 : row1;
          if (key > row || key >= T || key < (e < 2 ? ds0 : ds1)) v = -INFINITY;
        }
        s[nt][e] = v;
      }
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    // The four lanes of a row group (same g) hold a row between them.
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    // A row whose document starts in a later tile has seen only masked keys
    // (mx = -inf): subtracting mu = 0 instead keeps its o, l and p at 0 (no
    // NaN from -inf - -inf). Every row sees its own key, so m ends finite.
    const float mu0 = mx0 == -INFINITY ? 0.0f : mx0, mu1 = mx1 == -INFINITY ? 0.0f : mx1;
    const float al0 = exp2f(m0 - mu0), al1 = exp2f(m1 - mu1);
    m0 = mx0;
    m1 = mx1;
    float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - mu0);
      s[nt][1] = exp2f(s[nt][1] - mu0);
      s[nt][2] = exp2f(s[nt][2] - mu1);
      s[nt][3] = exp2f(s[nt][3] - mu1);
      rs0 += s[nt][0] + s[nt][1];
      rs1 += s[nt][2] + s[nt][3];
    }
    l0 = l0 * al0 + rs0;  // per-lane partial sums; reduced across the row at the end
    l1 = l1 * al1 + rs1;
#pragma unroll
    for (int i = 0; i < DT; ++i) {
      o[i][0] *= al0;
      o[i][1] *= al0;
      o[i][2] *= al1;
      o[i][3] *= al1;
    }
    // O += P V, P rounded to the storage type.
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      uint32_t pa[4];
      c_to_a<S>(pa, s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t vb[4];
        ldsm_bt<SD>(vb, vs, kk * 16, dd * 16, lane);
        mma<S>(o[2 * dd], pa, vb);
        mma<S>(o[2 * dd + 1], pa, vb + 2);
      }
    }
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  S* og = static_cast<S*>(a.out) + static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * hs;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = dt * 8 + 2 * tq + e;
      if (d < hs) {
        if (row0 < T) og[static_cast<int64_t>(row0) * C + d] = from_f32<S>(o[dt][e] * inv0);
        if (row1 < T) og[static_cast<int64_t>(row1) * C + d] = from_f32<S>(o[dt][2 + e] * inv1);
      }
    }
  }
  if (tq == 0) {
    float* lg = a.lse + (static_cast<int64_t>(b) * NH + h) * T;
    if (row0 < T) lg[row0] = m0 * kLn2 + logf(l0);
    if (row1 < T) lg[row1] = m1 * kLn2 + logf(l1);
  }
}

template <typename S, int D>
void launch_fwd(const FwdArgs& a, bool vec, cudaStream_t stream) {
  constexpr size_t smem = fwd_smem_bytes<D>();
  ZT_CUDA_CHECK(cudaFuncSetAttribute(fwd_mma_kernel<S, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(a.d.B * a.d.NH), static_cast<unsigned>((a.d.T + kBr - 1) / kBr));
  fwd_mma_kernel<S, D><<<grid, kThreads, smem, stream>>>(a, vec);
  ZT_CUDA_CHECK_LAUNCH();
}

template <typename S>
void dispatch_fwd(const FwdArgs& a, int dp, bool vec, cudaStream_t stream) {
  switch (dp) {
    case 16: launch_fwd<S, 16>(a, vec, stream); return;
    case 32: launch_fwd<S, 32>(a, vec, stream); return;
    case 64: launch_fwd<S, 64>(a, vec, stream); return;
    case 128: launch_fwd<S, 128>(a, vec, stream); return;
    default: ZT_THROW("attention: no kernel for padded head size ", dp);
  }
}

}  // namespace

void fwd_mma_bf16(const FwdArgs& a, int dp, bool vec, cudaStream_t s) { dispatch_fwd<__nv_bfloat16>(a, dp, vec, s); }
void fwd_mma_f16(const FwdArgs& a, int dp, bool vec, cudaStream_t s) { dispatch_fwd<__half>(a, dp, vec, s); }

}  // namespace zt::attn
