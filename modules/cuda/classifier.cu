// The fused classifier + softmax cross-entropy: cuBLASLt for the products of
// each slice of classes over all rows (logits in the forward; logits, dx and
// dw in the backward), and three small kernels (forward partial log-sum-exps
// per slab of classes, their merge with the loss, backward dlogits). See
// classifier.cuh for the contract.
//
// [Note: transposed logits] A slice's logits are kept class-major: element
// (row n, class v) at L[n + v * R], i.e. the column-major (R, Vc) matrix with
// R (the rows rounded up) a multiple of 8. Every operand of the three
// products then has a contiguous extent that is a multiple of 8 (R or C),
// which cuBLASLt's fast Hopper kernels need: with the row-major (rows, V)
// layout the odd V of GPT-2 (50257) forces 1-element-aligned kernels,
// measured 4-7x slower on an H200 (logits 193 us vs 37 us, dx 160 us vs
// 37 us for 224 rows). The row statistics read 4 adjacent rows per thread
// (one float4) per class, coalesced across a warp.
#include "modules/cuda/classifier.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "modules/cuda/common.cuh"
#include "modules/cuda/lt_tune.cuh"
#include "modules/kernels.hpp"

namespace zt {
namespace {

constexpr int kThreads = 256;           // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerBlock = 128;      // 32 lanes x 4 rows
constexpr int kSlab = 512;              // classes per block of the row kernels
constexpr int kUnroll = 4;              // float4 loads in flight per thread

struct ClsDims {
  int N, C, V;
  int R;  // N rounded up to 8: the logits' leading dimension
  int S;  // class slabs of the row kernels: ceil(V / kSlab)
};

int64_t rows_of(const Tensor& t) { return t.shape.rank() == 0 ? 1 : t.numel() / t.shape[-1]; }
int64_t cols_of(const Tensor& t) { return t.shape.rank() == 0 ? 1 : t.shape[-1]; }

void check_cuda(const Tensor& t, const char* what) {
  ZT_CHECK(t.device == DeviceKind::cuda && t.data != nullptr, "classifier: ", what,
           " must be a defined tensor in CUDA memory");
}

ClsDims cls_dims(const Tensor& x, const Tensor& w, const Tensor& targets) {
  check_cuda(x, "x");
  check_cuda(w, "w");
  check_cuda(targets, "targets");
  ZT_CHECK(x.dtype == w.dtype, "classifier: x (", dtype_name(x.dtype), ") and w (", dtype_name(w.dtype),
           ") must share a storage dtype");
  ZT_CHECK(x.dtype == DType::f32 || x.dtype == DType::bf16 || x.dtype == DType::f16,
           "classifier on CUDA: storage must be f32, bf16 or f16, got ", dtype_name(x.dtype));
  const int64_t N = rows_of(x), C = cols_of(x), V = rows_of(w);
  ZT_CHECK(cols_of(w) == C, "classifier: x ", x.shape.str(), " and weight ", w.shape.str());
  ZT_CHECK(targets.numel() == N && targets.dtype == DType::i32, "classifier: targets must be ", N, " i32");
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  ZT_CHECK(N >= 1 && V >= 1 && C >= 1 && N <= kMax - 8 && C <= kMax && V <= kMax,
           "classifier dimensions out of range for cuBLAS int");
  ZT_CHECK((V + kSlab - 1) / kSlab <= 65535, "classifier: vocabulary of ", V, " too large for the row grid");
  return ClsDims{static_cast<int>(N), static_cast<int>(C), static_cast<int>(V), static_cast<int>((N + 7) / 8 * 8),
                 static_cast<int>((V + kSlab - 1) / kSlab)};
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: ZT_THROW("classifier: no cuBLAS type for ", dtype_name(t));
  }
}

// Largest power of two up to 256 dividing every address base + i * stride.
int alignment(const void* base, int64_t stride_bytes) {
  const uint64_t a = reinterpret_cast<uintptr_t>(base) | static_cast<uint64_t>(stride_bytes);
  int al = 1;
  while (al < 256 && (a & static_cast<uint64_t>(al)) == 0) al <<= 1;
  return al;
}

}  // namespace

