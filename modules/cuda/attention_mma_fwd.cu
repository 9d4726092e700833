// Attention forward on tensor cores (bf16 / f16 storage), FlashAttention-2
// style. A block of 4 warps owns 64 * MT queries of one (batch, head); each
// warp owns 16 * MT of them (MT = m_tiles, 1 for now) and walks the key
// tiles 0..diagonal, keeping its scores, running max, running sum and output
// in registers (see [Note: mma fragments] in attention_detail.cuh). K and V
// tiles are double-buffered: the copies of tile j + 1 are in flight while
// tile j is computed.
#include <cmath>

#include "core/error.hpp"
#include "modules/cuda/attention_detail.cuh"
#include "runtime/cuda/cuda_check.hpp"

namespace zt::attn {
namespace {

constexpr int kThreads = 128;
constexpr int kBc = 64;  // keys per tile

// m-tiles (16 query rows each) per warp. Two would halve the shared memory
// read per tensor-core product (each K / V fragment serving both), but at
// D = 64 they took 248 registers (2 blocks per SM instead of 4) and the
// forward ran 35% slower on an H200 (0.227 vs 0.168 ms at B 16, T 1024,
// H 12); kept as a parameter for a future register-leaner variant.
template <int D>
constexpr int m_tiles() {
  return 1;
}
template <int D>
constexpr int block_rows() {
  return 64 * m_tiles<D>();
}
template <int D>
constexpr size_t fwd_smem_bytes() {
  return static_cast<size_t>(block_rows<D>() + 4 * kBc) * (D + 8) * 2;  // q, 2 x (k, v)
}

// grid (B * NH, ceil(T / BR)), BR = 64 * MT; blockIdx.y = 0 takes the last (longest) query
// tile so the heaviest blocks start first.
template <typename S, int D>
__global__ void __launch_bounds__(kThreads) fwd_mma_kernel(FwdArgs a, bool vec) {
  constexpr int MT = m_tiles<D>(), BR = block_rows<D>();
  constexpr int SD = D + 8;    // +16 bytes per row: conflict-free ldmatrix
  constexpr int NT = kBc / 8;  // score n-tiles per m-tile
  constexpr int DT = D / 8;    // output n-tiles per m-tile
  extern __shared__ __align__(16) unsigned char smem[];
  S* qs = reinterpret_cast<S*>(smem);  // (BR, SD)
  S* kbuf = qs + BR * SD;              // 2 x (64, SD)
  S* vbuf = kbuf + 2 * kBc * SD;       // 2 x (64, SD)

  const int T = a.d.T, hs = a.d.hs, NH = a.d.NH;
  const int64_t C = a.d.C, C3 = 3 * C;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH;
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BR;
  const S* qg = static_cast<const S*>(a.qkv) + static_cast<int64_t>(b) * T * C3 + static_cast<int64_t>(h) * hs;
  const S* kg = qg + C;
  const S* vg = qg + 2 * C;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
  const float sl2 = kLog2e / sqrtf(static_cast<float>(hs));  // scores in log2 units
  const int n_kt = (min(q0 + BR, T) - 1) / kBc + 1;           // key tiles up to the diagonal
  const int wrow = q0 + warp * 16 * MT;                         // first query row of this warp

  load_tile<BR, D, SD, kThreads>(qs, qg, C3, q0, T, hs, vec);
  cp_async_commit();
  load_tile<kBc, D, SD, kThreads>(kbuf, kg, C3, 0, T, hs, vec);
  load_tile<kBc, D, SD, kThreads>(vbuf, vg, C3, 0, T, hs, vec);
  cp_async_commit();
  cp_async_wait<1>();  // q has landed
  __syncthreads();
  uint32_t qa[MT][D / 16][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) ldsm_a<SD>(qa[mt][kk], qs, warp * 16 * MT + mt * 16, kk * 16, lane);

  float o[MT][DT][4];
  float mr[MT][2], lr[MT][2];  // running max (log2 units) and per-lane partial sums, rows g and g + 8
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int i = 0; i < DT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    mr[mt][0] = mr[mt][1] = -INFINITY;
    lr[mt][0] = lr[mt][1] = 0.0f;
  }

