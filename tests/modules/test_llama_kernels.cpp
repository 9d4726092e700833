// The Llama kernels of CpuKernels (RMSNorm, rotary embeddings, grouped-query
// attention, SwiGLU, the embedding without positions): forwards against naive
// formulas written out here, backwards against f64 central differences.
#include <cmath>

#include "module_test_support.hpp"
#include "modules/rope.hpp"

namespace zt::test {
namespace {

using LlamaKernels = KernelFixture;

TEST_F(LlamaKernels, RmsNormMatchesNaiveAndGradients) {
  const int64_t N = 6, C = 7;
  const double eps = 1e-3;  // large enough to matter in the check
  const Tensor x = rand(Shape{N, C}, 1, 2.0), w = rand(Shape{C}, 2), R = rand(Shape{N, C}, 3);
  const Tensor out = make(Shape{N, C}), rstd = make(Shape{N});
  auto f = [&] {
    k.rmsnorm_fwd(out, rstd, x, w, eps);
    return sum_product(out, R);
  };
  f();
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x.as<double>()[n * C + c] * x.as<double>()[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    EXPECT_NEAR(rstd.as<double>()[n], r, 1e-14);
    for (int64_t c = 0; c < C; ++c)
      EXPECT_NEAR(out.as<double>()[n * C + c], x.as<double>()[n * C + c] * r * w.as<double>()[c], 1e-14);
  }
  const Tensor dx = rand(Shape{N, C}, 4), dx0 = copy(dx), dw = make(Shape{C});
  k.rmsnorm_bwd(dx, /*accumulate_dx=*/true, dw, R, x, w, rstd);
  for (int64_t i = 0; i < dx.numel(); ++i) dx.as<double>()[i] -= dx0.as<double>()[i];
  check_fd(f, x.as<double>(), dx.as<double>(), all_indices(x.numel()), "dx");
  check_fd(f, w.as<double>(), dw.as<double>(), all_indices(C), "dw");
  // Written, not accumulated, when asked.
  const Tensor dx2 = rand(Shape{N, C}, 5), dw2 = make(Shape{C});
  k.rmsnorm_bwd(dx2, false, dw2, R, x, w, rstd);
  for (int64_t i = 0; i < dx.numel(); ++i) EXPECT_NEAR(dx2.as<double>()[i], dx.as<double>()[i], 1e-14);
}

// transformers' _compute_llama3_parameters, regime by regime, for head_dim
// 16, theta 10000 and (factor 4, low 1, high 4, original 256): wavelengths
// 2 pi 10000^(i/8) are 6.3, 19.9, 62.8 (< 64: kept), 198.7 (between 64 and
// 256: blended) and 628 and above (> 256: divided by 4).
TEST(Rope, Llama3FrequenciesByRegime) {
  RopeConfig plain;
  plain.head_dim = 16;
  const std::vector<double> f = rope_inv_freq(plain);
  ASSERT_EQ(f.size(), 8u);
  for (size_t i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(f[i], std::pow(10000.0, -static_cast<double>(2 * i) / 16.0));
  RopeConfig s = plain;
  s.llama3 = true;
  s.factor = 4;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 256;
  const std::vector<double> g = rope_inv_freq(s);
  const double pi = std::acos(-1.0);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(g[i], f[i]) << i;
  const double wl = 2 * pi / f[3];
  ASSERT_GT(wl, 64.0);
  ASSERT_LT(wl, 256.0);
  const double sm = (256.0 / wl - 1.0) / 3.0;
  EXPECT_NEAR(g[3], (1 - sm) * f[3] / 4 + sm * f[3], 1e-18);
  EXPECT_GT(g[3], f[3] / 4);
  EXPECT_LT(g[3], f[3]);
  for (size_t i = 4; i < 8; ++i) EXPECT_DOUBLE_EQ(g[i], f[i] / 4) << i;
}

TEST_F(LlamaKernels, RopeMatchesRotateHalfAndGradients) {
  const int64_t B = 2, T = 5, H = 3, hd = 8, W = H * hd;
  RopeConfig rope;
  rope.head_dim = hd;
  rope.theta = 10.0;  // large angles at small positions
  rope.llama3 = true;
  rope.factor = 2;
  rope.low_freq_factor = 1;
  rope.high_freq_factor = 2;
  rope.original_max_position_embeddings = 12;
  const std::vector<double> f = rope_inv_freq(rope);
  const Tensor x0 = rand(Shape{B, T, W}, 10), x = make(Shape{B, T, W}), R = rand(Shape{B, T, W}, 11);
  auto obj = [&] {
    std::memcpy(x.data, x0.data, x0.bytes());
    k.rope_fwd(x, Tensor(), rope, Tensor());
    return sum_product(x, R);
  };
  obj();
  // out = x cos + rotate_half(x) sin, rotate_half(x) = (-x2, x1), position t.
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < hd; ++j) {
          const int64_t row = (b * T + t) * W + h * hd;
          const int64_t i = j % (hd / 2);
          const double a = static_cast<double>(t) * f[static_cast<size_t>(i)];
          const double rot = j < hd / 2 ? -x0.as<double>()[row + j + hd / 2] : x0.as<double>()[row + j - hd / 2];
          EXPECT_NEAR(x.as<double>()[row + j], x0.as<double>()[row + j] * std::cos(a) + rot * std::sin(a), 1e-14);
        }
  // Backward: the transpose of the rotation.
  const Tensor d = copy(R);
  k.rope_bwd(d, Tensor(), rope, Tensor());
  check_fd(obj, x0.as<double>(), d.as<double>(), all_indices(x0.numel()), "drope");
}

// Token t of a document starting at s is rotated as position t - s; row 0
// holds documents of 3, 1 and 3 tokens, row 1 of 2 and 5.
TEST_F(LlamaKernels, RopeWithDocumentsRestartsPositionsAndGradients) {
  const int64_t B = 2, T = 7, H = 2, hd = 8, W = H * hd;
  RopeConfig rope;
  rope.head_dim = hd;
  rope.theta = 10.0;
  const std::vector<double> f = rope_inv_freq(rope);
  const Tensor ds = doc_start({{3, 1, 3}, {2, 5}}, T);
  const Tensor x0 = rand(Shape{B, T, W}, 70), x = make(Shape{B, T, W}), R = rand(Shape{B, T, W}, 71);
  auto obj = [&] {
    std::memcpy(x.data, x0.data, x0.bytes());
    k.rope_fwd(x, Tensor(), rope, ds);
    return sum_product(x, R);
  };
  obj();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t pos = t - ds.as<int32_t>()[b * T + t];
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < hd; ++j) {
          const int64_t row = (b * T + t) * W + h * hd;
          const double a = static_cast<double>(pos) * f[static_cast<size_t>(j % (hd / 2))];
          const double rot = j < hd / 2 ? -x0.as<double>()[row + j + hd / 2] : x0.as<double>()[row + j - hd / 2];
          EXPECT_NEAR(x.as<double>()[row + j], x0.as<double>()[row + j] * std::cos(a) + rot * std::sin(a), 1e-14);
        }
    }
  // Position 0 is the identity: the one-token document (row 0, token 3) and
  // every document's first token are unchanged.
  for (int64_t t : {0, 3, 4, 7, 9})
    for (int64_t j = 0; j < W; ++j) EXPECT_EQ(x.as<double>()[t * W + j], x0.as<double>()[t * W + j]) << t;
  const Tensor d = copy(R);
  k.rope_bwd(d, Tensor(), rope, ds);
  check_fd(obj, x0.as<double>(), d.as<double>(), all_indices(x0.numel()), "drope");
}