// One cuBLASLt product shape in column-major terms:
//   D (m, n; ldd) = op(A) (m, k) . op(B) (k, n) + beta * D,
// fp32 accumulation (CUBLAS_COMPUTE_32F is never TF32 in cuBLASLt); D is f32
// unless `dt` says otherwise. The algorithm is chosen once for the shape and
// the pointer alignments given: the heuristic's first, or with a plan cache
// ([Note: timed algorithm choice] in lt_tune.cuh) the fastest bit-identical
// candidate at the first call with beta = 0.
class LtGemm {
 public:
  LtGemm(const ClassifierBlas& blas, bool ta, bool tb, int m, int n, int k, cudaDataType_t ab, int64_t lda,
         int64_t ldb, int64_t ldd, int align_a, int align_b, int align_d, cudaDataType_t dt, bool timed) {
    ZT_CHECK(blas.handle != nullptr, "classifier: null cuBLASLt handle");
    ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la_, ab, ta ? k : m, ta ? m : k, lda));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb_, ab, tb ? n : k, tb ? k : n, ldb));
    ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld_, dt, m, n, ldd));
    std::vector<cublasLtMatmulAlgo_t> candidates =
        cuda::lt_candidates(blas.handle, op_, la_, lb_, ld_, blas.workspace ? blas.workspace_bytes : 0, align_a,
                            align_b, align_d, timed ? cuda::kLtCandidates : 1);
    ZT_CHECK(!candidates.empty(), "classifier: cuBLASLt has no algorithm for (", m, " x ", k, ") . (", k, " x ", n,
             ")");
    algo_ = cuda::LtAlgo(std::move(candidates), timed,
                         std::string("classifier ") + (ta ? "T" : "N") + (tb ? "T " : "N ") + std::to_string(m) +
                             "x" + std::to_string(n) + "x" + std::to_string(k) +
                             (dt == CUDA_R_32F ? " ->f32" : " ->16-bit"));
    call_ = cuda::lt_shared_call(blas.handle, op_, la_, lb_, ld_, cuda::lt_span_bytes(m, n, ldd, dt == CUDA_R_32F ? 4 : 2),
                                 blas.workspace, blas.workspace ? blas.workspace_bytes : 0);
  }
  ~LtGemm() {
    if (ld_) (void)cublasLtMatrixLayoutDestroy(ld_);
    if (lb_) (void)cublasLtMatrixLayoutDestroy(lb_);
    if (la_) (void)cublasLtMatrixLayoutDestroy(la_);
    if (op_) (void)cublasLtMatmulDescDestroy(op_);
  }
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void run(const void* A, const void* B, float beta, void* D, cudaStream_t stream) {
    cuda::LtCall call = call_;
    call.a = A;
    call.b = B;
    call.d = D;
    algo_.run(call, beta, stream);
  }

 private:
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cuda::LtAlgo algo_;
  cuda::LtCall call_;  // what every call shares; run sets the pointers
};

// Plans by shape, alignments and types, kept for the life of the owner's
// cuBLASLt handle, so a step neither builds descriptors nor asks the
// heuristic again, and each product's timed choice is made once.
struct ClassifierPlans {
  using Key = std::tuple<bool, bool, int, int, int, int, int64_t, int64_t, int64_t, int, int, int, int>;
  std::map<Key, std::shared_ptr<LtGemm>> plans;
};

std::shared_ptr<ClassifierPlans> make_classifier_plans() { return std::make_shared<ClassifierPlans>(); }

namespace {

// The plan for a product: from the cache when `blas` has one, else built for
// this call with the heuristic's first choice.
std::shared_ptr<LtGemm> lt_gemm(const ClassifierBlas& blas, bool ta, bool tb, int m, int n, int k,
                                cudaDataType_t ab, int64_t lda, int64_t ldb, int64_t ldd, int align_a, int align_b,
                                int align_d, cudaDataType_t dt = CUDA_R_32F) {
  if (blas.plans == nullptr)
    return std::make_shared<LtGemm>(blas, ta, tb, m, n, k, ab, lda, ldb, ldd, align_a, align_b, align_d, dt, false);
  const ClassifierPlans::Key key{ta, tb, m, n, k, static_cast<int>(ab), lda, ldb, ldd, align_a, align_b, align_d,
                                 static_cast<int>(dt)};
  auto it = blas.plans->plans.find(key);
  if (it == blas.plans->plans.end()) {
    auto g = std::make_shared<LtGemm>(blas, ta, tb, m, n, k, ab, lda, ldb, ldd, align_a, align_b, align_d, dt,
                                      cuda::lt_timed_choice());
    it = blas.plans->plans.emplace(key, std::move(g)).first;
  }
  return it->second;
}

__device__ __forceinline__ void merge_lse(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float mx = fmaxf(m, m2);
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

__device__ __forceinline__ float comp(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// grid (ceil(rr / 128), S). Thread: rows n0..n0+3 (one float4 per class);
// warp w: classes v_begin + w, + 8, ... of the block's slab. Writes each
// row's (max, sum of exp(x - max)) over the slab to partial[slab * R + n].
// L's classes are v_off .. v_off + V - 1 of the vocabulary; the slab holding
// a row's target also copies that logit to tlogit[n].
__global__ void __launch_bounds__(kThreads) fwd_partial_kernel(const float* __restrict__ L, int R, int rr, int V,
                                                              float2* __restrict__ partial,
                                                              const int* __restrict__ targets, int v_off,
                                                              float* __restrict__ tlogit) {
  __shared__ float sm[kWarps][kRowsPerBlock], ss[kWarps][kRowsPerBlock];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n0 = blockIdx.x * kRowsPerBlock + 4 * lane;
  const int v_begin = blockIdx.y * kSlab, v_end = min(V, v_begin + kSlab);
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (n0 < rr) {
    for (int v = v_begin + warp; v < v_end; v += kWarps * kUnroll) {
      float4 x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int vv = v + u * kWarps;
        x[u] = vv < v_end ? *reinterpret_cast<const float4*>(L + n0 + int64_t{vv} * R)
                          : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // x[0] is always a class, so mn is finite
        float mn = m[i];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) mn = fmaxf(mn, comp(x[u], i));
        float acc = s[i] * expf(m[i] - mn);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) acc += expf(comp(x[u], i) - mn);
        s[i] = acc;
        m[i] = mn;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    sm[warp][4 * lane + i] = m[i];
    ss[warp][4 * lane + i] = s[i];
  }
  __syncthreads();
  const int t = threadIdx.x, n = blockIdx.x * kRowsPerBlock + t;
  if (t < kRowsPerBlock && n < rr) {
    float mm = sm[0][t], sum = ss[0][t];
    for (int w = 1; w < kWarps; ++w) merge_lse(mm, sum, sm[w][t], ss[w][t]);
    partial[int64_t{blockIdx.y} * R + n] = make_float2(mm, sum);
    const int tg = targets[n] - v_off;
    if (tg >= v_begin && tg < v_end) tlogit[n] = L[n + int64_t{tg} * R];
  }
}

// One thread per row: lse = merged log-sum-exp over the S slabs of all V
// classes, loss = lse - logit[target].
__global__ void fwd_merge_kernel(int R, int rr, int V, int S, const float2* __restrict__ partial,
                                 const int* __restrict__ targets, const float* __restrict__ tlogit,
                                 float* __restrict__ losses, float* __restrict__ lse) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= rr) return;
  float m = -INFINITY, s = 0.0f;
  for (int k = 0; k < S; ++k) {
    const float2 p = partial[int64_t{k} * R + n];
    merge_lse(m, s, p.x, p.y);
  }
  const float l = m + logf(s);
  const int tg = targets[n];
  lse[n] = l;
  losses[n] = tg < 0 ? 0.0f : (tg < V ? l - tlogit[n] : NAN);
}

