// CpuKernels: matrix products (CBLAS), bias gradients, embedding, and the
// element-wise and reduction operations.
#include <cblas.h>

#include <climits>
#include <string>
#include <cmath>
#include <cstring>

#include "modules/cpu_kernels.hpp"
#include "modules/cpu_kernels_detail.hpp"

namespace zt {
namespace {

using cpu::load;
using cpu::narrow;

bool is_f64(const Tensor& t) { return t.defined() && t.dtype == DType::f64; }

int blas_int(int64_t v) {
  ZT_CHECK(v >= 0 && v <= INT_MAX, "matrix dimension ", v, " exceeds the BLAS integer range");
  return static_cast<int>(v);
}

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, const float* B,
          float beta, float* C) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              blas_int(M), blas_int(N), blas_int(K), 1.0f, A, blas_int(ta ? M : K), B,
              blas_int(tb ? K : N), beta, C, blas_int(N));
}
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, const double* B,
          double beta, double* C) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              blas_int(M), blas_int(N), blas_int(K), 1.0, A, blas_int(ta ? M : K), B,
              blas_int(tb ? K : N), beta, C, blas_int(N));
}

template <typename M>
void matmul_impl(cpu::Staging& st, const Tensor& out, const Tensor& a, bool ta, const Tensor& b,
                 bool tb, bool accumulate, const Tensor& bias, int64_t Mr, int64_t N, int64_t K) {
  const M* A = st.in<M>(a);
  const M* Bm = st.in<M>(b);
  M* C = st.out<M>(out, accumulate);
  if (bias.defined()) {
    // The bias enters through C with beta = 1: out = (out or 0) + bias + op(a) op(b).
    const M* bp = st.in<M>(bias);
#pragma omp parallel for schedule(static) if (Mr * N > cpu::kParallelGrain)
    for (int64_t r = 0; r < Mr; ++r) {
      M* row = C + r * N;
      if (accumulate) {
        for (int64_t j = 0; j < N; ++j) row[j] += bp[j];
      } else {
        std::memcpy(row, bp, static_cast<size_t>(N) * sizeof(M));
      }
    }
  }
  const M beta = (accumulate || bias.defined()) ? M(1) : M(0);
  if (Mr > 0 && N > 0) {
    if (K > 0) {
      gemm(ta, tb, Mr, N, K, A, Bm, beta, C);
    } else if (beta == M(0)) {
      std::memset(C, 0, static_cast<size_t>(Mr * N) * sizeof(M));
    }
  }
  st.commit();
}

}  // namespace

void CpuKernels::matmul(Arena& ws, const Tensor& out, const Tensor& a, bool trans_a,
                        const Tensor& b, bool trans_b, bool accumulate, const Tensor& bias) {
  const int64_t M = cpu::rows(out), N = cpu::cols(out);
  const int64_t K = trans_a ? cpu::rows(a) : cpu::cols(a);
  ZT_CHECK((trans_a ? cpu::cols(a) : cpu::rows(a)) == M, "matmul: a ", a.shape.str(),
           trans_a ? "^T" : "", " does not give ", M, " rows of out ", out.shape.str());
  ZT_CHECK((trans_b ? cpu::cols(b) : cpu::rows(b)) == K && (trans_b ? cpu::rows(b) : cpu::cols(b)) == N,
           "matmul: b ", b.shape.str(), trans_b ? "^T" : "", " is not (", K, ", ", N, ")");
  ZT_CHECK(!bias.defined() || bias.numel() == N, "matmul: bias ", bias.shape.str(), " for ", N,
           " columns");
  cpu::Staging st(ws);
  if (is_f64(out) || is_f64(a) || is_f64(b) || is_f64(bias)) {
    matmul_impl<double>(st, out, a, trans_a, b, trans_b, accumulate, bias, M, N, K);
  } else {
    matmul_impl<float>(st, out, a, trans_a, b, trans_b, accumulate, bias, M, N, K);
  }
}

// Column sums with each thread owning a range of columns and walking the rows
// in order: deterministic, no atomics.
template <typename M>
static void column_sums_into(M* dst, const M* src, int64_t R, int64_t N) {
  const bool par = R * N > cpu::kParallelGrain;
#pragma omp parallel if (par)
  {
    int64_t c0, c1;
    cpu::split_range(N, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    for (int64_t r = 0; r < R; ++r) {
      const M* row = src + r * N;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) dst[c] += row[c];
    }
  }
}