// Naive causal attention of query head h on key/value head h / (NH / NKV).
// With doc_start (B, T) defined, query t reads keys doc_start[b, t]..t only.
void naive_gqa(const Tensor& q, const Tensor& kk, const Tensor& v, int NH, int NKV, std::vector<double>& out,
               const Tensor& doc_start = Tensor()) {
  const int64_t B = q.shape[0], T = q.shape[1], hs = q.shape[2] / NH, KW = kk.shape[2];
  out.assign(static_cast<size_t>(q.numel()), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const int64_t g = h / (NH / NKV);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t s0 = doc_start.defined() ? doc_start.as<int32_t>()[b * T + t] : 0;
        std::vector<double> p(static_cast<size_t>(t + 1), 0.0);
        double mx = -1e300, sum = 0;
        for (int64_t u = s0; u <= t; ++u) {
          double s = 0;
          for (int64_t i = 0; i < hs; ++i)
            s += q.as<double>()[(b * T + t) * NH * hs + h * hs + i] * kk.as<double>()[(b * T + u) * KW + g * hs + i];
          p[static_cast<size_t>(u)] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, p[static_cast<size_t>(u)]);
        }
        for (int64_t u = s0; u <= t; ++u) sum += (p[static_cast<size_t>(u)] = std::exp(p[static_cast<size_t>(u)] - mx));
        for (int64_t i = 0; i < hs; ++i) {
          double o = 0;
          for (int64_t u = s0; u <= t; ++u) o += p[static_cast<size_t>(u)] / sum * v.as<double>()[(b * T + u) * KW + g * hs + i];
          out[static_cast<size_t>((b * T + t) * NH * hs + h * hs + i)] = o;
        }
      }
    }
}

