// Finite-difference checks of every CpuKernels backward in f64, and forward
// checks against naive formulas.
#include <cmath>
#include <limits>

#include "module_test_support.hpp"
#include "modules/cpu_kernels_detail.hpp"

namespace zt::test {
namespace {

TEST_F(KernelFixture, MatmulMatchesNaiveForAllTransposes) {
  const int64_t M = 5, N = 4, K = 3;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      const Tensor a = rand(ta ? Shape{K, M} : Shape{M, K}, 1);
      const Tensor b = rand(tb ? Shape{N, K} : Shape{K, N}, 2);
      const Tensor bias = rand(Shape{N}, 3);
      const Tensor out = rand(Shape{M, N}, 4);
      const Tensor before = make(Shape{M, N});
      std::memcpy(before.data, out.data, out.bytes());
      k.matmul(ws, out, a, ta, b, tb, /*accumulate=*/true, bias);
      const double* A = a.as<double>();
      const double* Bm = b.as<double>();
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          double s = before.as<double>()[i * N + j] + bias.as<double>()[j];
          for (int64_t l = 0; l < K; ++l) s += (ta ? A[l * M + i] : A[i * K + l]) * (tb ? Bm[j * K + l] : Bm[l * N + j]);
          EXPECT_NEAR(out.as<double>()[i * N + j], s, 1e-12) << ta << tb;
        }
      }
    }
  }
}

TEST_F(KernelFixture, LinearLayerGradients) {
  // y = x W^T + b; L = sum(R * y).
  const int64_t N = 6, IC = 5, OC = 4;
  const Tensor x = rand(Shape{2, 3, IC}, 10), w = rand(Shape{OC, IC}, 11), b = rand(Shape{OC}, 12);
  const Tensor R = rand(Shape{2, 3, OC}, 13), y = make(Shape{2, 3, OC});
  auto f = [&] {
    k.matmul(ws, y, x, false, w, true, false, b);
    return sum_product(y, R);
  };
  const Tensor dx = make(Shape{N, IC}), dw = make(Shape{OC, IC}), db = make(Shape{OC});
  k.matmul(ws, dx, R, false, w, false, false);
  k.matmul(ws, dw, R, true, x, false, true);
  k.bias_grad(db, R);
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "dx");
  check_fd(f, w.as<double>(), dw.as<double>(), all_indices(w.numel()), "dW");
  check_fd(f, b.as<double>(), db.as<double>(), all_indices(b.numel()), "db");
}

TEST_F(KernelFixture, LayerNormGradients) {
  const int64_t N = 6, C = 7;
  const Tensor x = rand(Shape{N, C}, 20, 2.0), w = rand(Shape{C}, 21), b = rand(Shape{C}, 22);
  const Tensor R = rand(Shape{N, C}, 23), out = make(Shape{N, C}), mean = make(Shape{N}), rstd = make(Shape{N});
  auto f = [&] {
    k.layernorm_fwd(out, mean, rstd, x, w, b);
    return sum_product(out, R);
  };
  f();
  // The forward normalises each row.
  for (int64_t n = 0; n < N; ++n) {
    double m = 0;
    for (int64_t c = 0; c < C; ++c) m += x.as<double>()[n * C + c];
    EXPECT_NEAR(mean.as<double>()[n], m / C, 1e-14);
  }
  const Tensor dx = rand(Shape{N, C}, 24), dx0 = make(Shape{N, C}), dw = make(Shape{C}), db = make(Shape{C});
  std::memcpy(dx0.data, dx.data, dx.bytes());
  k.layernorm_bwd(dx, /*accumulate_dx=*/true, dw, db, R, x, w, mean, rstd);
  for (int64_t i = 0; i < dx.numel(); ++i) dx.as<double>()[i] -= dx0.as<double>()[i];  // the accumulated part
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "dx");
  check_fd(f, w.as<double>(), dw.as<double>(), all_indices(C), "dw");
  check_fd(f, b.as<double>(), db.as<double>(), all_indices(C), "db");
}

