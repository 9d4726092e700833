// Attention backward on tensor cores (bf16 / f16 storage), FlashAttention-2's
// algorithm split in two kernels so that no gradient needs atomics:
//   dkdv: a block owns 64 keys of a key/value head and walks the query tiles
//         of its query heads from the diagonal on, accumulating
//         dK = scale * dS^T Q and dV = P^T dO;
//   dq:   a block owns 64 queries and walks the key tiles up to the
//         diagonal, accumulating dQ = scale * dS K.
// Both recompute P = exp(q.k * scale - lse) and dP = dO V^T; with
// delta = rowsum(dO * O), dS = P (dP - delta). This costs two extra
// products per pair (7 instead of 5) and buys bit-reproducible gradients.
// Fragment layouts: [Note: mma fragments] in attention_detail.cuh. The tiles a
// block walks over are double-buffered: the copies of tile j + 1 are in
// flight while tile j is computed.
#include <cmath>

#include "core/error.hpp"
#include "modules/cuda/attention_detail.cuh"

namespace zt::attn {
namespace {

constexpr int kThreads = 128;
constexpr int kTile = 64;  // keys per dkdv block, queries per dq block (16 per warp)

// Query tile of the dkdv kernel and key tile of the dq kernel: 32 at D = 128
// keeps the fp32 accumulators (dK, dV: 2 * D / 2 per thread) off local memory.
template <int D>
constexpr int inner_tile() {
  return D >= 128 ? 32 : 64;
}
// Own tile (two matrices) + two buffers of the walked tile (two matrices),
// and for dkdv two buffers of (lse, delta, doc_start).
template <int D>
constexpr size_t dkdv_smem_bytes() {
  return static_cast<size_t>(2 * kTile + 4 * inner_tile<D>()) * (D + 8) * 2 + 6 * inner_tile<D>() * 4;
}
template <int D>
constexpr size_t dq_smem_bytes() {
  return static_cast<size_t>(2 * kTile + 4 * inner_tile<D>()) * (D + 8) * 2;
}

// grid (B * NKV, ceil(T / 64)); blockIdx.y = 0 owns keys 0..63, the block
// with the most query tiles, so the heaviest blocks start first. A block owns
// 64 keys of one key/value head and walks the query tiles of every query head
// of its group (GQA), so dK and dV sum over the group in registers.
template <typename S, int D>
__global__ void __launch_bounds__(kThreads, D <= 64 ? 3 : 1) dkdv_mma_kernel(BwdArgs a, bool vec) {
  constexpr int SD = D + 8, BQ = inner_tile<D>(), NT = BQ / 8, DT = D / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  S* ks = reinterpret_cast<S*>(smem);  // (64, SD)
  S* vs = ks + kTile * SD;             // (64, SD)
  S* qbuf = vs + kTile * SD;           // 2 x (BQ, SD)
  S* dobuf = qbuf + 2 * BQ * SD;       // 2 x (BQ, SD)
  float* lse2_buf = reinterpret_cast<float*>(dobuf + 2 * BQ * SD);  // 2 x (BQ): lse in log2 units
  float* delta_buf = lse2_buf + 2 * BQ;                               // 2 x (BQ)
  int* ds_buf = reinterpret_cast<int*>(delta_buf + 2 * BQ);          // 2 x (BQ): doc_start of each query

  const int T = a.d.T, hs = a.d.hs, NH = a.d.NH, NKV = a.d.NKV, G = a.d.group();
  const int64_t C = a.d.C, ldq = a.d.ld_q, ldkv = a.d.ld_kv;
  const int b = blockIdx.x / NKV, hk = blockIdx.x % NKV;
  const int k0 = blockIdx.y * kTile;
  const int64_t row_b = static_cast<int64_t>(b) * T;
  const S* kg = static_cast<const S*>(a.k) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const S* vg = static_cast<const S*>(a.v) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs)), sl2 = scale * kLog2e;
  // Queries k0 .. q_end - 1 may see these keys (causal; documents).
  const int q_end = doc_query_end(a.doc_start, b, T, min(k0 + kTile, T) - 1);
  const int nq = (q_end - k0 + BQ - 1) / BQ;  // query tiles per head
  const int total = nq * G;                   // (head, query tile) pairs, head-major