TEST_F(LlamaKernels, GroupedQueryAttentionMatchesNaiveAndGradients) {
  const int64_t B = 2, T = 5, hs = 4;
  const int NH = 4;
  for (int NKV : {4, 2, 1}) {  // multi-head, grouped, multi-query
    SCOPED_TRACE("n_kv_head " + std::to_string(NKV));
    const Tensor q = rand(Shape{B, T, NH * hs}, 20, 1.5), kk = rand(Shape{B, T, NKV * hs}, 21, 1.5),
                 v = rand(Shape{B, T, NKV * hs}, 22);
    const Tensor out = make(Shape{B, T, NH * hs}), lse = make(Shape{B, NH, T}), R = rand(Shape{B, T, NH * hs}, 23);
    auto f = [&] {
      k.gqa_attention_fwd(ws, out, lse, q, kk, v, NH, NKV, Tensor());
      return sum_product(out, R);
    };
    f();
    std::vector<double> ref;
    naive_gqa(q, kk, v, NH, NKV, ref);
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.as<double>()[i], ref[static_cast<size_t>(i)], 1e-13) << i;
    // Garbage in the outputs: backward must overwrite them.
    const Tensor dq = rand(q.shape, 24), dk = rand(kk.shape, 25), dv = rand(v.shape, 26);
    k.gqa_attention_bwd(ws, dq, dk, dv, R, q, kk, v, out, lse, NH, NKV, Tensor());
    check_fd(f, q.as<double>(), dq.as<double>(), all_indices(q.numel()), "dq");
    check_fd(f, kk.as<double>(), dk.as<double>(), all_indices(kk.numel()), "dk");
    check_fd(f, v.as<double>(), dv.as<double>(), all_indices(v.numel()), "dv");
  }
}

// Documents ([Note: document masking]): row 0 holds documents of 3, 1 and 3
// tokens, row 1 of 2 and 5; every query reads its own document only.
TEST_F(LlamaKernels, GroupedQueryAttentionWithDocumentsMatchesNaiveAndGradients) {
  const int64_t B = 2, T = 7, hs = 4;
  const int NH = 4;
  const Tensor ds = doc_start({{3, 1, 3}, {2, 5}}, T);
  for (int NKV : {2, 1}) {
    SCOPED_TRACE("n_kv_head " + std::to_string(NKV));
    const Tensor q = rand(Shape{B, T, NH * hs}, 60, 1.5), kk = rand(Shape{B, T, NKV * hs}, 61, 1.5),
                 v = rand(Shape{B, T, NKV * hs}, 62);
    const Tensor out = make(Shape{B, T, NH * hs}), lse = make(Shape{B, NH, T}), R = rand(Shape{B, T, NH * hs}, 63);
    auto f = [&] {
      k.gqa_attention_fwd(ws, out, lse, q, kk, v, NH, NKV, ds);
      return sum_product(out, R);
    };
    f();
    std::vector<double> ref, unmasked;
    naive_gqa(q, kk, v, NH, NKV, ref, ds);
    naive_gqa(q, kk, v, NH, NKV, unmasked);
    double differs = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      EXPECT_NEAR(out.as<double>()[i], ref[static_cast<size_t>(i)], 1e-13) << i;
      differs = std::max(differs, std::fabs(ref[static_cast<size_t>(i)] - unmasked[static_cast<size_t>(i)]));
    }
    EXPECT_GT(differs, 1e-3);  // the mask changes the result
    const Tensor dq = rand(q.shape, 64), dk = rand(kk.shape, 65), dv = rand(v.shape, 66);
    k.gqa_attention_bwd(ws, dq, dk, dv, R, q, kk, v, out, lse, NH, NKV, ds);
    check_fd(f, q.as<double>(), dq.as<double>(), all_indices(q.numel()), "dq");
    check_fd(f, kk.as<double>(), dk.as<double>(), all_indices(kk.numel()), "dk");
    check_fd(f, v.as<double>(), dv.as<double>(), all_indices(v.numel()), "dv");
  }
}