__device__ __forceinline__ void store4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void store4(__nv_bfloat16* p, float4 v) {
  __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<uint32_t*>(&a);
  u.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = u;
}
__device__ __forceinline__ void store4(__half* p, float4 v) {
  __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<uint32_t*>(&a);
  u.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = u;
}

// G = (exp(L - lse) - onehot(target)) * dloss, 0 for ignored rows and for the
// padding rows [rr, rr rounded up to 4). Same grid and thread mapping as
// fwd_partial_kernel. For f32, G aliases L: a thread loads a batch of float4s
// before it stores them, and no other thread touches them.
// The classes of L and G are v_off .. v_off + V - 1 of the vocabulary
// (V_all classes in all).
template <typename O>
__global__ void __launch_bounds__(kThreads) bwd_dlogits_kernel(const float* L, int R, int rr, int V, int v_off,
                                                              int V_all, O* G, const int* __restrict__ targets,
                                                              const float* __restrict__ dloss,
                                                              const float* __restrict__ lse) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int n0 = blockIdx.x * kRowsPerBlock + 4 * lane;
  if (n0 >= rr) return;  // no block-wide synchronisation below
  const int v_begin = blockIdx.y * kSlab, v_end = min(V, v_begin + kSlab);
  int tg[4];
  float g[4], l[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int n = n0 + i;
    tg[i] = n < rr ? targets[n] : -1;
    g[i] = tg[i] < 0 ? 0.0f : (tg[i] < V_all ? dloss[n] : NAN);  // ignored rows get no gradient
    tg[i] -= v_off;                                                  // the target's class in this slice
    l[i] = n < rr ? lse[n] : 0.0f;
  }
  for (int v = v_begin + warp; v < v_end; v += kWarps * kUnroll) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int vv = v + u * kWarps;
      x[u] = vv < v_end ? *reinterpret_cast<const float4*>(L + n0 + int64_t{vv} * R) : make_float4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int vv = v + u * kWarps;
      if (vv >= v_end) break;
      float y[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        y[i] = g[i] == 0.0f ? 0.0f : expf(comp(x[u], i) - l[i]) * g[i];
        if (vv == tg[i]) y[i] -= g[i];
      }
      store4(G + n0 + int64_t{vv} * R, make_float4(y[0], y[1], y[2], y[3]));
    }
  }
}

const float* f32_ptr(const Tensor& t, int64_t n, const char* what) {
  check_cuda(t, what);
  ZT_CHECK(t.numel() == n && t.dtype == DType::f32, "classifier: ", what, " must have ", n, " f32 elements, got ",
           t.shape.str(), " ", dtype_name(t.dtype));
  return static_cast<const float*>(t.data);
}


dim3 row_grid(const ClsDims& d, int rr) {
  return dim3(static_cast<unsigned>((rr + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(d.S));
}

// Classes per slice: a multiple of `multiple` (8 keeps each slice of w and
// dw 16-byte aligned; the forward takes whole slabs) whose logits over the
// R = N rounded up to 8 rows (and 16-bit dlogits: bytes_per_logit 6) fit the
// budget; all V when they fit at once.
int64_t slice_classes(const ClsDims& all, size_t chunk_bytes, int64_t multiple, int64_t bytes_per_logit) {
  int64_t Vc = static_cast<int64_t>(chunk_bytes) / (int64_t{all.R} * bytes_per_logit) / multiple * multiple;
  Vc = std::max<int64_t>(multiple, Vc);
  if (Vc >= all.V) Vc = all.V;  // one slice
  ZT_CHECK(int64_t{all.R} * Vc <= std::numeric_limits<int>::max(), "classifier: slice of ", all.R, " rows x ", Vc,
           " classes exceeds cuBLAS int");
  return Vc;
}

// The backward's slice logits (R x V f32) and, for 16-bit storage, dlogits.
struct Workspace {
  float* L;
  void* G;
};

Workspace take_workspace(Arena& ws, const ClsDims& d, DType storage) {
  Workspace w{};
  const int64_t elems = int64_t{d.R} * d.V;
  w.L = static_cast<float*>(ws.alloc(DType::f32, Shape{elems}).data);
  w.G = w.L;  // f32: dlogits in place
  if (storage != DType::f32) w.G = ws.alloc(storage, Shape{elems}).data;
  ZT_CHECK(reinterpret_cast<uintptr_t>(w.L) % 16 == 0 && reinterpret_cast<uintptr_t>(w.G) % 16 == 0,
           "classifier: workspace arena is not 16-byte aligned (or not device memory)");
  return w;
}

// ---- forward and backward in one pass ([Note: classifier in one pass]) ------

constexpr int kRowThreads = 512;

// N elements of T in one aligned access (without the alignment the compiler
// splits it into element accesses: 2-byte loads ran the bf16 row kernel at
// a quarter of the f32 one's bandwidth).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Shared pieces of the one pass's row kernels. A row's loss from its
// (max, sum of exponentials) per thread: the block's merge, lse and the loss
// (tid 0 writes it); returns lse to every thread. `target_logit` is read by
// tid 0 only.
template <int kThreadsPerRow, typename TargetLogit>
__device__ __forceinline__ float row_lse_and_loss(float m, float s, int V, int tg, TargetLogit target_logit,
                                                  float* loss_out, float* wm, float* wsum, float* row_lse) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge_lse(m, s, m2, s2);
  }
  if (lane == 0) {
    wm[warp] = m;
    wsum[warp] = s;
  }
  __syncthreads();
  if (tid == 0) {
    float mm = wm[0], ss = wsum[0];
    for (int k = 1; k < kThreadsPerRow / 32; ++k) merge_lse(mm, ss, wm[k], wsum[k]);
    const float l = mm + logf(ss);
    *row_lse = l;
    *loss_out = tg < 0 ? 0.0f : (tg < V ? l - target_logit() : NAN);
  }
  __syncthreads();
  return *row_lse;
}