TEST_F(KernelFixture, AttentionMatchesNaiveAndGradients) {
  const int64_t B = 2, T = 5, C = 8;
  const int NH = 2;
  const int64_t hs = C / NH;
  const Tensor qkv = rand(Shape{B, T, 3 * C}, 30, 1.5), out = make(Shape{B, T, C}), lse = make(Shape{B, NH, T});
  const Tensor R = rand(Shape{B, T, C}, 31);
  auto f = [&] {
    k.attention_fwd(ws, out, lse, qkv, NH, Tensor());
    return sum_product(out, R);
  };
  f();
  const double* q = qkv.as<double>();
  for (int64_t b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> p(static_cast<size_t>(t + 1));
        double mx = -1e300, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double s = 0;
          for (int64_t i = 0; i < hs; ++i) s += q[(b * T + t) * 3 * C + h * hs + i] * q[(b * T + u) * 3 * C + C + h * hs + i];
          p[static_cast<size_t>(u)] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, p[static_cast<size_t>(u)]);
        }
        for (auto& v : p) sum += (v = std::exp(v - mx));
        for (int64_t i = 0; i < hs; ++i) {
          double o = 0;
          for (int64_t u = 0; u <= t; ++u) o += p[static_cast<size_t>(u)] / sum * q[(b * T + u) * 3 * C + 2 * C + h * hs + i];
          EXPECT_NEAR(out.as<double>()[(b * T + t) * C + h * hs + i], o, 1e-13);
        }
        EXPECT_NEAR(lse.as<double>()[(b * NH + h) * T + t], mx + std::log(sum), 1e-13);
      }
    }
  }
  const Tensor dqkv = rand(Shape{B, T, 3 * C}, 32);  // garbage: backward must overwrite
  k.attention_bwd(ws, dqkv, R, qkv, out, lse, NH, Tensor());
  check_fd(f, qkv.as<double>(), dqkv.as<double>(), all_indices(qkv.numel()), "dqkv");
}

// Documents ([Note: document masking]): row 0 holds documents of 3, 1 and 3
// tokens, row 1 one of 2 and one of 5. Forward against the naive formula
// over keys doc_start..t; backward against finite differences.
TEST_F(KernelFixture, AttentionWithDocumentsMatchesNaiveAndGradients) {
  const int64_t B = 2, T = 7, C = 8;
  const int NH = 2;
  const int64_t hs = C / NH;
  const Tensor ds = doc_start({{3, 1, 3}, {2, 5}}, T);
  const Tensor qkv = rand(Shape{B, T, 3 * C}, 130, 1.5), out = make(Shape{B, T, C}), lse = make(Shape{B, NH, T});
  const Tensor R = rand(Shape{B, T, C}, 131);
  auto f = [&] {
    k.attention_fwd(ws, out, lse, qkv, NH, ds);
    return sum_product(out, R);
  };
  f();
  const double* q = qkv.as<double>();
  for (int64_t b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t s0 = ds.as<int32_t>()[b * T + t];
        std::vector<double> p(static_cast<size_t>(t + 1), 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t u = s0; u <= t; ++u) {
          double s = 0;
          for (int64_t i = 0; i < hs; ++i) s += q[(b * T + t) * 3 * C + h * hs + i] * q[(b * T + u) * 3 * C + C + h * hs + i];
          p[static_cast<size_t>(u)] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, p[static_cast<size_t>(u)]);
        }
        for (int64_t u = s0; u <= t; ++u) sum += (p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - mx));
        for (int64_t i = 0; i < hs; ++i) {
          double o = 0;
          for (int64_t u = s0; u <= t; ++u) o += p[static_cast<size_t>(u)] / sum * q[(b * T + u) * 3 * C + 2 * C + h * hs + i];
          EXPECT_NEAR(out.as<double>()[(b * T + t) * C + h * hs + i], o, 1e-13) << b << " " << t;
        }
        EXPECT_NEAR(lse.as<double>()[(b * NH + h) * T + t], mx + std::log(sum), 1e-13);
      }
    }
  }
  // A one-token document attends to itself only: its output is its value.
  for (int64_t i = 0; i < C; ++i) EXPECT_NEAR(out.as<double>()[3 * C + i], q[3 * 3 * C + 2 * C + i], 1e-15);
  const Tensor dqkv = rand(Shape{B, T, 3 * C}, 132);  // garbage: backward must overwrite
  k.attention_bwd(ws, dqkv, R, qkv, out, lse, NH, ds);
  check_fd(f, qkv.as<double>(), dqkv.as<double>(), all_indices(qkv.numel()), "dqkv");
}