void CpuKernels::bias_grad(const Tensor& dbias, const Tensor& dout) {
  const int64_t N = cpu::cols(dout), R = cpu::rows(dout);
  ZT_CHECK(dbias.numel() == N, "bias_grad: dbias ", dbias.shape.str(), " for dout ", dout.shape.str());
  if (dout.dtype == DType::f64) {
    column_sums_into(cpu::math_ptr<double>(dbias, "dbias"), cpu::math_ptr<double>(dout, "dout"), R, N);
  } else {
    column_sums_into(cpu::math_ptr<float>(dbias, "dbias"), cpu::math_ptr<float>(dout, "dout"), R, N);
  }
}

// ---- embedding ------------------------------------------------------------------

void CpuKernels::embedding_fwd(const Tensor& out, const Tensor& tokens, const Tensor& wte,
                               const Tensor& wpe, const Tensor& doc_start) {
  ZT_CHECK(tokens.shape.rank() == 2 && out.shape.rank() == 3, "embedding: tokens (B, T), out (B, T, C)");
  const int64_t B = tokens.shape[0], T = tokens.shape[1], C = out.shape[2];
  // Positions count from each token's document start ([Note: document masking]).
  const int32_t* doc = cpu::doc_starts(doc_start, B, T, "embedding_fwd");
  const int64_t V = wte.shape[0];
  const bool pos = wpe.defined();  // no wpe: rotary positions (Llama), a plain lookup
  ZT_CHECK(out.shape == (Shape{B, T, C}) && wte.shape[1] == C && (!pos || (wpe.shape[1] == C && wpe.shape[0] >= T)),
           "embedding shapes: out ", out.shape.str(), " wte ", wte.shape.str(), " wpe ",
           pos ? wpe.shape.str() : std::string("none"));
  const int32_t* tok = cpu::typed<const int32_t>(tokens);
  for (int64_t i = 0; i < B * T; ++i) ZT_CHECK(tok[i] >= 0 && tok[i] < V, "token ", tok[i], " outside vocabulary of ", V);
  cpu::with_storage(wte.dtype, [&](auto wt) {
    cpu::with_storage(out.dtype, [&](auto ot) {
      using TW = decltype(wt);
      using TO = decltype(ot);
      using M = cpu::math_t<TW, TO>;
      const TW* e = cpu::typed<const TW>(wte);
      TO* o = cpu::typed<TO>(out);
      if (!pos) {
#pragma omp parallel for schedule(static) if (B * T * C > cpu::kParallelGrain)
        for (int64_t bt = 0; bt < B * T; ++bt) {
          const TW* er = e + tok[bt] * C;
          TO* orow = o + bt * C;
          for (int64_t c = 0; c < C; ++c) orow[c] = narrow<TO>(load<M>(er[c]));
        }
        return;
      }
      ZT_CHECK(wpe.dtype == wte.dtype, "embedding: wte and wpe dtypes differ");
      const TW* p = cpu::typed<const TW>(wpe);
#pragma omp parallel for schedule(static) if (B * T * C > cpu::kParallelGrain)
      for (int64_t bt = 0; bt < B * T; ++bt) {
        const TW* er = e + tok[bt] * C;
        const TW* pr = p + (bt % T - cpu::doc_start_of(doc, bt)) * C;
        TO* orow = o + bt * C;
        for (int64_t c = 0; c < C; ++c) orow[c] = narrow<TO>(load<M>(er[c]) + load<M>(pr[c]));
      }
    });
  });
}

template <typename M>
static void embedding_bwd_impl(M* dwte, M* dwpe, const M* dout, const int32_t* tok, const int32_t* doc,
                               int64_t B, int64_t T, int64_t C) {
  // Threads own column ranges and walk tokens in order: repeated tokens
  // accumulate without races, in the same order for any thread count.
#pragma omp parallel if (B * T * C > cpu::kParallelGrain)
  {
    int64_t c0, c1;
    cpu::split_range(C, omp_get_num_threads(), omp_get_thread_num(), c0, c1);
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const M* d = dout + bt * C;
      M* we = dwte + tok[bt] * C;
      if (dwpe == nullptr) {
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) we[c] += d[c];
        continue;
      }
      M* wp = dwpe + (bt % T - cpu::doc_start_of(doc, bt)) * C;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) {
        we[c] += d[c];
        wp[c] += d[c];
      }
    }
  }
}