__device__ __forceinline__ float ex2_approx(float x) {  // 2^x, the hardware's approximation (as __expf uses)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
using cuda::kLog2e;

// One pack's part of pass 1: the running (max, sum of exponentials) over its
// classes below V. exp(f - m) is 2^(f log2 e - m log2 e), one fused
// multiply-add before the exponential; only the row's last pack can hold
// padding classes.
template <typename L, int kv>
__device__ __forceinline__ void pack_max_sum(const Pack<L, kv>& x, int first, int V, float& m, float& s) {
  float f[kv];
  if (first + kv <= V) {
#pragma unroll
    for (int e = 0; e < kv; ++e) f[e] = cuda::to_float(x.v[e]);
  } else {
#pragma unroll
    for (int e = 0; e < kv; ++e) f[e] = first + e < V ? cuda::to_float(x.v[e]) : -INFINITY;
  }
  float vm = f[0];
#pragma unroll
  for (int e = 1; e < kv; ++e) vm = fmaxf(vm, f[e]);
  if (vm > m) {
    s *= ex2_approx((m - vm) * kLog2e);
    m = vm;
  }
  const float ml = m * kLog2e;
#pragma unroll
  for (int e = 0; e < kv; ++e) s += ex2_approx(fmaf(f[e], kLog2e, -ml));
}

// d[0 .. kv) into y, two 16-bit values a conversion.
template <typename G, int kv>
__device__ __forceinline__ void store_pack(Pack<G, kv>& y, const float (&d)[kv]) {
  if constexpr (std::is_same_v<G, __nv_bfloat16> || std::is_same_v<G, __half>) {
    static_assert(kv % 2 == 0, "16-bit packs hold pairs");
#pragma unroll
    for (int e = 0; e < kv; e += 2) {
      if constexpr (std::is_same_v<G, __nv_bfloat16>) {
        const __nv_bfloat162 p = __floats2bfloat162_rn(d[e], d[e + 1]);
        y.v[e] = p.x;
        y.v[e + 1] = p.y;
      } else {
        const __half2 p = __floats2half2_rn(d[e], d[e + 1]);
        y.v[e] = p.x;
        y.v[e + 1] = p.y;
      }
    }
  } else {
#pragma unroll
    for (int e = 0; e < kv; ++e) y.v[e] = cuda::from_float<G>(d[e]);
  }
}

// One pack's part of pass 2: (softmax - onehot(target)) * g, padding 0;
// lse_l2 = lse log2 e. The common pack (every class below V, not the
// target's) takes one multiply-add, the exponential and a multiply a class.
template <typename G, typename L, int kv>
__device__ __forceinline__ Pack<G, kv> pack_grad(const Pack<L, kv>& x, int first, int V, int tg, float lse_l2,
                                                 float g) {
  Pack<G, kv> y;
  if (first + kv <= V && static_cast<unsigned>(tg - first) >= static_cast<unsigned>(kv) && g != 0.0f) {
    float d[kv];
#pragma unroll
    for (int e = 0; e < kv; ++e) d[e] = ex2_approx(fmaf(cuda::to_float(x.v[e]), kLog2e, -lse_l2)) * g;
    store_pack(y, d);
    return y;
  }
#pragma unroll
  for (int e = 0; e < kv; ++e) {
    const int v = first + e;
    float d = v < V && g != 0.0f ? ex2_approx(fmaf(cuda::to_float(x.v[e]), kLog2e, -lse_l2)) * g : 0.0f;
    if (v == tg) d -= g;
    y.v[e] = cuda::from_float<G>(d);
  }
  return y;
}

// [Note: classifier rows in flight] The loss and dlogits of a chunk's rows
// (L: row-major with `ldl` elements a row, a multiple of 8 and of 16 bytes;
// classes V .. ldl - 1 are padding, never taken for logits) are two passes
// over each row, a block a row: its max and sum of exponentials, then G =
// (softmax - onehot(target)) * dloss in G's dtype (`ldg` G elements a row,
// padding 0). Each thread takes the 16-byte packs tid, tid + kRowThreads,
// ... in both passes, kRowUnroll of them loaded before any is used.
// kSmem: pass 1 also keeps the row in shared memory (ldl * sizeof(L) bytes)
// and pass 2 reads it there, so the row crosses the memory bus once each
// way; used where two blocks' rows fit on a multiprocessor (16-bit logits up
// to about 56k classes on Hopper). Otherwise pass 2 reads the row again
// (mostly from L2), and when G is narrower than L the two share memory (G's
// row r is the first half of L's row r): each tile of packs is read by the
// whole block before any of it is written, since the bytes a tile's G values
// go to belong to L packs of that tile or earlier. Measured with Nsight
// Compute on the H200 at GPT-2's shape (8192 rows of 50,264 bf16 logits):
// the row read twice 708 us (3.3 TB/s for 2.35 GB), kept in shared memory
// 650 us (2.5 TB/s for 1.6 GB); one block of 1024 threads a multiprocessor
// copying its next row into shared memory (cp.async) while computing the
// current one took 946 us. On an H100 (this kernel 593 us), persistent
// blocks bringing rows in by bulk copies (cp.async.bulk, four pieces a
// row on their own mbarriers) took 709-718 us with two row buffers a
// block and 622-627 us with one (docs/perf.md). Both passes are arithmetic
// as much as memory (two exponentials and about 21 instructions a class in
// all), so on the H200 the rows in flight, not the bytes, set the time; on
// the H100, with less bandwidth, the kernel moves 81.5% of its DRAM peak.
// Nor does it hide beside the products: on 16-48 multiprocessors of a side
// stream next to the neighbouring chunks' products on the rest, the
// classifier took 7.8-14.2 ms against 6.4 in sequence (H100, docs/perf.md).
constexpr int kRowUnroll = 4;  // packs a thread loads before it uses them

template <typename L, typename G, bool kSmem>
__global__ void __launch_bounds__(kRowThreads) row_loss_grad_kernel(L* logits, int64_t ldl, int64_t ldg, int V,
                                                                    const int* __restrict__ targets,
                                                                    const float* __restrict__ dloss,
                                                                    float* __restrict__ losses) {
  constexpr int kv = 16 / static_cast<int>(sizeof(L));  // one 16-byte load of logits
  using P = Pack<L, kv>;
  static_assert(sizeof(G) <= sizeof(L), "dlogits no wider than logits");
  extern __shared__ uint4 row_smem[];  // kSmem: the row's packs
  P* const srow = reinterpret_cast<P*>(row_smem);
  __shared__ float wm[kRowThreads / 32], wsum[kRowThreads / 32];
  __shared__ float row_lse;
  const int row = blockIdx.x, tid = threadIdx.x;
  L* lr = logits + int64_t{row} * ldl;
  const P* const src = reinterpret_cast<const P*>(lr);
  G* gr = reinterpret_cast<G*>(logits) + int64_t{row} * ldg;
  const int nvec = static_cast<int>(ldl / kv);  // the padding too (G 0 there)
  float m = -INFINITY, s = 0.0f;
  for (int base = 0; base < nvec; base += kRowThreads * kRowUnroll) {
    P x[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      const int i = base + u * kRowThreads + tid;
      if (i < nvec) x[u] = src[i];
    }
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      const int i = base + u * kRowThreads + tid;
      if (i >= nvec) break;
      if constexpr (kSmem) srow[i] = x[u];
      pack_max_sum(x[u], i * kv, V, m, s);
    }
  }
  const int tg = targets[row];
  const float lse = row_lse_and_loss<kRowThreads>(
      m, s, V, tg, [&] { return cuda::to_float(lr[tg]); }, losses + row, wm, wsum, &row_lse);
  const float lse_l2 = lse * kLog2e;
  const float g = tg < 0 ? 0.0f : (tg < V ? dloss[row] : NAN);  // ignored rows get no gradient
  constexpr int kTile = kSmem ? 1 : kRowUnroll;  // packs a thread holds between reads and writes
  for (int base = 0; base < nvec; base += kRowThreads * kTile) {
    P x[kTile];
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      const int i = base + u * kRowThreads + tid;
      if (i < nvec) x[u] = kSmem ? srow[i] : src[i];
    }
    if constexpr (!kSmem && sizeof(G) < sizeof(L)) __syncthreads();  // the tile is read before any is overwritten
#pragma unroll
    for (int u = 0; u < kTile; ++u) {
      const int i = base + u * kRowThreads + tid;
      if (i >= nvec) break;
      reinterpret_cast<Pack<G, kv>*>(gr)[i] = pack_grad<G>(x[u], i * kv, V, tg, lse_l2, g);
    }
  }
}