// The property packing rests on: each document of a packed row gets, in
// fp32, the outputs and input gradients it gets alone in a row of its own.
TEST_F(KernelFixture, AttentionOfPackedRowEqualsDocumentsAlone) {
  const int64_t T = 9, C = 16;
  const int NH = 4;
  const std::vector<int64_t> lens = {4, 1, 3, 1};
  const Tensor ds = doc_start({lens}, T);
  const Tensor qkv = rand(Shape{1, T, 3 * C}, 140, 1.5, DType::f32), g = rand(Shape{1, T, C}, 141, 1.0, DType::f32);
  const Tensor out = make(Shape{1, T, C}, DType::f32), lse = make(Shape{1, NH, T}, DType::f32);
  const Tensor dqkv = make(Shape{1, T, 3 * C}, DType::f32);
  k.attention_fwd(ws, out, lse, qkv, NH, ds);
  k.attention_bwd(ws, dqkv, g, qkv, out, lse, NH, ds);
  int64_t s = 0;
  for (int64_t L : lens) {
    SCOPED_TRACE("document at " + std::to_string(s) + " of length " + std::to_string(L));
    const Tensor q1 = make(Shape{1, L, 3 * C}, DType::f32), g1 = make(Shape{1, L, C}, DType::f32);
    std::memcpy(q1.data, qkv.as<float>() + s * 3 * C, q1.bytes());
    std::memcpy(g1.data, g.as<float>() + s * C, g1.bytes());
    const Tensor o1 = make(Shape{1, L, C}, DType::f32), l1 = make(Shape{1, NH, L}, DType::f32);
    const Tensor d1 = make(Shape{1, L, 3 * C}, DType::f32);
    k.attention_fwd(ws, o1, l1, q1, NH, Tensor());
    k.attention_bwd(ws, d1, g1, q1, o1, l1, NH, Tensor());
    for (int64_t i = 0; i < L * C; ++i) EXPECT_NEAR(out.as<float>()[s * C + i], o1.as<float>()[i], 1e-6) << i;
    for (int h = 0; h < NH; ++h)
      for (int64_t t = 0; t < L; ++t) EXPECT_NEAR(lse.as<float>()[h * T + s + t], l1.as<float>()[h * L + t], 1e-6);
    for (int64_t i = 0; i < L * 3 * C; ++i) EXPECT_NEAR(dqkv.as<float>()[s * 3 * C + i], d1.as<float>()[i], 1e-6) << i;
    s += L;
  }
}

TEST_F(KernelFixture, DocStartMustDescribeDocuments) {
  const int64_t T = 4, C = 4;
  const Tensor qkv = rand(Shape{1, T, 3 * C}, 150), out = make(Shape{1, T, C}), lse = make(Shape{1, 1, T});
  const Tensor bad = make(Shape{1, T}, DType::i32);
  int32_t* d = bad.as<int32_t>();
  d[0] = 0, d[1] = 0, d[2] = 1, d[3] = 1;  // token 2 starts at 1, a token of another document
  EXPECT_THROW(k.attention_fwd(ws, out, lse, qkv, 1, bad), std::exception);
  const Tensor wrong_shape = make(Shape{1, T + 1}, DType::i32);
  EXPECT_THROW(k.attention_fwd(ws, out, lse, qkv, 1, wrong_shape), std::exception);
}

TEST_F(KernelFixture, GeluGradients) {
  const Tensor x = rand(Shape{40}, 40, 4.0), y = make(Shape{40}), R = rand(Shape{40}, 41);
  auto f = [&] {
    k.gelu_fwd(y, x);
    return sum_product(y, R);
  };
  f();
  for (int64_t i = 0; i < 40; ++i) {
    const double v = x.as<double>()[i];
    EXPECT_NEAR(y.as<double>()[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-15);
  }
  const Tensor dx = make(Shape{40});
  std::memcpy(dx.data, R.data, R.bytes());
  k.gelu_bwd(dx, dx, x);  // in place, as the block uses it
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(40), "dx");
}

