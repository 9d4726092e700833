// cuBLASLt matrix products; see [Note: matmul precision].
#include "core/log.hpp"
#include "modules/cuda/common.cuh"
#include "modules/cuda/elementwise.cuh"
#include "modules/cuda/lt_tune.cuh"
#include "modules/cuda/matmul.cuh"

namespace zt::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: ZT_THROW("matmul: CUDA kernels take f32, bf16 or f16, got ", dtype_name(t));
  }
}

bool is_16bit(DType t) { return t == DType::bf16 || t == DType::f16; }

// The type both inputs are brought to (see the Note).
DType input_type(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::f32) return b;
  if (b == DType::f32) return a;
  return DType::bf16;  // bf16 with f16: bf16 keeps f16's range
}

// Largest power of two (up to 256) that divides the address: cuBLASLt
// heuristics must only offer algorithms that work at this alignment.
int alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int al = 1;
  while (al < 256 && (a & static_cast<uintptr_t>(al)) == 0) al <<= 1;
  return al;
}

// `t` as dtype `want`: itself, or a converted copy in the arena.
const void* as_type(Arena& ws, const Tensor& t, DType want, cudaStream_t stream) {
  if (t.dtype == want) return t.data;
  const Tensor tmp = ws.alloc(want, Shape{t.numel()});
  cast(tmp.data, want, t.data, t.dtype, t.numel(), stream);
  return tmp.data;
}

}  // namespace

struct Matmul::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  // The algorithm ([Note: timed algorithm choice] in lt_tune.cuh); found()
  // is false where cuBLASLt has none.
  LtAlgo algo;
  // What every call of the product shares; each call sets its pointers.
  LtCall call;
  ~Plan() {
    if (lc) (void)cublasLtMatrixLayoutDestroy(lc);
    if (lb) (void)cublasLtMatrixLayoutDestroy(lb);
    if (la) (void)cublasLtMatrixLayoutDestroy(la);
    if (op) (void)cublasLtMatmulDescDestroy(op);
  }
};

Matmul::Matmul(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes, bool allow_tf32)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes), allow_tf32_(allow_tf32) {}

Matmul::~Matmul() = default;

Matmul::Plan* Matmul::plan(const Key& wanted) {
  auto it = plans_.find(wanted);
  if (it != plans_.end()) return it->second.get();
  const auto [m, n, k, lda, ldb, ta, tb, in_i, d_i, epi_i, al_a, al_b, al_c, al_aux] = wanted;
  const DType in_type = static_cast<DType>(in_i), d_type = static_cast<DType>(d_i);
  auto p = std::make_unique<Plan>();
  const cublasComputeType_t compute =
      (in_type == DType::f32 && allow_tf32_) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  ZT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, compute, CUDA_R_32F));
  // cuBLASLt's A is our b and its B our a (column-major view of row-major).
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (static_cast<Epi>(epi_i) == Epi::bias) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  } else if (static_cast<Epi>(epi_i) == Epi::dgelu || static_cast<Epi>(epi_i) == Epi::bias_gelu_aux) {
    // The pre-activation: D's shape, type and leading dimension (m).
    const cublasLtEpilogue_t epi =
        static_cast<Epi>(epi_i) == Epi::dgelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    const int64_t ld = static_cast<int64_t>(m);
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    // The heuristic reads the pointer's alignment only: a stand-in with the
    // aux input's alignment (part of the key) until the call sets it.
    const void* aux = reinterpret_cast<const void*>(static_cast<uintptr_t>(al_aux));
    ZT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
  // Stored shapes, column-major: A = b is (ldb x rows(b)), B = a is (lda x rows(a)).
  const uint64_t a_rows = tb ? k : m, a_cols = tb ? m : k;  // op(A) is (m x k)
  const uint64_t b_rows = ta ? n : k, b_cols = ta ? k : n;  // op(B) is (k x n)
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, cuda_type(in_type), a_rows, a_cols, ldb));
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, cuda_type(in_type), b_rows, b_cols, lda));
  ZT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, cuda_type(d_type), m, n, m));

  std::vector<cublasLtMatmulAlgo_t> candidates =
      lt_candidates(handle_, p->op, p->la, p->lb, p->lc, workspace_bytes_, al_a, al_b, al_c);
  static const char* const kEpi[] = {"", " bias", " dgelu", " bias_gelu_aux"};
  // The caller's M x N x K: cuBLASLt's m is the caller's N.
  p->algo = LtAlgo(std::move(candidates), lt_timed_choice(),
                   detail::concat("matmul ", n, "x", m, "x", k, " ", dtype_name(in_type), "->", dtype_name(d_type),
                                  ta ? " ta" : "", tb ? " tb" : "", kEpi[epi_i]));
  p->call = lt_shared_call(handle_, p->op, p->la, p->lb, p->lc, static_cast<size_t>(m * n) * dtype_size(d_type),
                           workspace_, workspace_bytes_);
  if (static_cast<Epi>(epi_i) == Epi::bias_gelu_aux) p->call.aux_bytes = p->call.d_bytes;  // aux written
  Plan* raw = p.get();
  plans_.emplace(wanted, std::move(p));
  return raw;
}

