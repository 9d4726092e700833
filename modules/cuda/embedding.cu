// Embedding forward and backward.
//
// [Note: embedding backward] Several positions can hold the same token, so
// dwte rows receive several contributions. Instead of atomics (whose order,
// and so whose rounding, changes from run to run), the positions are sorted
// by token with a stable radix sort (positions stay in increasing order
// within a token), and the first position of each token's run adds the run's
// dout rows in that order: dwte[v] = ((dwte[v] + d[p0]) + d[p1]) + ..., the
// exact order of the CPU reference, so the result is identical to it bit for
// bit. dwpe[t] sums dout[b, t] over b in order, likewise.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>

#include "modules/cuda/common.cuh"
#include "modules/cuda/embedding.cuh"

namespace zt::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// wpe null: no position table (Llama). doc_start (N) or null: the position
// of token n is n % T - doc_start[n].
template <typename TO, typename TW, bool kVecPath>
__global__ void embedding_fwd_kernel(TO* out, const int32_t* tokens, const TW* wte, const TW* wpe,
                                     const int32_t* doc_start, int64_t N, int64_t T, int C, int64_t V) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const int32_t tok = tokens[n];
  TO* orow = out + n * C;
  if (tok < 0 || tok >= V) {
    for (int c = lane; c < C; c += 32) orow[c] = from_float<TO>(__int_as_float(0x7fc00000));
    return;
  }
  const TW* er = wte + static_cast<int64_t>(tok) * C;
  const TW* pr = wpe == nullptr ? nullptr : wpe + (n % T - (doc_start == nullptr ? 0 : doc_start[n])) * C;
  if constexpr (kVecPath) {
    for (int c = lane * kVec; c < C; c += 32 * kVec) {
      float e[kVec], p[kVec];
      load_vec(er + c, e);
      if (pr != nullptr) {
        load_vec(pr + c, p);
#pragma unroll
        for (int k = 0; k < kVec; ++k) e[k] += p[k];
      }
      store_vec(orow + c, e);
    }
  } else {
    for (int c = lane; c < C; c += 32)
      orow[c] = from_float<TO>(pr == nullptr ? to_float(er[c]) : to_float(er[c]) + to_float(pr[c]));
  }
}

// Sort keys: the token, or V for a token outside [0, V) (sorted last, skipped).
__global__ void embedding_keys_kernel(uint32_t* keys, int32_t* positions, const int32_t* tokens, int64_t N,
                                      int64_t V) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N) return;
  const int32_t tok = tokens[i];
  keys[i] = (tok >= 0 && tok < V) ? static_cast<uint32_t>(tok) : static_cast<uint32_t>(V);
  positions[i] = static_cast<int32_t>(i);
}

// Sort keys for the position table under document masking: each token's
// position, i % T - doc_start[i].
__global__ void position_keys_kernel(uint32_t* keys, int32_t* positions, const int32_t* doc_start, int64_t N,
                                     int64_t T) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N) return;
  keys[i] = static_cast<uint32_t>(i % T - doc_start[i]);
  positions[i] = static_cast<int32_t>(i);
}

// Block i handles the run of equal keys that starts at sorted index i (and
// does nothing when i does not start a run).
// One block per sorted position; the first of each token's run adds the
// run's rows in order. A frequent token's run is long (hundreds of positions
// in real text), so its end is found by the whole block, blockDim keys at a
// time, and the rows' loads are issued kAhead at a time before their adds,
// which keep the order: with one dependent load after another, the longest
// run set the kernel's time.
__global__ void embedding_wte_bwd_kernel(float* dwte, const float* dout, const uint32_t* keys,
                                         const int32_t* positions, int64_t N, int64_t C, int64_t V) {
  constexpr int kAhead = 8;
  __shared__ int64_t run_end;
  const int64_t i = blockIdx.x;
  const uint32_t key = keys[i];
  if (key >= V || (i > 0 && keys[i - 1] == key)) return;  // the whole block returns alike
  if (threadIdx.x == 0) run_end = N;
  __syncthreads();
  for (int64_t base = i + 1; base < N; base += blockDim.x) {
    const int64_t j = base + threadIdx.x;
    if (j < N && keys[j] != key) atomicMin(reinterpret_cast<unsigned long long*>(&run_end), static_cast<unsigned long long>(j));
    __syncthreads();
    if (run_end < base + blockDim.x) break;  // every thread reads the same value
    __syncthreads();
  }
  const int64_t end = run_end;
  float* row = dwte + static_cast<int64_t>(key) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = row[c];
    int64_t j = i;
    for (; j + kAhead <= end; j += kAhead) {
      float v[kAhead];
#pragma unroll
      for (int a = 0; a < kAhead; ++a) v[a] = dout[static_cast<int64_t>(positions[j + a]) * C + c];
#pragma unroll
      for (int a = 0; a < kAhead; ++a) acc += v[a];
    }
    for (; j < end; ++j) acc += dout[static_cast<int64_t>(positions[j]) * C + c];
    row[c] = acc;
  }
}

// dwpe[t, c] += dout[b, t, c] for b = 0, 1, ... in order.
__global__ void embedding_wpe_bwd_kernel(float* dwpe, const float* dout, int64_t B, int64_t T, int64_t C) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < T * C; idx += stride) {
    float acc = dwpe[idx];
    for (int64_t b = 0; b < B; ++b) acc += dout[b * T * C + idx];
    dwpe[idx] = acc;
  }
}