TEST_F(KernelFixture, ClassifierLossAndGradientsInChunks) {
  const int64_t N = 7, C = 5, V = 11;
  CpuKernels chunked(3 * V * sizeof(double));  // 3 rows per chunk: chunks of 3, 3, 1
  const Tensor x = rand(Shape{N, C}, 50, 2.0), w = rand(Shape{V, C}, 51);
  const Tensor tg = make(Shape{N}, DType::i32);
  fill_tokens(tg, 52, static_cast<int>(V));
  tg.as<int32_t>()[4] = -1;  // ignored row
  const Tensor wl = rand(Shape{N}, 53), losses = make(Shape{N}), lse = make(Shape{N});
  auto f = [&] {
    chunked.classifier_fwd(ws, losses, lse, x, w, tg);
    return sum_product(losses, wl);
  };
  f();
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> z(static_cast<size_t>(V));
    double mx = -1e300, s = 0;
    for (int64_t v = 0; v < V; ++v) {
      double d = 0;
      for (int64_t c = 0; c < C; ++c) d += x.as<double>()[n * C + c] * w.as<double>()[v * C + c];
      z[static_cast<size_t>(v)] = d;
      mx = std::max(mx, d);
    }
    for (double d : z) s += std::exp(d - mx);
    const int32_t t = tg.as<int32_t>()[n];
    EXPECT_NEAR(losses.as<double>()[n], t < 0 ? 0.0 : mx + std::log(s) - z[static_cast<size_t>(t)], 1e-13);
  }
  const Tensor dx = rand(Shape{N, C}, 54), dw = make(Shape{V, C});
  chunked.classifier_bwd(ws, dx, dw, wl, x, w, tg, lse);
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "dx");
  check_fd(f, w.as<double>(), dw.as<double>(), all_indices(w.numel()), "dw");
}

TEST_F(KernelFixture, EmbeddingGradients) {
  const int64_t B = 2, T = 5, C = 3, V = 4, Tmax = 6;
  const Tensor tok = make(Shape{B, T}, DType::i32);
  fill_tokens(tok, 60, static_cast<int>(V));  // 10 tokens over 4 ids: repeats
  const Tensor wte = rand(Shape{V, C}, 61), wpe = rand(Shape{Tmax, C}, 62);
  const Tensor out = make(Shape{B, T, C}), R = rand(Shape{B, T, C}, 63);
  auto f = [&] {
    k.embedding_fwd(out, tok, wte, wpe, Tensor());
    return sum_product(out, R);
  };
  const Tensor dwte = make(Shape{V, C}), dwpe = make(Shape{Tmax, C});
  k.embedding_bwd(dwte, dwpe, R, tok, Tensor());
  check_fd(f, wte.as<double>(), dwte.as<double>(), all_indices(wte.numel()), "dwte");
  check_fd(f, wpe.as<double>(), dwpe.as<double>(), all_indices(wpe.numel()), "dwpe");
}

// Positions count from each document's start: out = wte[token] + wpe[t -
// doc_start]; a one-token document (row 0, token 3) is at position 0.
TEST_F(KernelFixture, EmbeddingWithDocumentsGradients) {
  const int64_t B = 2, T = 7, C = 3, V = 4, Tmax = 8;
  const Tensor ds = doc_start({{3, 1, 3}, {2, 5}}, T);
  const Tensor tok = make(Shape{B, T}, DType::i32);
  fill_tokens(tok, 160, static_cast<int>(V));
  const Tensor wte = rand(Shape{V, C}, 161), wpe = rand(Shape{Tmax, C}, 162);
  const Tensor out = make(Shape{B, T, C}), R = rand(Shape{B, T, C}, 163);
  auto f = [&] {
    k.embedding_fwd(out, tok, wte, wpe, ds);
    return sum_product(out, R);
  };
  f();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t pos = t - ds.as<int32_t>()[b * T + t];
      for (int64_t c = 0; c < C; ++c)
        EXPECT_EQ(out.as<double>()[(b * T + t) * C + c],
                  wte.as<double>()[tok.as<int32_t>()[b * T + t] * C + c] + wpe.as<double>()[pos * C + c]);
    }
  EXPECT_EQ(out.as<double>()[3 * C], wte.as<double>()[tok.as<int32_t>()[3] * C] + wpe.as<double>()[0]);
  const Tensor dwte = make(Shape{V, C}), dwpe = make(Shape{Tmax, C});
  k.embedding_bwd(dwte, dwpe, R, tok, ds);
  check_fd(f, wte.as<double>(), dwte.as<double>(), all_indices(wte.numel()), "dwte");
  check_fd(f, wpe.as<double>(), dwpe.as<double>(), all_indices(wpe.numel()), "dwpe");
  // Positions 5.. are used by no document of at most 5 tokens: no gradient.
  for (int64_t i = 5 * C; i < Tmax * C; ++i) EXPECT_EQ(dwpe.as<double>()[i], 0.0);
}