  for (int kt = 0; kt < n_kt; ++kt) {
    const int k0 = kt * kBc;
    const S* ks = kbuf + (kt & 1) * kBc * SD;
    const S* vs = vbuf + (kt & 1) * kBc * SD;
    __syncthreads();  // every warp is done with tile kt - 1, whose buffers are refilled now
    if (kt + 1 < n_kt) {
      const int nb = ((kt + 1) & 1) * kBc * SD;
      load_tile<kBc, D, SD, kThreads>(kbuf + nb, kg, C3, k0 + kBc, T, hs, vec);
      load_tile<kBc, D, SD, kThreads>(vbuf + nb, vg, C3, k0 + kBc, T, hs, vec);
    }
    cp_async_commit();   // possibly empty: keeps one group per iteration
    cp_async_wait<1>();  // tile kt has landed (tile kt + 1 may be in flight)
    __syncthreads();
    if (k0 > wrow + 16 * MT - 1) continue;  // every key of the tile is after every row of the warp

    float s[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NT; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
      for (int nn = 0; nn < NT / 2; ++nn) {
        uint32_t kb[4];
        ldsm_b<SD>(kb, ks, nn * 16, kk * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma<S>(s[mt][2 * nn], qa[mt][kk], kb);
          mma<S>(s[mt][2 * nn + 1], qa[mt][kk], kb + 2);
        }
      }
    }
    // Scale, mask (causal and keys >= T), online softmax per row.
    const bool need_mask = (k0 + kBc - 1 > wrow) || (k0 + kBc > T);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const int row0 = wrow + mt * 16 + g, row1 = row0 + 8;
      float mx0 = mr[mt][0], mx1 = mr[mt][1];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float v = s[mt][nt][e] * sl2;
          if (need_mask) {
            const int key = k0 + nt * 8 + 2 * tq + (e & 1);
            if (key > (e < 2 ? row0 : row1) || key >= T) v = -INFINITY;
          }
          s[mt][nt][e] = v;
        }
        mx0 = fmaxf(mx0, fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
      // The four lanes of a row group (same g) hold a row between them.
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      // Key 0 is in tile 0, valid for every row and never skipped, so mx is
      // finite from the first tile on and exp2(-inf - mx) = 0 below.
      const float al0 = exp2f(mr[mt][0] - mx0), al1 = exp2f(mr[mt][1] - mx1);
      mr[mt][0] = mx0;
      mr[mt][1] = mx1;
      float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        s[mt][nt][0] = exp2f(s[mt][nt][0] - mx0);
        s[mt][nt][1] = exp2f(s[mt][nt][1] - mx0);
        s[mt][nt][2] = exp2f(s[mt][nt][2] - mx1);
        s[mt][nt][3] = exp2f(s[mt][nt][3] - mx1);
        rs0 += s[mt][nt][0] + s[mt][nt][1];
        rs1 += s[mt][nt][2] + s[mt][nt][3];
      }
      lr[mt][0] = lr[mt][0] * al0 + rs0;  // reduced across the row's four lanes at the end
      lr[mt][1] = lr[mt][1] * al1 + rs1;
#pragma unroll
      for (int i = 0; i < DT; ++i) {
        o[mt][i][0] *= al0;
        o[mt][i][1] *= al0;
        o[mt][i][2] *= al1;
        o[mt][i][3] *= al1;
      }
    }
    // O += P V, P rounded to the storage type.
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_to_a<S>(pa[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t vb[4];
        ldsm_bt<SD>(vb, vs, kk * 16, dd * 16, lane);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma<S>(o[mt][2 * dd], pa[mt], vb);
          mma<S>(o[mt][2 * dd + 1], pa[mt], vb + 2);
        }
      }
    }
  }

  S* og = static_cast<S*>(a.out) + static_cast<int64_t>(b) * T * C + static_cast<int64_t>(h) * hs;
  float* lg = a.lse + (static_cast<int64_t>(b) * NH + h) * T;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float l0 = lr[mt][0], l1 = lr[mt][1];
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
    const int row0 = wrow + mt * 16 + g, row1 = row0 + 8;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int d = dt * 8 + 2 * tq + e;
        if (d < hs) {
          if (row0 < T) og[static_cast<int64_t>(row0) * C + d] = from_f32<S>(o[mt][dt][e] * inv0);
          if (row1 < T) og[static_cast<int64_t>(row1) * C + d] = from_f32<S>(o[mt][dt][2 + e] * inv1);
        }
      }
    }
    if (tq == 0) {
      if (row0 < T) lg[row0] = mr[mt][0] * kLn2 + logf(l0);
      if (row1 < T) lg[row1] = mr[mt][1] * kLn2 + logf(l1);
    }
  }
}

template <typename S, int D>
void launch_fwd(const FwdArgs& a, bool vec, cudaStream_t stream) {
  constexpr size_t smem = fwd_smem_bytes<D>();
  constexpr int BR = block_rows<D>();
  ZT_CUDA_CHECK(cudaFuncSetAttribute(fwd_mma_kernel<S, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>(a.d.B * a.d.NH), static_cast<unsigned>((a.d.T + BR - 1) / BR));
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