void CpuKernels::embedding_bwd(const Tensor& dwte, const Tensor& dwpe, const Tensor& dout,
                               const Tensor& tokens, const Tensor& doc_start) {
  const int64_t B = tokens.shape[0], T = tokens.shape[1], C = cpu::cols(dout);
  const int32_t* doc = cpu::doc_starts(doc_start, B, T, "embedding_bwd");
  const int64_t V = dwte.shape[0];
  const bool pos = dwpe.defined();
  ZT_CHECK(dout.numel() == B * T * C && dwte.shape[1] == C && (!pos || (dwpe.shape[1] == C && dwpe.shape[0] >= T)),
           "embedding_bwd shapes");
  const int32_t* tok = cpu::typed<const int32_t>(tokens);
  for (int64_t i = 0; i < B * T; ++i) ZT_CHECK(tok[i] >= 0 && tok[i] < V, "token ", tok[i], " outside vocabulary of ", V);
  if (dout.dtype == DType::f64) {
    embedding_bwd_impl(cpu::math_ptr<double>(dwte, "dwte"), pos ? cpu::math_ptr<double>(dwpe, "dwpe") : nullptr,
                       cpu::math_ptr<double>(dout, "dout"), tok, doc, B, T, C);
  } else {
    embedding_bwd_impl(cpu::math_ptr<float>(dwte, "dwte"), pos ? cpu::math_ptr<float>(dwpe, "dwpe") : nullptr,
                       cpu::math_ptr<float>(dout, "dout"), tok, doc, B, T, C);
  }
}

// ---- element-wise -------------------------------------------------------------

void cpu::cast_into(const Tensor& dst, const Tensor& src) {
  ZT_CHECK(dst.numel() == src.numel(), "cast: ", src.shape.str(), " into ", dst.shape.str());
  const int64_t n = src.numel();
  if (dst.dtype == src.dtype) {
    if (dst.data != src.data) std::memcpy(dst.data, src.data, dst.bytes());
    return;
  }
  with_storage(src.dtype, [&](auto st) {
    with_storage(dst.dtype, [&](auto dt) {
      using TS = decltype(st);
      using TD = decltype(dt);
      using M = math_t<TS, TD>;
      const TS* s = typed<const TS>(src);
      TD* d = typed<TD>(dst);
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
      for (int64_t i = 0; i < n; ++i) d[i] = narrow<TD>(load<M>(s[i]));
    });
  });
}

void CpuKernels::cast(const Tensor& dst, const Tensor& src) { cpu::cast_into(dst, src); }

void CpuKernels::zero(const Tensor& t) {
  if (t.defined()) std::memset(t.data, 0, t.bytes());
}

void CpuKernels::add(const Tensor& out, const Tensor& a, const Tensor& b) {
  ZT_CHECK(out.numel() == a.numel() && out.numel() == b.numel(), "add: ", a.shape.str(), " + ",
           b.shape.str(), " -> ", out.shape.str());
  const int64_t n = out.numel();
  cpu::with_storage(out.dtype, [&](auto ot) {
    cpu::with_storage(a.dtype, [&](auto at) {
      using TO = decltype(ot);
      using TA = decltype(at);
      ZT_CHECK(b.dtype == a.dtype, "add: a and b must share a dtype");
      using M = cpu::math_t<TO, TA>;
      const TA* pa = cpu::typed<const TA>(a);
      const TA* pb = cpu::typed<const TA>(b);
      TO* po = cpu::typed<TO>(out);
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
      for (int64_t i = 0; i < n; ++i) po[i] = narrow<TO>(load<M>(pa[i]) + load<M>(pb[i]));
    });
  });
}