int key_bits(int64_t V) {  // bits that hold every key in [0, V]
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= V) ++bits;
  return bits;
}

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Workspace layout: keys_in, keys_out, pos_in, pos_out (N each), cub's temporaries.
struct BwdWorkspace {
  uint32_t* keys_in;
  uint32_t* keys_out;
  int32_t* pos_in;
  int32_t* pos_out;
  void* sort_tmp;
  size_t sort_tmp_bytes;
};

size_t sort_tmp_bytes(int64_t N, int64_t V) {
  size_t bytes = 0;
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                                static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<int>(N), 0, key_bits(V)));
  return bytes;
}

BwdWorkspace carve(void* base, int64_t N, int64_t V) {
  const size_t arr = align_up(static_cast<size_t>(N) * 4);
  char* p = static_cast<char*>(base);
  return BwdWorkspace{reinterpret_cast<uint32_t*>(p), reinterpret_cast<uint32_t*>(p + arr),
                      reinterpret_cast<int32_t*>(p + 2 * arr), reinterpret_cast<int32_t*>(p + 3 * arr),
                      p + 4 * arr, sort_tmp_bytes(N, V)};
}

}  // namespace

void embedding_fwd(void* out, DType out_t, const int32_t* tokens, const void* wte, const void* wpe, DType w_t,
                   const int32_t* doc_start, int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream) {
  const int64_t N = B * T;
  if (N <= 0 || C <= 0) return;
  ZT_CHECK(C <= (int64_t{1} << 30), "embedding: C = ", C);
  const unsigned grid = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
  with_float_type(out_t, "embedding out", [&](auto to) {
    with_float_type(w_t, "embedding weights", [&](auto tw) {
      using TO = typename decltype(to)::type;
      using TW = typename decltype(tw)::type;
      auto run = [&](auto kernel) {
        kernel<<<grid, 32 * kWarpsPerBlock, 0, stream>>>(static_cast<TO*>(out), tokens, static_cast<const TW*>(wte),
                                                         static_cast<const TW*>(wpe), doc_start, N, T,
                                                         static_cast<int>(C), V);
      };
      const bool vec = C % kVec == 0 && vec_aligned<TO>(out) && vec_aligned<TW>(wte) &&
                       (wpe == nullptr || vec_aligned<TW>(wpe));
      if (vec) {
        run(embedding_fwd_kernel<TO, TW, true>);
      } else {
        run(embedding_fwd_kernel<TO, TW, false>);
      }
      ZT_CUDA_CHECK_LAUNCH();
    });
  });
}

size_t embedding_bwd_workspace_bytes(int64_t B, int64_t T, int64_t V) {
  const int64_t N = B * T;
  if (N <= 0) return 0;
  return 4 * align_up(static_cast<size_t>(N) * 4) + sort_tmp_bytes(N, std::max(V, T));
}

void embedding_bwd(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, const int32_t* doc_start,
                   int64_t B, int64_t T, int64_t C, int64_t V, void* workspace, cudaStream_t stream) {
  const int64_t N = B * T;
  if (N <= 0 || C <= 0) return;
  ZT_CHECK(N <= INT_MAX && V < INT_MAX, "embedding_bwd: ", N, " tokens, vocabulary ", V);
  const BwdWorkspace w = carve(workspace, N, std::max(V, T));
  embedding_keys_kernel<<<grid_for(N, 256), 256, 0, stream>>>(w.keys_in, w.pos_in, tokens, N, V);
  ZT_CUDA_CHECK_LAUNCH();
  size_t tmp_bytes = w.sort_tmp_bytes;
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.sort_tmp, tmp_bytes, w.keys_in, w.keys_out, w.pos_in, w.pos_out,
                                                static_cast<int>(N), 0, key_bits(V), stream));
  const int threads = static_cast<int>(std::min<int64_t>(256, (C + 31) / 32 * 32));
  embedding_wte_bwd_kernel<<<static_cast<unsigned>(N), threads, 0, stream>>>(dwte, dout, w.keys_out, w.pos_out, N,
                                                                            C, V);
  ZT_CUDA_CHECK_LAUNCH();
  if (dwpe == nullptr) return;
  if (doc_start == nullptr) {
    embedding_wpe_bwd_kernel<<<grid_for(T * C, 256, 4096), 256, 0, stream>>>(dwpe, dout, B, T, C);
    ZT_CUDA_CHECK_LAUNCH();
    return;
  }
  // Positions repeat within a row too: the same sort and run sums as dwte,
  // keyed by position (T <= V is not assumed: the workspace is sized for
  // max(V, T) keys by embedding_bwd_workspace_bytes).
  position_keys_kernel<<<grid_for(N, 256), 256, 0, stream>>>(w.keys_in, w.pos_in, doc_start, N, T);
  ZT_CUDA_CHECK_LAUNCH();
  tmp_bytes = w.sort_tmp_bytes;
  ZT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(w.sort_tmp, tmp_bytes, w.keys_in, w.keys_out, w.pos_in, w.pos_out,
                                                static_cast<int>(N), 0, key_bits(T), stream));
  embedding_wte_bwd_kernel<<<static_cast<unsigned>(N), threads, 0, stream>>>(dwpe, dout, w.keys_out, w.pos_out, N,
                                                                            C, T);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace zt::cuda