Matmul::Key Matmul::key(const void* d, DType d_type, const void* a, bool ta, const void* b, bool tb,
                        DType in_type, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, Epi epi,
                        const void* aux) {
  return Key{N, M, K, lda, ldb, ta, tb, static_cast<int>(in_type), static_cast<int>(d_type), static_cast<int>(epi),
             alignment(b), alignment(a), alignment(d), aux != nullptr ? alignment(aux) : 0};
}

bool Matmul::gemm(void* d, DType d_type, const void* a, bool ta, const void* b, bool tb, DType in_type, int64_t M,
                  int64_t N, int64_t K, int64_t lda, int64_t ldb, float beta, const void* bias,
                  cudaStream_t stream, const void* aux) {
  const Epi epi = aux != nullptr ? (bias != nullptr ? Epi::bias_gelu_aux : Epi::dgelu)
                                  : bias != nullptr ? Epi::bias : Epi::none;
  Plan* p = plan(key(d, d_type, a, ta, b, tb, in_type, M, N, K, lda, ldb, epi, aux));
  if (!p->algo.found()) return false;
  if (bias != nullptr) {
    ZT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (aux != nullptr) {
    ZT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
  LtCall call = p->call;
  call.a = b;  // cuBLASLt's A is our b
  call.b = a;
  call.d = d;
  if (call.aux_bytes != 0) call.aux_out = aux;  // GELU_AUX_BIAS writes it
  p->algo.run(call, beta, stream);
  return true;
}

bool Matmul::product(Arena& ws, void* d, DType d_type, const Tensor& a, bool ta, const Tensor& b, bool tb,
                     DType in_type, bool accumulate, const Tensor& bias, int64_t M, int64_t N, int64_t K,
                     cudaStream_t stream) {
  const void* A = as_type(ws, a, in_type, stream);
  const void* B = as_type(ws, b, in_type, stream);
  const int64_t lda = cols(a), ldb = cols(b);
  const float beta = accumulate ? 1.0f : 0.0f;
  if (!bias.defined()) return gemm(d, d_type, A, ta, B, tb, in_type, M, N, K, lda, ldb, beta, nullptr, stream);
  const void* bias_d = as_type(ws, bias, d_type, stream);
  if (alignment(bias_d) >= 16 && gemm(d, d_type, A, ta, B, tb, in_type, M, N, K, lda, ldb, beta, bias_d, stream)) {
    return true;
  }
  // No epilogue: D = [D +] bias first, then D += product, once it is known
  // that the product can run.
  if (!plan(key(d, d_type, A, ta, B, tb, in_type, M, N, K, lda, ldb, Epi::none))->algo.found()) return false;
  bias_broadcast(d, d_type, bias.data, bias.dtype, M, N, accumulate, stream);
  return gemm(d, d_type, A, ta, B, tb, in_type, M, N, K, lda, ldb, 1.0f, nullptr, stream);
}

void Matmul::run(Arena& ws, const Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, bool accumulate,
                 const Tensor& bias, cudaStream_t stream) {
  const int64_t M = rows(out), N = cols(out);
  const int64_t K = ta ? rows(a) : cols(a);
  ZT_CHECK((ta ? cols(a) : rows(a)) == M, "matmul: a ", a.shape.str(), ta ? "^T" : "", " does not give ", M,
           " rows of out ", out.shape.str());
  ZT_CHECK((tb ? cols(b) : rows(b)) == K && (tb ? rows(b) : cols(b)) == N, "matmul: b ", b.shape.str(),
           tb ? "^T" : "", " is not (", K, ", ", N, ")");
  ZT_CHECK(!bias.defined() || bias.numel() == N, "matmul: bias ", bias.shape.str(), " for ", N, " columns");
  check_on_device(out, "matmul out");
  check_on_device(a, "matmul a");
  check_on_device(b, "matmul b");
  if (bias.defined()) check_on_device(bias, "matmul bias");
  (void)cuda_type(out.dtype);  // rejects f64 and integer outputs
  if (M == 0 || N == 0) return;

  ArenaScope scope(ws);
  DType in_type = input_type(a.dtype, b.dtype);
  // D: the output itself where cuBLASLt can write its dtype, else fp32 staging.
  void* d = out.data;
  DType d_type = out.dtype;
  auto stage_in_f32 = [&] {
    d = ws.alloc(DType::f32, Shape{M * N}).data;
    d_type = DType::f32;
    if (accumulate) cast(d, DType::f32, out.data, out.dtype, M * N, stream);
  };
  if (!(out.dtype == DType::f32 || (is_16bit(in_type) && out.dtype == in_type))) stage_in_f32();
  if (K == 0) {
    if (bias.defined()) {
      bias_broadcast(d, d_type, bias.data, bias.dtype, M, N, accumulate, stream);
    } else if (!accumulate) {
      ZT_CUDA_CHECK(cudaMemsetAsync(d, 0, static_cast<size_t>(M * N) * dtype_size(d_type), stream));
    }
  } else if (!product(ws, d, d_type, a, ta, b, tb, in_type, accumulate, bias, M, N, K, stream)) {
    // cuBLASLt has no 16-bit algorithm for these leading dimensions or
    // pointer alignments: the product runs in fp32 on aligned copies.
    ZT_CHECK(in_type != DType::f32, "cuBLASLt has no algorithm for ", M, "x", N, "x", K, " f32 (trans_a ", ta,
             ", trans_b ", tb, ")");
    if (!warned_fp32_fallback_) {
      log_warn("matmul ", M, "x", N, "x", K, " ", dtype_name(in_type), ": cuBLASLt has no 16-bit algorithm for "
               "these leading dimensions and alignments; running such products in fp32 (slower)");
      warned_fp32_fallback_ = true;
    }
    in_type = DType::f32;
    if (d_type != DType::f32) stage_in_f32();
    ZT_CHECK(product(ws, d, d_type, a, ta, b, tb, in_type, accumulate, bias, M, N, K, stream),
             "cuBLASLt has no algorithm for ", M, "x", N, "x", K, " f32 (trans_a ", ta, ", trans_b ", tb, ")");
  }
  if (d != out.data) cast(out.data, out.dtype, d, DType::f32, M * N, stream);
}

bool Matmul::run_dgelu(const Tensor& out, const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& pre,
                       cudaStream_t stream) {
  const int64_t M = rows(out), N = cols(out);
  const int64_t K = ta ? rows(a) : cols(a);
  ZT_CHECK((ta ? cols(a) : rows(a)) == M && (tb ? cols(b) : rows(b)) == K && (tb ? rows(b) : cols(b)) == N,
           "matmul dgelu: a ", a.shape.str(), ta ? "^T" : "", " b ", b.shape.str(), tb ? "^T" : "", " out ",
           out.shape.str());
  ZT_CHECK(pre.numel() == M * N, "matmul dgelu: pre ", pre.shape.str(), " for out ", out.shape.str());
  const DType t = out.dtype;
  if (!is_16bit(t) || a.dtype != t || b.dtype != t || pre.dtype != t) return false;
  if (M == 0 || N == 0 || K == 0 || N % 8 != 0 || alignment(pre.data) < 16) return false;
  for (const Tensor* x : {&out, &a, &b, &pre}) check_on_device(*x, "matmul dgelu operand");
  return gemm(out.data, t, a.data, ta, b.data, tb, t, M, N, K, cols(a), cols(b), 0.0f, nullptr, stream, pre.data);
}

bool Matmul::run_bias_gelu(const Tensor& out, const Tensor& pre, const Tensor& a, bool ta, const Tensor& b,
                           bool tb, const Tensor& bias, cudaStream_t stream) {
  const int64_t M = rows(out), N = cols(out);
  const int64_t K = ta ? rows(a) : cols(a);
  ZT_CHECK((ta ? cols(a) : rows(a)) == M && (tb ? cols(b) : rows(b)) == K && (tb ? rows(b) : cols(b)) == N,
           "matmul bias gelu: a ", a.shape.str(), ta ? "^T" : "", " b ", b.shape.str(), tb ? "^T" : "", " out ",
           out.shape.str());
  ZT_CHECK(pre.numel() == M * N && bias.numel() == N, "matmul bias gelu: pre ", pre.shape.str(), ", bias ",
           bias.shape.str(), " for out ", out.shape.str());
  const DType t = out.dtype;
  if (!is_16bit(t) || a.dtype != t || b.dtype != t || pre.dtype != t || bias.dtype != t) return false;
  if (M == 0 || N == 0 || K == 0 || N % 8 != 0 || alignment(pre.data) < 16 || alignment(bias.data) < 16)
    return false;
  for (const Tensor* x : {&out, &pre, &a, &b, &bias}) check_on_device(*x, "matmul bias gelu operand");
  return gemm(out.data, t, a.data, ta, b.data, tb, t, M, N, K, cols(a), cols(b), 0.0f, bias.data, stream, pre.data);
}

}  // namespace zt::cuda