__global__ void add_f32_kernel(float* __restrict__ dst, const float* __restrict__ src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    dst[i] += src[i];
}

// The shared-memory form where two blocks' rows fit on a multiprocessor,
// else the other ([Note: classifier rows in flight]).
template <typename L, typename G>
void launch_row_loss_grad(void* logits, int64_t ldl, int64_t ldg, int rows, int V, const int* targets,
                          const float* dloss, float* losses, cudaStream_t stream) {
  // The device's shared-memory limits, read once per device, and the
  // largest dynamic shared memory this kernel has been allowed so far on
  // each: the attribute is set again only for a longer row.
  struct Limits {
    int per_sm = -1, per_block = 0, allowed = 0;
  };
  constexpr int kMaxDevices = 64;
  static Limits limits[kMaxDevices];
  int dev = 0;
  ZT_CUDA_CHECK(cudaGetDevice(&dev));
  ZT_CHECK(dev < kMaxDevices, "classifier: device ", dev, " beyond the ", kMaxDevices, " this kernel keeps limits for");
  Limits& lim = limits[dev];
  if (lim.per_sm < 0) {
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&lim.per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    ZT_CUDA_CHECK(cudaDeviceGetAttribute(&lim.per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  }
  const size_t row_bytes = static_cast<size_t>(ldl) * sizeof(L);
  constexpr size_t kStatic = 2 * 1024;  // the kernel's own shared arrays and the block's reserve, rounded up
  if (row_bytes + kStatic <= static_cast<size_t>(lim.per_block) &&
      2 * (row_bytes + kStatic) <= static_cast<size_t>(lim.per_sm)) {
    auto* kernel = row_loss_grad_kernel<L, G, true>;
    if (static_cast<int>(row_bytes) > lim.allowed) {
      ZT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(row_bytes)));
      lim.allowed = static_cast<int>(row_bytes);
    }
    kernel<<<rows, kRowThreads, row_bytes, stream>>>(static_cast<L*>(logits), ldl, ldg, V, targets, dloss, losses);
  } else {
    row_loss_grad_kernel<L, G, false><<<rows, kRowThreads, 0, stream>>>(static_cast<L*>(logits), ldl, ldg, V,
                                                                        targets, dloss, losses);
  }
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace

// The forward walks the vocabulary in slices too ([Note: classifier backward
// by class slices]): every product has all N rows (a few hundred rows per
// chunk left cuBLASLt's large tiles idle at V 128,256), the slab partials of
// all slices are merged once at the end, and the target's logit is kept by
// the slab that holds it.
void classifier_fwd_cuda(Arena& ws, const Tensor& losses, const Tensor& lse, const Tensor& x, const Tensor& w,
                         const Tensor& targets, const ClassifierBlas& blas, cudaStream_t stream, size_t chunk_bytes) {
  const ClsDims all = cls_dims(x, w, targets);
  float* loss_p = const_cast<float*>(f32_ptr(losses, all.N, "losses"));
  float* lse_p = const_cast<float*>(f32_ptr(lse, all.N, "lse"));
  const int* tg = static_cast<const int*>(targets.data);
  const int64_t Np = all.R, Vc = slice_classes(all, chunk_bytes, kSlab, 4);
  const ArenaScope scope(ws);
  float* L = static_cast<float*>(ws.alloc(DType::f32, Shape{Np * Vc}).data);
  float2* partial = static_cast<float2*>(ws.alloc(DType::f32, Shape{2 * int64_t{all.S} * Np}).data);
  float* tlogit = static_cast<float*>(ws.alloc(DType::f32, Shape{Np}).data);
  ZT_CHECK(reinterpret_cast<uintptr_t>(L) % 16 == 0, "classifier: workspace arena is not 16-byte aligned");
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
  auto plan_for = [&](int64_t vc) {
    return lt_gemm(blas, true, false, all.N, static_cast<int>(vc), all.C, cuda_type(x.dtype), all.C,
                                    all.C, Np, alignment(x.data, 0), alignment(w.data, Vc * all.C * es),
                                    alignment(L, 0));
  };
  const int64_t tail = all.V % Vc;
  const std::shared_ptr<LtGemm> full = plan_for(Vc), last = tail ? plan_for(tail) : nullptr;
  for (int64_t v0 = 0; v0 < all.V; v0 += Vc) {
    const int vc = static_cast<int>(std::min<int64_t>(Vc, all.V - v0));
    (vc == Vc ? full : last)->run(x.data, static_cast<const char*>(w.data) + v0 * all.C * es, 0.0f, L, stream);
    const ClsDims s{all.N, all.C, vc, static_cast<int>(Np), (vc + kSlab - 1) / kSlab};
    fwd_partial_kernel<<<row_grid(s, all.N), kThreads, 0, stream>>>(L, s.R, all.N, vc, partial + v0 / kSlab * Np,
                                                                   tg, static_cast<int>(v0), tlogit);
    ZT_CUDA_CHECK_LAUNCH();
  }
  fwd_merge_kernel<<<(all.N + 127) / 128, 128, 0, stream>>>(static_cast<int>(Np), all.N, all.V, all.S, partial, tg,
                                                            tlogit, loss_p, lse_p);
  ZT_CUDA_CHECK_LAUNCH();
}

// [Note: classifier backward by class slices] The backward walks the
// vocabulary in slices of Vc classes over all N rows, not the rows in chunks
// over all classes as the forward does: dw += G^T x then writes each class's
// gradient row once, where row chunks reread and rewrote the whole fp32
// (V, C) gradient once per chunk (at V 128,256, C 2048: 2 GB of traffic per
// chunk, 24 chunks in the default budget). What slices reread instead is dx
// (N, C) fp32, 1/16 of that at these shapes, and every product has N rows,
// so it stays on cuBLASLt's large tiles.
void classifier_bwd_cuda(Arena& ws, const Tensor& dx, const Tensor& dw, const Tensor& dloss, const Tensor& x,
                         const Tensor& w, const Tensor& targets, const Tensor& lse, const ClassifierBlas& blas,
                         cudaStream_t stream, size_t chunk_bytes) {
  const ClsDims all = cls_dims(x, w, targets);
  float* dx_p = const_cast<float*>(f32_ptr(dx, int64_t{all.N} * all.C, "dx"));
  float* dw_p = const_cast<float*>(f32_ptr(dw, int64_t{all.V} * all.C, "dw"));
  const float* dloss_p = f32_ptr(dloss, all.N, "dloss");
  const float* lse_p = f32_ptr(lse, all.N, "lse");
  const int* tg = static_cast<const int*>(targets.data);
  const int64_t Np = all.R, Vc = slice_classes(all, chunk_bytes, 8, x.dtype == DType::f32 ? 4 : 6);
  auto slice_dims = [&](int64_t vc) {
    return ClsDims{all.N, all.C, static_cast<int>(vc), static_cast<int>(Np),
                   static_cast<int>((vc + kSlab - 1) / kSlab)};
  };
  const ClsDims d = slice_dims(Vc);
  const ArenaScope scope(ws);
  const Workspace wk = take_workspace(ws, d, x.dtype);
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
  const int tail = static_cast<int>(all.V % Vc);
  // Plans for a slice: logits L (N, vc) = x . w_s^T; dx^T (C, N) (+)= w_s^T
  // (C, vc) . G^T; dw_s^T (C, vc) += x^T (C, N) . G (N, vc), column-major.
  struct SlicePlans {
    std::shared_ptr<LtGemm> logits, dx, dw;
  };
  auto plans_for = [&](const ClsDims& s) {
    const cudaDataType_t st = cuda_type(x.dtype);
    // Slices of w and dw start at v0 * C elements, v0 a multiple of Vc.
    const int aw = alignment(w.data, Vc * all.C * es), adw = alignment(dw_p, Vc * all.C * 4);
    const int ax = alignment(x.data, 0), aL = alignment(wk.L, 0), aG = alignment(wk.G, 0);
    SlicePlans p;
    p.logits = lt_gemm(blas, true, false, all.N, s.V, all.C, st, all.C, all.C, s.R, ax, aw, aL);
    p.dx = lt_gemm(blas, false, true, all.C, all.N, s.V, st, all.C, s.R, all.C, aw, aG,
                                    alignment(dx_p, 0));
    p.dw = lt_gemm(blas, false, false, all.C, s.V, all.N, st, all.C, s.R, all.C, ax, aG, adw);
    return p;
  };
  const SlicePlans full = plans_for(d);
  const SlicePlans last = tail ? plans_for(slice_dims(tail)) : SlicePlans{};
  for (int64_t v0 = 0; v0 < all.V; v0 += Vc) {
    const int vc = static_cast<int>(std::min<int64_t>(Vc, all.V - v0));
    const SlicePlans& p = vc == Vc ? full : last;
    const ClsDims s = vc == Vc ? d : slice_dims(vc);
    const char* ws_ = static_cast<const char*>(w.data) + v0 * all.C * es;
    p.logits->run(x.data, ws_, 0.0f, wk.L, stream);
    const dim3 grid = row_grid(s, all.N);
    const int off = static_cast<int>(v0);
    switch (x.dtype) {
      case DType::f32:
        bwd_dlogits_kernel<float><<<grid, kThreads, 0, stream>>>(wk.L, s.R, all.N, vc, off, all.V, wk.L, tg, dloss_p,
                                                                 lse_p);
        break;
      case DType::bf16:
        bwd_dlogits_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
            wk.L, s.R, all.N, vc, off, all.V, static_cast<__nv_bfloat16*>(wk.G), tg, dloss_p, lse_p);
        break;
      default:
        bwd_dlogits_kernel<__half><<<grid, kThreads, 0, stream>>>(wk.L, s.R, all.N, vc, off, all.V,
                                                                  static_cast<__half*>(wk.G), tg, dloss_p, lse_p);
        break;
    }
    ZT_CUDA_CHECK_LAUNCH();
    p.dx->run(ws_, wk.G, v0 == 0 ? 0.0f : 1.0f, dx_p, stream);
    p.dw->run(x.data, wk.G, 1.0f, dw_p + v0 * all.C, stream);
  }
}