  // Query tile `it` of the walk into buffer `buf`; no commit.
  auto load_queries = [&](int it, int buf) {
    const int h = hk * G + it / nq, q0 = k0 + (it % nq) * BQ;
    const int64_t head = static_cast<int64_t>(h) * hs;
    load_tile<BQ, D, SD, kThreads>(qbuf + buf * BQ * SD, static_cast<const S*>(a.q) + row_b * ldq + head, ldq, q0,
                                   T, hs, vec);
    load_tile<BQ, D, SD, kThreads>(dobuf + buf * BQ * SD, static_cast<const S*>(a.dout_s) + row_b * C + head, C,
                                   q0, T, hs, vec);
    if (threadIdx.x < BQ) {
      const int t = q0 + threadIdx.x;
      const int64_t stat = (static_cast<int64_t>(b) * NH + h) * T;
      lse2_buf[buf * BQ + threadIdx.x] = t < T ? a.lse[stat + t] * kLog2e : 0.0f;
      delta_buf[buf * BQ + threadIdx.x] = t < T ? a.delta[stat + t] : 0.0f;
      ds_buf[buf * BQ + threadIdx.x] = doc_first(a.doc_start, b, T, t);
    }
  };
  load_tile<kTile, D, SD, kThreads>(ks, kg, ldkv, k0, T, hs, vec);
  load_tile<kTile, D, SD, kThreads>(vs, vg, ldkv, k0, T, hs, vec);
  load_queries(0, 0);  // queries before k0 see none of these keys
  cp_async_commit();

  float dk[DT][4], dv[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.0f;
  const int key0 = k0 + warp * 16 + g, key1 = key0 + 8;

  for (int it = 0; it < total; ++it) {
    const int q0 = k0 + (it % nq) * BQ;
    const int cur = it & 1;
    const S* qs = qbuf + cur * BQ * SD;
    const S* dos = dobuf + cur * BQ * SD;
    const float* lse2_s = lse2_buf + cur * BQ;
    const float* delta_s = delta_buf + cur * BQ;
    const int* ds_s = ds_buf + cur * BQ;
    __syncthreads();  // every warp is done with tile it - 1, whose buffers are refilled now
    if (it + 1 < total) load_queries(it + 1, cur ^ 1);
    cp_async_commit();   // possibly empty: keeps one group per iteration
    cp_async_wait<1>();  // tile it has landed
    __syncthreads();

    // S^T = K Q^T and dP^T = V dO^T: (16 keys, BQ queries) per warp.
    float st[NT][4], dpt[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) st[i][e] = dpt[i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      ldsm_a<SD>(ka, ks, warp * 16, kk * 16, lane);
      ldsm_a<SD>(va, vs, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < NT / 2; ++nn) {
        uint32_t qb[4], db[4];
        ldsm_b<SD>(qb, qs, nn * 16, kk * 16, lane);
        ldsm_b<SD>(db, dos, nn * 16, kk * 16, lane);
        mma<S>(st[2 * nn], ka, qb);
        mma<S>(st[2 * nn + 1], ka, qb + 2);
        mma<S>(dpt[2 * nn], va, db);
        mma<S>(dpt[2 * nn + 1], va, db + 2);
      }
    }
    // P^T and dS^T in place; masked pairs (query < key, query >= T, key
    // before the query's document) are 0.
    const bool need_mask =
        (q0 < k0 + kTile) || (q0 + BQ > T) || (a.doc_start != nullptr && ds_s[BQ - 1] > k0);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int tl = nt * 8 + 2 * tq + (e & 1);  // query within the tile
        float p = exp2f(st[nt][e] * sl2 - lse2_s[tl]);
        if (need_mask) {
          const int key = e < 2 ? key0 : key1;
          if (q0 + tl < key || q0 + tl >= T || key < ds_s[tl]) p = 0.0f;
        }
        st[nt][e] = p;
        dpt[nt][e] = p * (dpt[nt][e] - delta_s[tl]);
      }
    }
    // dV += P^T dO, dK += dS^T Q: k runs over the tile's queries.
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      uint32_t pa[4], dsa[4];
      c_to_a<S>(pa, st[2 * kk], st[2 * kk + 1]);
      c_to_a<S>(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t dob[4], qb[4];
        ldsm_bt<SD>(dob, dos, kk * 16, dd * 16, lane);
        ldsm_bt<SD>(qb, qs, kk * 16, dd * 16, lane);
        mma<S>(dv[2 * dd], pa, dob);
        mma<S>(dv[2 * dd + 1], pa, dob + 2);
        mma<S>(dk[2 * dd], dsa, qb);
        mma<S>(dk[2 * dd + 1], dsa, qb + 2);
      }
    }
  }

  const int64_t ld = a.ld_dkv, head = static_cast<int64_t>(hk) * hs;
  float* dkg = a.dk + row_b * ld + head;
  float* dvg = a.dv + row_b * ld + head;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = dt * 8 + 2 * tq + e;
      if (d < hs) {
        if (key0 < T) {
          dkg[static_cast<int64_t>(key0) * ld + d] = dk[dt][e] * scale;
          dvg[static_cast<int64_t>(key0) * ld + d] = dv[dt][e];
        }
        if (key1 < T) {
          dkg[static_cast<int64_t>(key1) * ld + d] = dk[dt][2 + e] * scale;
          dvg[static_cast<int64_t>(key1) * ld + d] = dv[dt][2 + e];
        }
      }
    }
  }
}