// With one query head per key/value head, the separate-tensor kernel gives
// the packed GPT-2 kernel's bits (fp32, forward and backward).
TEST_F(LlamaKernels, MultiHeadGqaEqualsPackedAttentionBits) {
  const int64_t B = 2, T = 9, C = 16;
  const int NH = 4;
  const Tensor qkv = rand(Shape{B, T, 3 * C}, 30, 1.5, DType::f32);
  const Tensor q = make(Shape{B, T, C}, DType::f32), kk = make(Shape{B, T, C}, DType::f32),
               v = make(Shape{B, T, C}, DType::f32);
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) {
      q.as<float>()[r * C + c] = qkv.as<float>()[r * 3 * C + c];
      kk.as<float>()[r * C + c] = qkv.as<float>()[r * 3 * C + C + c];
      v.as<float>()[r * C + c] = qkv.as<float>()[r * 3 * C + 2 * C + c];
    }
  const Tensor o1 = make(Shape{B, T, C}, DType::f32), l1 = make(Shape{B, NH, T}, DType::f32);
  const Tensor o2 = make(Shape{B, T, C}, DType::f32), l2 = make(Shape{B, NH, T}, DType::f32);
  k.attention_fwd(ws, o1, l1, qkv, NH, Tensor());
  k.gqa_attention_fwd(ws, o2, l2, q, kk, v, NH, NH, Tensor());
  EXPECT_EQ(std::memcmp(o1.data, o2.data, o1.bytes()), 0);
  EXPECT_EQ(std::memcmp(l1.data, l2.data, l1.bytes()), 0);
  const Tensor g = rand(Shape{B, T, C}, 31, 1.0, DType::f32);
  const Tensor dqkv = make(Shape{B, T, 3 * C}, DType::f32);
  const Tensor dq = make(q.shape, DType::f32), dk = make(q.shape, DType::f32), dv = make(q.shape, DType::f32);
  k.attention_bwd(ws, dqkv, g, qkv, o1, l1, NH, Tensor());
  k.gqa_attention_bwd(ws, dq, dk, dv, g, q, kk, v, o2, l2, NH, NH, Tensor());
  for (int64_t r = 0; r < B * T; ++r)
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(dq.as<float>()[r * C + c], dqkv.as<float>()[r * 3 * C + c]);
      EXPECT_EQ(dk.as<float>()[r * C + c], dqkv.as<float>()[r * 3 * C + C + c]);
      EXPECT_EQ(dv.as<float>()[r * C + c], dqkv.as<float>()[r * 3 * C + 2 * C + c]);
    }
}

TEST_F(LlamaKernels, SwigluMatchesNaiveAndGradients) {
  const int64_t N = 3, F = 10;
  const Tensor gate = rand(Shape{N, F}, 40, 5.0), up = rand(Shape{N, F}, 41, 2.0), R = rand(Shape{N, F}, 42);
  const Tensor out = make(Shape{N, F});
  auto f = [&] {
    k.swiglu_fwd(out, gate, up);
    return sum_product(out, R);
  };
  f();
  for (int64_t i = 0; i < out.numel(); ++i) {
    const double g = gate.as<double>()[i];
    EXPECT_NEAR(out.as<double>()[i], g / (1 + std::exp(-g)) * up.as<double>()[i], 1e-14);
  }
  // dgate computed in place of dout (the block's use), dup separately.
  const Tensor dgate = copy(R), dup = rand(Shape{N, F}, 43);
  k.swiglu_bwd(dgate, dup, dgate, gate, up);
  check_fd(f, gate.as<double>(), dgate.as<double>(), all_indices(gate.numel()), "dgate");
  check_fd(f, up.as<double>(), dup.as<double>(), all_indices(up.numel()), "dup");
}

TEST_F(LlamaKernels, EmbeddingWithoutPositions) {
  const int64_t B = 2, T = 3, C = 4, V = 5;
  const Tensor tok = make(Shape{B, T}, DType::i32);
  fill_tokens(tok, 50, static_cast<int>(V));
  const Tensor wte = rand(Shape{V, C}, 51), out = make(Shape{B, T, C}), R = rand(Shape{B, T, C}, 52);
  auto f = [&] {
    k.embedding_fwd(out, tok, wte, Tensor(), Tensor());
    return sum_product(out, R);
  };
  f();
  for (int64_t bt = 0; bt < B * T; ++bt)
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(out.as<double>()[bt * C + c], wte.as<double>()[tok.as<int32_t>()[bt] * C + c]);
  const Tensor dwte = make(Shape{V, C});
  k.embedding_bwd(dwte, Tensor(), R, tok, Tensor());
  check_fd(f, wte.as<double>(), dwte.as<double>(), all_indices(wte.numel()), "dwte");
}

}  // namespace
}  // namespace zt::test