void CpuKernels::scale(const Tensor& x, double alpha) {
  const int64_t n = x.numel();
  cpu::with_storage(x.dtype, [&](auto xt) {
    using TX = decltype(xt);
    using M = cpu::math_t<TX>;
    const M s = static_cast<M>(alpha);
    TX* p = cpu::typed<TX>(x);
#pragma omp parallel for simd schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) p[i] = narrow<TX>(load<M>(p[i]) * s);
  });
}

namespace {

constexpr int kMaxSquareParts = 256;

// [Note: host sums of squares] part_sum(b, e) of each of `parts` ranges,
// added in range order; each range is summed by one thread of the team,
// whatever its size.
template <typename PartSum>
double sum_by_parts(int64_t n, int parts, PartSum part_sum) {
  ZT_CHECK(parts >= 1 && parts <= kMaxSquareParts, "sums of squares in ", parts, " parts");
  double part[kMaxSquareParts] = {};
#pragma omp parallel if (parts > 1)
  {
    const int team = omp_get_num_threads();
    for (int p = omp_get_thread_num(); p < parts; p += team) {
      int64_t b, e;
      cpu::split_range(n, parts, p, b, e);
      part[p] = part_sum(b, e);
    }
  }
  double total = 0;
  for (int p = 0; p < parts; ++p) total += part[p];
  return total;
}

}  // namespace

int sum_squares_parts(int64_t n) {
  return n > cpu::kParallelGrain ? std::min(omp_get_max_threads(), kMaxSquareParts) : 1;
}

double add_sum_squares(float* dst, const float* src, int64_t n, int parts) {
  return sum_by_parts(n, parts, [&](int64_t b, int64_t e) {
    double s = 0;
    for (int64_t i = b; i < e; ++i) {
      const float v = dst[i] + src[i];
      dst[i] = v;
      s += static_cast<double>(v) * static_cast<double>(v);
    }
    return s;
  });
}

void CpuKernels::sum_squares(const Tensor& x, const Tensor& acc) {
  ZT_CHECK(acc.numel() == 1, "sum_squares: acc must have one element");
  double* out = cpu::math_ptr<double>(acc, "sum_squares acc");
  const int64_t n = x.numel();
  double total = 0;
  cpu::with_storage(x.dtype, [&](auto xt) {
    using TX = decltype(xt);
    const TX* p = cpu::typed<const TX>(x);
    total = sum_by_parts(n, sum_squares_parts(n), [&](int64_t b, int64_t e) {
      double s = 0;
      for (int64_t i = b; i < e; ++i) {
        const double v = load<double>(p[i]);
        s += v * v;
      }
      return s;
    });
  });
  *out += total;
}

void CpuKernels::sum_into(const Tensor& x, const Tensor& acc) {
  ZT_CHECK(acc.numel() == 1, "sum_into: acc must have one element");
  double* out = cpu::math_ptr<double>(acc, "sum_into acc");
  ZT_CHECK(x.dtype == DType::f32 || x.dtype == DType::f64, "sum_into: x must be f32 or f64, got ",
           dtype_name(x.dtype));
  const int64_t n = x.numel();
  // One thread, index order, straight into acc: the bits of the host loop
  // this replaces (loss bits are compared exactly across builds and layouts).
  double s = *out;
  if (x.dtype == DType::f32) {
    const float* p = cpu::typed<const float>(x);
    for (int64_t i = 0; i < n; ++i) s += p[i];
  } else {
    const double* p = cpu::typed<const double>(x);
    for (int64_t i = 0; i < n; ++i) s += p[i];
  }
  *out = s;
}

void CpuKernels::check_overflow(const Tensor& x, const Tensor& flag) {
  ZT_CHECK(flag.numel() == 1, "check_overflow: flag must have one element");
  int32_t* f = cpu::math_ptr<int32_t>(flag, "overflow flag");
  const int64_t n = x.numel();
  int bad = 0;
  cpu::with_storage(x.dtype, [&](auto xt) {
    using TX = decltype(xt);
    const TX* p = cpu::typed<const TX>(x);
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > cpu::kParallelGrain)
    for (int64_t i = 0; i < n; ++i) bad |= std::isfinite(load<double>(p[i])) ? 0 : 1;
  });
  if (bad) *f = 1;
}

}  // namespace zt