// grid (B * NH, ceil(T / 64)); blockIdx.y = 0 takes the last query tile.
template <typename S, int D>
__global__ void __launch_bounds__(kThreads) dq_mma_kernel(BwdArgs a, bool vec) {
  constexpr int SD = D + 8, BK = inner_tile<D>(), NT = BK / 8, DT = D / 8;
  extern __shared__ __align__(16) unsigned char smem[];
  S* qs = reinterpret_cast<S*>(smem);  // (64, SD)
  S* dos = qs + kTile * SD;            // (64, SD)
  S* kbuf = dos + kTile * SD;          // 2 x (BK, SD)
  S* vbuf = kbuf + 2 * BK * SD;        // 2 x (BK, SD)

  const int T = a.d.T, hs = a.d.hs, NH = a.d.NH;
  const int64_t C = a.d.C, ldq = a.d.ld_q, ldkv = a.d.ld_kv;
  const int b = blockIdx.x / NH, h = blockIdx.x % NH, hk = h / a.d.group();
  const int q0 = (gridDim.y - 1 - blockIdx.y) * kTile;
  const int64_t head = static_cast<int64_t>(h) * hs, row_b = static_cast<int64_t>(b) * T;
  const S* qg = static_cast<const S*>(a.q) + row_b * ldq + head;
  const S* dog = static_cast<const S*>(a.dout_s) + row_b * C + head;
  const S* kg = static_cast<const S*>(a.k) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const S* vg = static_cast<const S*>(a.v) + row_b * ldkv + static_cast<int64_t>(hk) * hs;
  const int64_t stat = (static_cast<int64_t>(b) * NH + h) * T;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane >> 2, tq = lane & 3;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs)), sl2 = scale * kLog2e;
  // Key tiles wholly before the first query's document are skipped.
  const int k_begin = doc_first(a.doc_start, b, T, q0) / BK * BK;
  const int ds_last = doc_first(a.doc_start, b, T, q0 + kTile - 1);

  load_tile<kTile, D, SD, kThreads>(qs, qg, ldq, q0, T, hs, vec);
  load_tile<kTile, D, SD, kThreads>(dos, dog, C, q0, T, hs, vec);
  load_tile<BK, D, SD, kThreads>(kbuf, kg, ldkv, k_begin, T, hs, vec);
  load_tile<BK, D, SD, kThreads>(vbuf, vg, ldkv, k_begin, T, hs, vec);
  cp_async_commit();
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;
  const int ds0 = doc_first(a.doc_start, b, T, row0), ds1 = doc_first(a.doc_start, b, T, row1);
  const float lse0 = row0 < T ? a.lse[stat + row0] * kLog2e : 0.0f;
  const float lse1 = row1 < T ? a.lse[stat + row1] * kLog2e : 0.0f;
  const float dl0 = row0 < T ? a.delta[stat + row0] : 0.0f;
  const float dl1 = row1 < T ? a.delta[stat + row1] : 0.0f;

  float dq[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

  const int last_key = min(q0 + kTile, T) - 1;
  for (int k0 = k_begin, it = 0; k0 <= last_key; k0 += BK, ++it) {
    const int cur = it & 1;
    const S* ks = kbuf + cur * BK * SD;
    const S* vs = vbuf + cur * BK * SD;
    __syncthreads();  // every warp is done with tile it - 1, whose buffers are refilled now
    if (k0 + BK <= last_key) {
      load_tile<BK, D, SD, kThreads>(kbuf + (cur ^ 1) * BK * SD, kg, ldkv, k0 + BK, T, hs, vec);
      load_tile<BK, D, SD, kThreads>(vbuf + (cur ^ 1) * BK * SD, vg, ldkv, k0 + BK, T, hs, vec);
    }
    cp_async_commit();   // possibly empty: keeps one group per iteration
    cp_async_wait<1>();  // tile it has landed
    __syncthreads();

    // S = Q K^T and dP = dO V^T: (16 queries, BK keys) per warp.
    float s[NT][4], dp[NT][4];
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][e] = dp[i][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t qa[4], da[4];
      ldsm_a<SD>(qa, qs, warp * 16, kk * 16, lane);
      ldsm_a<SD>(da, dos, warp * 16, kk * 16, lane);
#pragma unroll
      for (int nn = 0; nn < NT / 2; ++nn) {
        uint32_t kb[4], vb[4];
        ldsm_b<SD>(kb, ks, nn * 16, kk * 16, lane);
        ldsm_b<SD>(vb, vs, nn * 16, kk * 16, lane);
        mma<S>(s[2 * nn], qa, kb);
        mma<S>(s[2 * nn + 1], qa, kb + 2);
        mma<S>(dp[2 * nn], da, vb);
        mma<S>(dp[2 * nn + 1], da, vb + 2);
      }
    }
    // dS = P (dP - delta) in place of dp; masked pairs (key > query, key >= T,
    // key before the query's document) are 0.
    const bool need_mask = (k0 + BK > q0) || (k0 + BK > T) || (k0 < ds_last);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool hi = e >= 2;
        float p = exp2f(s[nt][e] * sl2 - (hi ? lse1 : lse0));
        if (need_mask) {
          const int key = k0 + nt * 8 + 2 * tq + (e & 1);
          if (key > (hi ? row1 : row0) || key >= T || key < (hi ? ds1 : ds0)) p = 0.0f;
        }
        dp[nt][e] = p * (dp[nt][e] - (hi ? dl1 : dl0));
      }
    }
    // dQ += dS K: k runs over the tile's keys.
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t dsa[4];
      c_to_a<S>(dsa, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
      for (int dd = 0; dd < D / 16; ++dd) {
        uint32_t kb[4];
        ldsm_bt<SD>(kb, ks, kk * 16, dd * 16, lane);
        mma<S>(dq[2 * dd], dsa, kb);
        mma<S>(dq[2 * dd + 1], dsa, kb + 2);
      }
    }
  }

  const int64_t ld = a.ld_dq;
  float* dqg = a.dq + row_b * ld + head;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int d = dt * 8 + 2 * tq + e;
      if (d < hs) {
        if (row0 < T) dqg[static_cast<int64_t>(row0) * ld + d] = dq[dt][e] * scale;
        if (row1 < T) dqg[static_cast<int64_t>(row1) * ld + d] = dq[dt][2 + e] * scale;
      }
    }
  }
}