// [Note: classifier in one pass] For training, where the backward always
// follows, the loss and both gradients come from one walk over chunks of
// rows, each holding all V classes: logits (rows, Vp) = x_c . w^T, row-major;
// one kernel per chunk for the loss and dlogits; dx_c = dlogits . w and
// dw += dlogits^T . x_c. That is the three products of the classifier, where
// the separate forward and backward need four (the backward recomputes the
// logits). Vp is V rounded up to 8: cuBLASLt's fast Hopper kernels need the
// contiguous extent of every operand to be a multiple of 16 bytes, and with
// GPT-2's odd V as that extent the products ran 4-8x slower on an H200
// (logits 13.5 ms against 1.75 for the padded form, dx 9.5 against 1.6, dw
// 2.6 against 1.7; the leading dimensions were Vp in both). So for
// V % 8 != 0, w is copied into Vp rows (zeros below) for the logits' and
// dx's products, and dw's product is split: classes 0 .. V8 - 1 (V8 = V
// rounded down to 8) accumulate straight into dw, classes V8 .. Vp - 1 into a
// (Vp - V8, C) f32 buffer whose first V - V8 rows are added into dw at the
// end. (A whole padded dw buffer, added at the end, cost 0.23 ms a call at
// GPT-2's shape.) The price of chunking rows is dw read and written once per chunk,
// which is why the chunks are large. `logits` is f32 (the loss from fp32 logits, as the separate calls)
// or x's dtype (half the memory and traffic per chunk; the loss then comes
// from rounded logits, as in PyTorch's autocast).
void classifier_fwd_bwd_cuda(Arena& ws, const Tensor& losses, const Tensor& dx, const Tensor& dw,
                             const Tensor& dloss, const Tensor& x, const Tensor& w, const Tensor& targets,
                             const ClassifierBlas& blas, cudaStream_t stream, size_t chunk_bytes, DType logits) {
  const ClsDims all = cls_dims(x, w, targets);
  ZT_CHECK(logits == DType::f32 || logits == x.dtype, "classifier: logits in ", dtype_name(logits),
           " with ", dtype_name(x.dtype), " storage (f32 or the storage dtype)");
  float* loss_p = const_cast<float*>(f32_ptr(losses, all.N, "losses"));
  float* dx_p = const_cast<float*>(f32_ptr(dx, int64_t{all.N} * all.C, "dx"));
  float* dw_p = const_cast<float*>(f32_ptr(dw, int64_t{all.V} * all.C, "dw"));
  const float* dloss_p = f32_ptr(dloss, all.N, "dloss");
  const int* tg = static_cast<const int*>(targets.data);
  const int64_t Vp = (int64_t{all.V} + 7) / 8 * 8, lsz = static_cast<int64_t>(dtype_size(logits));
  const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
  const int64_t ldg = Vp * lsz / es;  // G shares L's rows
  const int64_t Nc = Kernels::classifier_one_pass_rows(all.N, Vp, lsz, static_cast<int64_t>(chunk_bytes));
  const ArenaScope scope(ws);
  void* L = ws.alloc(DType::u16, Shape{Nc * Vp * lsz / 2}).data;
  ZT_CHECK(reinterpret_cast<uintptr_t>(L) % 16 == 0, "classifier: workspace arena is not 16-byte aligned");
  const cudaDataType_t st = cuda_type(x.dtype);
  const bool pad = Vp != all.V;
  const int64_t V8 = pad ? int64_t{all.V} / 8 * 8 : all.V;  // dw's classes the main product writes
  const void* wd = w.data;  // w, or its copy in Vp rows
  float* dw_tail = nullptr;  // (Vp - V8, C): classes V8 .. Vp - 1 of dw's product
  if (pad) {
    void* wp = ws.alloc(x.dtype, Shape{Vp * all.C}).data;
    const size_t wbytes = static_cast<size_t>(all.V) * all.C * es;
    ZT_CUDA_CHECK(cudaMemcpyAsync(wp, w.data, wbytes, cudaMemcpyDeviceToDevice, stream));
    ZT_CUDA_CHECK(cudaMemsetAsync(static_cast<char*>(wp) + wbytes, 0, (Vp - all.V) * all.C * es, stream));
    wd = wp;
    dw_tail = static_cast<float*>(ws.alloc(DType::f32, Shape{(Vp - V8) * all.C}).data);
  }
  struct ChunkPlans {
    std::shared_ptr<LtGemm> logits, dx, dw, dw_tail;
  };
  auto plans_for = [&](int rr) {
    const int ax = alignment(x.data, Nc * all.C * es), aw = alignment(wd, 0), aL = alignment(L, 0);
    const int vp = static_cast<int>(Vp);
    ChunkPlans p;
    p.logits = lt_gemm(blas, true, false, vp, rr, all.C, st, all.C, all.C, Vp, aw, ax, aL, cuda_type(logits));
    p.dx = lt_gemm(blas, false, false, all.C, rr, vp, st, all.C, ldg, all.C, aw, aL,
                   alignment(dx_p, Nc * all.C * 4));
    if (V8 > 0)
      p.dw = lt_gemm(blas, false, true, all.C, static_cast<int>(V8), rr, st, all.C, ldg, all.C, ax, aL,
                     alignment(dw_p, 0));
    if (pad)
      p.dw_tail = lt_gemm(blas, false, true, all.C, static_cast<int>(Vp - V8), rr, st, all.C, ldg, all.C, ax,
                          alignment(static_cast<const char*>(L) + V8 * es, 0), alignment(dw_tail, 0));
    return p;
  };
  const int tail = static_cast<int>(all.N % Nc);
  const ChunkPlans full = plans_for(static_cast<int>(Nc));
  const ChunkPlans last = tail ? plans_for(tail) : ChunkPlans{};
  for (int64_t r0 = 0; r0 < all.N; r0 += Nc) {
    const int rr = static_cast<int>(std::min<int64_t>(Nc, all.N - r0));
    const ChunkPlans& p = rr == Nc ? full : last;
    const char* xc = static_cast<const char*>(x.data) + r0 * all.C * es;
    p.logits->run(wd, xc, 0.0f, L, stream);
    const int* t = tg + r0;
    const float* d = dloss_p + r0;
    float* lo = loss_p + r0;
    if (logits == DType::f32) {
      switch (x.dtype) {
        case DType::f32: launch_row_loss_grad<float, float>(L, Vp, ldg, rr, all.V, t, d, lo, stream); break;
        case DType::bf16:
          launch_row_loss_grad<float, __nv_bfloat16>(L, Vp, ldg, rr, all.V, t, d, lo, stream);
          break;
        default: launch_row_loss_grad<float, __half>(L, Vp, ldg, rr, all.V, t, d, lo, stream); break;
      }
    } else if (logits == DType::bf16) {
      launch_row_loss_grad<__nv_bfloat16, __nv_bfloat16>(L, Vp, ldg, rr, all.V, t, d, lo, stream);
    } else {
      launch_row_loss_grad<__half, __half>(L, Vp, ldg, rr, all.V, t, d, lo, stream);
    }
    p.dx->run(wd, L, 0.0f, dx_p + r0 * all.C, stream);
    if (p.dw) p.dw->run(xc, L, 1.0f, dw_p, stream);
    if (p.dw_tail) p.dw_tail->run(xc, static_cast<const char*>(L) + V8 * es, r0 == 0 ? 0.0f : 1.0f, dw_tail, stream);
  }
  if (pad) {  // the tail's first V - V8 classes are dw's last rows
    const int64_t n = (all.V - V8) * all.C;
    add_f32_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(dw_p + V8 * all.C, dw_tail, n);
    ZT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace zt