TEST(FastExp, WithinFewUlpOfExpf) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.001953125f) {
    const double ref = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::fast_exp(x) - ref) / ref);
  }
  EXPECT_LT(worst, 4 * 1.2e-7);
  EXPECT_EQ(cpu::fast_exp(0.0f), 1.0f);
  EXPECT_LT(cpu::fast_exp(-1000.0f), 1e-37f);
  EXPECT_TRUE(std::isfinite(cpu::fast_exp(1000.0f)));
  // NaN in, NaN out, without undefined behaviour (the asan preset's UBSan
  // reported a shift of a negative value here).
  EXPECT_TRUE(std::isnan(cpu::fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST_F(KernelFixture, OptimizerReductionsAndCasts) {
  const Tensor x = rand(Shape{100000}, 70, 1.0, DType::f32);
  const Tensor acc = make(Shape{1});
  acc.as<double>()[0] = 1.0;
  k.sum_squares(x, acc);
  double ref = 1.0;
  for (int64_t i = 0; i < x.numel(); ++i) ref += double(x.as<float>()[i]) * x.as<float>()[i];
  EXPECT_NEAR(acc.as<double>()[0], ref, 1e-9 * ref);

  const Tensor flag = make(Shape{1}, DType::i32);
  k.check_overflow(x, flag);
  EXPECT_EQ(flag.as<int32_t>()[0], 0);
  x.as<float>()[77777] = std::numeric_limits<float>::infinity();
  k.check_overflow(x, flag);
  EXPECT_EQ(flag.as<int32_t>()[0], 1);
  x.as<float>()[77777] = 0.5f;
  const Tensor hb = make(Shape{100000}, DType::bf16);
  k.cast(hb, x);
  k.check_overflow(hb, flag);  // flag stays set: it is only ever raised
  EXPECT_EQ(flag.as<int32_t>()[0], 1);
  k.scale(hb, 2.0);
  const Tensor back = make(Shape{100000}, DType::f32);
  k.cast(back, hb);
  for (int64_t i = 0; i < 1000; ++i) EXPECT_NEAR(back.as<float>()[i], 2 * x.as<float>()[i], 2 * 4e-3 * std::fabs(x.as<float>()[i]) + 1e-30);
  const Tensor s = make(Shape{100000}, DType::f32);
  k.add(s, x, back);
  EXPECT_FLOAT_EQ(s.as<float>()[5], x.as<float>()[5] + back.as<float>()[5]);
}

TEST_F(KernelFixture, Bf16StorageMatchesF32WithinRounding) {
  // LayerNorm + linear + GELU with bf16 activations and weights against f32.
  const int64_t N = 16, C = 32;
  const Tensor x32 = rand(Shape{N, C}, 80, 1.0, DType::f32), w32 = rand(Shape{C, C}, 81, 0.2, DType::f32);
  const Tensor g32 = rand(Shape{C}, 82, 1.0, DType::f32), b32 = rand(Shape{C}, 83, 1.0, DType::f32);
  auto run = [&](DType t) {
    Tensor x = make(Shape{N, C}, t), w = make(Shape{C, C}, t), g = make(Shape{C}, t), b = make(Shape{C}, t);
    k.cast(x, x32), k.cast(w, w32), k.cast(g, g32), k.cast(b, b32);
    Tensor ln = make(Shape{N, C}, t), m = make(Shape{N}), r = make(Shape{N});
    m.dtype = r.dtype = DType::f32;
    Tensor y = make(Shape{N, C}, t), z = make(Shape{N, C}, t), out = make(Shape{N, C}, DType::f32);
    k.layernorm_fwd(ln, m, r, x, g, b);
    k.matmul(ws, y, ln, false, w, true, false, b);
    k.gelu_fwd(z, y);
    k.cast(out, z);
    return out;
  };
  const Tensor ref = run(DType::f32), low = run(DType::bf16);
  for (int64_t i = 0; i < ref.numel(); ++i) {
    EXPECT_NEAR(low.as<float>()[i], ref.as<float>()[i], 0.03 * (1 + std::fabs(ref.as<float>()[i])));
  }
}

}  // namespace
}  // namespace zt::test