template <typename S, int D>
void launch_bwd(const BwdArgs& a, bool vec, cudaStream_t stream) {
  constexpr size_t smem_kv = dkdv_smem_bytes<D>(), smem_q = dq_smem_bytes<D>();
  ZT_CUDA_CHECK(cudaFuncSetAttribute(dkdv_mma_kernel<S, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem_kv)));
  ZT_CUDA_CHECK(cudaFuncSetAttribute(dq_mma_kernel<S, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(smem_q)));
  const unsigned tiles = static_cast<unsigned>((a.d.T + kTile - 1) / kTile);
  dkdv_mma_kernel<S, D><<<dim3(static_cast<unsigned>(a.d.B * a.d.NKV), tiles), kThreads, smem_kv, stream>>>(a, vec);
  ZT_CUDA_CHECK_LAUNCH();
  dq_mma_kernel<S, D><<<dim3(static_cast<unsigned>(a.d.B * a.d.NH), tiles), kThreads, smem_q, stream>>>(a, vec);
  ZT_CUDA_CHECK_LAUNCH();
}

template <typename S>
void dispatch_bwd(const BwdArgs& a, int dp, bool vec, cudaStream_t stream) {
  switch (dp) {
    case 16: launch_bwd<S, 16>(a, vec, stream); return;
    case 32: launch_bwd<S, 32>(a, vec, stream); return;
    case 64: launch_bwd<S, 64>(a, vec, stream); return;
    case 128: launch_bwd<S, 128>(a, vec, stream); return;
    default: ZT_THROW("attention: no kernel for padded head size ", dp);
  }
}

}  // namespace

void bwd_mma_bf16(const BwdArgs& a, int dp, bool vec, cudaStream_t s) { dispatch_bwd<__nv_bfloat16>(a, dp, vec, s); }
void bwd_mma_f16(const BwdArgs& a, int dp, bool vec, cudaStream_t s) { dispatch_bwd<__half>(a, dp, vec, s); }

}  // namespace zt::attn
