// AdamW against a double-precision reference of the documented algorithm
// (torch.optim.AdamW), and the invariants the ZeRO layer relies on: sharding,
// grad_scale folding and the working copy change nothing in the fp32 result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "optim/adamw.hpp"

namespace zt {
namespace {

struct State {
  std::vector<float> p, m, v;
};

std::vector<float> random_vector(int64_t n, uint64_t seed, double scale) {
  CounterRng rng{rng_key(seed)};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = static_cast<float>(scale * rng.normal(i));
  return x;
}

State random_state(int64_t n, uint64_t seed) {
  return State{random_vector(n, seed, 1.0), std::vector<float>(static_cast<size_t>(n), 0.0f),
               std::vector<float>(static_cast<size_t>(n), 0.0f)};
}

// The textbook algorithm in double, written from the PyTorch documentation:
// p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps).
struct Reference {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& grad, const AdamWParams& hp, int64_t t, double grad_scale,
            bool decay) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double g = static_cast<double>(grad[i]) * grad_scale;
      if (decay) p[i] -= hp.lr * hp.weight_decay * p[i];
      m[i] = hp.beta1 * m[i] + (1 - hp.beta1) * g;
      v[i] = hp.beta2 * v[i] + (1 - hp.beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(hp.beta1, static_cast<double>(t)));
      const double v_hat = v[i] / (1 - std::pow(hp.beta2, static_cast<double>(t)));
      p[i] -= hp.lr * m_hat / (std::sqrt(v_hat) + hp.eps);
    }
  }
};

Reference reference_from(const State& s) {
  Reference r;
  r.p.assign(s.p.begin(), s.p.end());
  r.m.assign(s.m.begin(), s.m.end());
  r.v.assign(s.v.begin(), s.v.end());
  return r;
}

double max_abs(const std::vector<double>& x) {
  double a = 0.0;
  for (double e : x) a = std::max(a, std::fabs(e));
  return a;
}

// Moments are sums of terms that cancel, so their error is measured against
// the size of the whole array (a few fp32 ulps of the largest term), not
// element by element.
void expect_near_reference(const State& s, const Reference& r) {
  const double m_tol = 1e-6 * max_abs(r.m);
  const double v_tol = 1e-6 * max_abs(r.v);
  for (size_t i = 0; i < s.p.size(); ++i) {
    ASSERT_NEAR(s.p[i], r.p[i], 2e-6 * std::max(1.0, std::fabs(r.p[i]))) << "param " << i;
    ASSERT_NEAR(s.m[i], r.m[i], m_tol) << "m " << i;
    ASSERT_NEAR(s.v[i], r.v[i], v_tol) << "v " << i;
  }
}

AdamWParams test_params() {
  AdamWParams hp;
  hp.lr = 1e-2;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  return hp;
}

void run_against_reference(bool decay, float grad_scale) {
  const int64_t n = 1000;
  const AdamWParams hp = test_params();
  State s = random_state(n, 1);
  Reference r = reference_from(s);
  for (int64_t t = 1; t <= 6; ++t) {
    // Gradients vary in size per step and get the 1/loss_scale treatment.
    const std::vector<float> g = random_vector(n, 100 + static_cast<uint64_t>(t), 0.5 * t);
    adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, t, grad_scale, decay);
    r.step(g, hp, t, grad_scale, decay);
    expect_near_reference(s, r);
  }
}

TEST(AdamW, MatchesReferenceWithDecay) { run_against_reference(true, 1.0f); }
TEST(AdamW, MatchesReferenceWithoutDecay) { run_against_reference(false, 1.0f); }
TEST(AdamW, MatchesReferenceWithGradScale) { run_against_reference(true, 1.0f / 1024.0f); }

// Bias correction: at step 1 from zero moments, m_hat = g and v_hat = g^2, so
// every parameter moves by lr * g / (|g| + eps), about lr, whatever |g| is.
TEST(AdamW, FirstStepMovesByLearningRate) {
  const int64_t n = 64;
  AdamWParams hp = test_params();
  hp.weight_decay = 0.0;
  State s = random_state(n, 2);
  const std::vector<float> p0 = s.p;
  std::vector<float> g = random_vector(n, 3, 1e-3);
  adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, 1, 1.0f, true);
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[static_cast<size_t>(i)];
    const double expect = p0[static_cast<size_t>(i)] - hp.lr * gi / (std::fabs(gi) + hp.eps);
    EXPECT_NEAR(s.p[static_cast<size_t>(i)], expect, 1e-6) << i;
  }
}

// With a zero gradient only the decoupled decay acts: p * (1 - lr*wd), in fp32.
TEST(AdamW, ZeroGradientOnlyDecays) {
  const int64_t n = 32;
  const AdamWParams hp = test_params();
  State s = random_state(n, 4);
  const std::vector<float> p0 = s.p;
  const std::vector<float> g(static_cast<size_t>(n), 0.0f);
  adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, 1, 1.0f, true);
  const float factor = static_cast<float>(1.0 - hp.lr * hp.weight_decay);
  for (size_t i = 0; i < p0.size(); ++i) EXPECT_EQ(s.p[i], p0[i] * factor);
  State s2 = random_state(n, 4);
  adamw_update(s2.p.data(), g.data(), s2.m.data(), s2.v.data(), n, hp, 1, 1.0f, false);
  EXPECT_EQ(s2.p, p0);
}

// Folding the scale into the update equals scaling the gradient beforehand.
TEST(AdamW, GradScaleEqualsPrescaledGradient) {
  const int64_t n = 500;
  const AdamWParams hp = test_params();
  const float scale = 0.37f;
  State a = random_state(n, 5), b = random_state(n, 5);
  for (int64_t t = 1; t <= 3; ++t) {
    std::vector<float> g = random_vector(n, 50 + static_cast<uint64_t>(t), 2.0);
    adamw_update(a.p.data(), g.data(), a.m.data(), a.v.data(), n, hp, t, scale, true);
    for (float& x : g) x *= scale;
    adamw_update(b.p.data(), g.data(), b.m.data(), b.v.data(), n, hp, t, 1.0f, true);
  }
  EXPECT_EQ(a.p, b.p);
  EXPECT_EQ(a.m, b.m);
  EXPECT_EQ(a.v, b.v);
}

// The working copy is the rounding of the fp32 result, and writing it does
// not change the fp32 result.
TEST(AdamW, LowPrecisionCopyIsRoundedResult) {
  const int64_t n = 70000;  // past the parallel threshold
  const AdamWParams hp = test_params();
  State plain = random_state(n, 6), with_bf16 = random_state(n, 6), with_f16 = random_state(n, 6);
  std::vector<bf16> copy_bf16(static_cast<size_t>(n));
  std::vector<f16> copy_f16(static_cast<size_t>(n));
  for (int64_t t = 1; t <= 2; ++t) {
    const std::vector<float> g = random_vector(n, 60 + static_cast<uint64_t>(t), 1.0);
    adamw_update(plain.p.data(), g.data(), plain.m.data(), plain.v.data(), n, hp, t, 0.5f, true);
    adamw_update(with_bf16.p.data(), g.data(), with_bf16.m.data(), with_bf16.v.data(), n, hp, t,
                 0.5f, true, copy_bf16.data());
    adamw_update(with_f16.p.data(), g.data(), with_f16.m.data(), with_f16.v.data(), n, hp, t, 0.5f,
                 true, copy_f16.data());
  }
  EXPECT_EQ(with_bf16.p, plain.p);
  EXPECT_EQ(with_f16.p, plain.p);
  EXPECT_EQ(with_bf16.m, plain.m);
  EXPECT_EQ(with_bf16.v, plain.v);
  for (size_t i = 0; i < plain.p.size(); ++i) {
    ASSERT_EQ(copy_bf16[i].bits, f32_to_bf16(plain.p[i]).bits) << i;
    ASSERT_EQ(copy_f16[i].bits, f32_to_f16(plain.p[i]).bits) << i;
  }
}

// A shard updated in pieces (any cut, any decay pattern) equals the pieces
// updated one by one: what ZeRO's sharding relies on.
TEST(AdamW, RangesEqualPiecewiseUpdates) {
  const int64_t n = 100003;
  const AdamWParams hp = test_params();
  const std::vector<DecayRange> ranges = {
      {0, 7, false}, {7, 40000, true}, {40000, 40001, false}, {40001, 99000, true}, {99000, n, false}};
  State whole = random_state(n, 7), pieces = random_state(n, 7);
  std::vector<bf16> copy(static_cast<size_t>(n));
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_vector(n, 70 + static_cast<uint64_t>(t), 1.0);
    adamw_update_ranges(whole.p.data(), g.data(), whole.m.data(), whole.v.data(), n, ranges, hp, t,
                        0.25f, copy.data());
    for (const DecayRange& r : ranges) {
      adamw_update(pieces.p.data() + r.begin, g.data() + r.begin, pieces.m.data() + r.begin,
                   pieces.v.data() + r.begin, r.end - r.begin, hp, t, 0.25f, r.decay);
    }
  }
  EXPECT_EQ(whole.p, pieces.p);
  EXPECT_EQ(whole.m, pieces.m);
  EXPECT_EQ(whole.v, pieces.v);
  for (size_t i = 0; i < whole.p.size(); ++i) ASSERT_EQ(copy[i].bits, f32_to_bf16(whole.p[i]).bits);
  // Without a copy pointer the fp32 result is the same.
  State no_copy = random_state(n, 7);
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float> g = random_vector(n, 70 + static_cast<uint64_t>(t), 1.0);
    adamw_update_ranges(no_copy.p.data(), g.data(), no_copy.m.data(), no_copy.v.data(), n, ranges,
                        hp, t, 0.25f);
  }
  EXPECT_EQ(no_copy.p, whole.p);
}

TEST(AdamW, RangesMustTileTheShard) {
  const int64_t n = 10;
  State s = random_state(n, 8);
  const std::vector<float> g(static_cast<size_t>(n), 1.0f);
  const AdamWParams hp = test_params();
  auto run = [&](const std::vector<DecayRange>& ranges) {
    adamw_update_ranges(s.p.data(), g.data(), s.m.data(), s.v.data(), n, ranges, hp, 1, 1.0f);
  };
  EXPECT_THROW(run({{0, 4, true}, {5, 10, false}}), Error);   // gap
  EXPECT_THROW(run({{0, 6, true}, {5, 10, false}}), Error);   // overlap
  EXPECT_THROW(run({{0, 4, true}}), Error);                   // short
  EXPECT_THROW(run({{0, 4, true}, {4, 11, false}}), Error);   // past the end
  EXPECT_THROW(adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, 0, 1.0f, true),
               Error);  // step is 1-based
  EXPECT_NO_THROW(run({{0, 4, true}, {4, 10, false}}));
}

// The scalars the CPU and the GPU share (adamw_math.hpp): each computed in
// double and rounded once to fp32; the lerp branch follows aten's |w| < 0.5.
TEST(AdamW, ScalarsAreRoundedOnceFromDouble) {
  AdamWParams hp;
  hp.lr = 3e-4;
  hp.beta1 = 0.9;
  hp.beta2 = 0.95;
  hp.eps = 1e-8;
  hp.weight_decay = 0.1;
  const int64_t t = 7;
  const AdamWScalars s = adamw_scalars(hp, t, 0.25f);
  EXPECT_EQ(s.grad_scale, 0.25f);
  EXPECT_EQ(s.decay_factor, static_cast<float>(1.0 - 3e-4 * 0.1));
  EXPECT_EQ(s.lerp_weight, static_cast<float>(1.0 - 0.9));
  EXPECT_EQ(s.lerp_rest, 1.0f - s.lerp_weight);
  EXPECT_TRUE(s.lerp_from_start);
  EXPECT_EQ(s.beta2, 0.95f);
  EXPECT_EQ(s.one_minus_beta2, static_cast<float>(1.0 - 0.95));
  EXPECT_EQ(s.bias_correction2_sqrt, static_cast<float>(std::sqrt(1.0 - std::pow(0.95, 7.0))));
  EXPECT_EQ(s.eps, 1e-8f);
  EXPECT_EQ(s.neg_step_size, static_cast<float>(-(3e-4 / (1.0 - std::pow(0.9, 7.0)))));
  hp.beta1 = 0.3;
  EXPECT_FALSE(adamw_scalars(hp, t, 1.0f).lerp_from_start);
  EXPECT_THROW(adamw_scalars(hp, 0, 1.0f), Error);
  hp.beta2 = 1.0;
  EXPECT_THROW(adamw_scalars(hp, 1, 1.0f), Error);
}

// ---- Vector ISAs ([Note: AdamW ISA dispatch]) --------------------------------
//
// Every ISA this CPU has (AVX-512, AVX2, the SSE2 baseline) against the
// scalar adamw_element, element by element, bit for bit: p, m, v and the
// working copy. This file is compiled with -ffp-contract=off like the library
// (tests/optim/CMakeLists.txt), so the reference rounds every operation too.

// Restores the start-up ISA and ZT_ADAMW_ISA when a test ends.
class IsaGuard {
 public:
  IsaGuard() {
    const char* env = std::getenv("ZT_ADAMW_ISA");
    if (env != nullptr) saved_ = env;
  }
  ~IsaGuard() {
    if (saved_) {
      setenv("ZT_ADAMW_ISA", saved_->c_str(), 1);
    } else {
      unsetenv("ZT_ADAMW_ISA");
    }
    adamw_set_cpu_isa("");
  }

 private:
  std::optional<std::string> saved_;
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The scalar formula, one element at a time (kept scalar so that the
// reference is the plain adamw_element, whatever the vectoriser would do).
#if defined(__GNUC__) && !defined(__clang__)
#define ZT_TEST_SCALAR __attribute__((noinline, optimize("no-tree-vectorize")))
#else
#define ZT_TEST_SCALAR __attribute__((noinline))
#endif
ZT_TEST_SCALAR void scalar_update(float* p, const float* g, float* m, float* v,
                                  const std::vector<DecayRange>& ranges, const AdamWScalars& s) {
  for (const DecayRange& r : ranges) {
    const float decay_factor = r.decay ? s.decay_factor : 1.0f;
    for (int64_t i = r.begin; i < r.end; ++i) {
      if (s.lerp_from_start) {
        adamw_element<true>(p[i], m[i], v[i], g[i], decay_factor, s);
      } else {
        adamw_element<false>(p[i], m[i], v[i], g[i], decay_factor, s);
      }
    }
  }
}

// Inputs that every path must treat alike: signed zeros, subnormals, the
// extremes, infinities, quiet and signalling NaNs of both signs and payloads.
const std::vector<uint32_t>& special_bits() {
  static const std::vector<uint32_t> s = {
      0x00000000u, 0x80000000u,                           // +-0
      0x00000001u, 0x80000001u, 0x00400000u, 0x807fffffu,  // subnormals
      0x00800000u, 0x80800000u,                           // +-FLT_MIN
      0x7f7fffffu, 0xff7fffffu,                           // +-FLT_MAX
      0x7f800000u, 0xff800000u,                           // +-inf
      0x7fc00000u, 0xffc00000u, 0x7fc12345u,              // quiet NaNs
      0x7f800001u, 0xffa00000u,                           // signalling NaNs
      0x5f000000u, 0x1e000000u, 0x3f800000u, 0xbf000000u,  // 2^63 (g*g overflows), 2^-67 (underflows), 1, -0.5
  };
  return s;
}

// Normal values of size `scale` with every 5th element (in a seeded pattern)
// replaced by a special; `positive` keeps the normal values >= 0 (v).
// Memoised: the ISA tests draw the same inputs for every ISA and variant.
const std::vector<float>& mixed_vector(int64_t n, uint64_t seed, double scale, bool positive) {
  static std::map<std::tuple<int64_t, uint64_t, double, bool>, std::vector<float>> memo;
  const auto key = std::make_tuple(n, seed, scale, positive);
  const auto found = memo.find(key);
  if (found != memo.end()) return found->second;
  std::vector<float> x = random_vector(n, seed, scale);
  const CounterRng rng{rng_key(seed, 77)};
  const std::vector<uint32_t>& sp = special_bits();
  for (int64_t i = 0; i < n; ++i) {
    float& e = x[static_cast<size_t>(i)];
    if (positive) e = std::fabs(e);
    const double u = rng.uniform(static_cast<uint64_t>(i));
    if (u < 0.2) e = from_bits(sp[static_cast<size_t>(u * 5.0 * static_cast<double>(sp.size())) % sp.size()]);
  }
  return memo.emplace(key, std::move(x)).first->second;
}

// Bit equality, except that two NaNs are equal whatever their sign and
// payload: which NaN operand an IEEE operation returns depends on the
// compiler's operand order, and the GPU returns its canonical NaN anyway.
// Every non-NaN result must match bit for bit.
bool same_value_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return bits_of(a) == bits_of(b);
}

bool is_nan16_bf16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }
bool is_nan16_f16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

// Decay tilings of [0, n): all decay, none, and pieces of 1 to `piece`
// elements alternating (odd starts, length-1 pieces).
std::vector<std::vector<DecayRange>> tilings(int64_t n, uint64_t seed) {
  std::vector<std::vector<DecayRange>> out;
  if (n == 0) return out;
  out.push_back({{0, n, true}});
  out.push_back({{0, n, false}});
  const CounterRng rng{rng_key(seed, 5)};
  const int64_t piece = std::max<int64_t>(1, n / 7);
  std::vector<DecayRange> cut;
  bool decay = true;
  for (int64_t b = 0, k = 0; b < n; ++k) {
    const int64_t len = std::min(n - b, 1 + static_cast<int64_t>(rng.uniform(static_cast<uint64_t>(k)) *
                                                                 static_cast<double>(piece)));
    cut.push_back({b, b + len, decay});
    decay = !decay;
    b += len;
  }
  out.push_back(cut);
  return out;
}

enum class CopyKind { none, bf16, f16 };
const char* copy_name(CopyKind c) { return c == CopyKind::none ? "none" : c == CopyKind::bf16 ? "bf16" : "f16"; }

// One case: three steps from the same state by the ISA under test and by
// the scalar reference; `offset` misaligns every array by that many floats.
void check_isa_case(const std::string& isa, int64_t n, int64_t offset, const std::vector<DecayRange>& ranges,
                    double beta1, CopyKind copy, uint64_t seed) {
  AdamWParams hp = test_params();
  hp.beta1 = beta1;
  const size_t len = static_cast<size_t>(n + offset);
  std::vector<float> p = mixed_vector(n + offset, seed, 1.0, false);
  std::vector<float> m = mixed_vector(n + offset, seed + 1, 0.1, false);
  std::vector<float> v = mixed_vector(n + offset, seed + 2, 0.01, true);
  std::vector<float> rp = p, rm = m, rv = v;
  std::vector<uint16_t> c16(len, 0xdeadu);
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float>& g = mixed_vector(n + offset, seed + 10 * static_cast<uint64_t>(t), 0.5, false);
    const float grad_scale = t == 2 ? 0.25f : 1.0f;
    float* const P = p.data() + offset;
    float* const M = m.data() + offset;
    float* const V = v.data() + offset;
    const float* const G = g.data() + offset;
    switch (copy) {
      case CopyKind::none:
        adamw_update_ranges(P, G, M, V, n, ranges, hp, t, grad_scale);
        break;
      case CopyKind::bf16:
        adamw_update_ranges(P, G, M, V, n, ranges, hp, t, grad_scale,
                            reinterpret_cast<bf16*>(c16.data() + offset));
        break;
      case CopyKind::f16:
        adamw_update_ranges(P, G, M, V, n, ranges, hp, t, grad_scale,
                            reinterpret_cast<f16*>(c16.data() + offset));
        break;
    }
    scalar_update(rp.data() + offset, G, rm.data() + offset, rv.data() + offset, ranges,
                  adamw_scalars(hp, t, grad_scale));
    for (size_t i = static_cast<size_t>(offset); i < len; ++i) {
      ASSERT_TRUE(same_value_bits(p[i], rp[i]))
          << isa << " copy " << copy_name(copy) << " n " << n << " offset " << offset << " step " << t
          << " p[" << i - static_cast<size_t>(offset) << "]: " << std::hex << bits_of(p[i]) << " vs scalar "
          << bits_of(rp[i]);
      ASSERT_TRUE(same_value_bits(m[i], rm[i])) << isa << " n " << n << " m[" << i << "]";
      ASSERT_TRUE(same_value_bits(v[i], rv[i])) << isa << " n " << n << " v[" << i << "]";
      if (copy == CopyKind::bf16) {
        const uint16_t want = f32_to_bf16(rp[i]).bits;
        ASSERT_TRUE(c16[i] == want || (is_nan16_bf16(c16[i]) && is_nan16_bf16(want)))
            << isa << " n " << n << " bf16 copy [" << i << "] " << std::hex << c16[i] << " vs " << want;
        ASSERT_EQ(c16[i], f32_to_bf16(p[i]).bits) << "the copy is the rounding of the stored p";
      } else if (copy == CopyKind::f16) {
        const uint16_t want = f32_to_f16(rp[i]).bits;
        ASSERT_TRUE(c16[i] == want || (is_nan16_f16(c16[i]) && is_nan16_f16(want)))
            << isa << " n " << n << " f16 copy [" << i << "] " << std::hex << c16[i] << " vs " << want;
        ASSERT_EQ(c16[i], f32_to_f16(p[i]).bits) << "the copy is the rounding of the stored p";
      }
    }
    // Elements before the range are untouched (the misalignment pad).
    for (size_t i = 0; i < static_cast<size_t>(offset); ++i) {
      ASSERT_EQ(bits_of(p[i]), bits_of(rp[i]));
      if (copy != CopyKind::none) {
        ASSERT_EQ(c16[i], 0xdeadu);
      }
    }
  }
}

TEST(AdamWIsa, ListAndDefaultMatchTheCpu) {
  IsaGuard guard;
  unsetenv("ZT_ADAMW_ISA");
  adamw_set_cpu_isa("");
  const std::vector<std::string> isas = adamw_cpu_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), adamw_cpu_isa()) << "the default is the best ISA";
#if defined(__x86_64__)
  EXPECT_EQ(isas.back(), "sse2");
  auto has = [&](const char* name) { return std::find(isas.begin(), isas.end(), name) != isas.end(); };
  EXPECT_EQ(has("avx2"), __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(has("avx512f"), __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512vl"));
#endif
  std::string list;
  for (const std::string& isa : isas) list += isa + " ";
  std::printf("AdamW ISAs on this CPU: %s(default %s)\n", list.c_str(), adamw_cpu_isa());
}

TEST(AdamWIsa, EnvironmentAndSetterPickTheIsa) {
  IsaGuard guard;
  for (const std::string& isa : adamw_cpu_isas()) {
    setenv("ZT_ADAMW_ISA", isa.c_str(), 1);
    adamw_set_cpu_isa("");
    EXPECT_EQ(std::string(adamw_cpu_isa()), isa);
    unsetenv("ZT_ADAMW_ISA");
    adamw_set_cpu_isa(isa);
    EXPECT_EQ(std::string(adamw_cpu_isa()), isa);
  }
  setenv("ZT_ADAMW_ISA", "auto", 1);
  adamw_set_cpu_isa("");
  EXPECT_EQ(std::string(adamw_cpu_isa()), adamw_cpu_isas().front());
  // A bad name fails with a message naming the variable, and leaves the ISA as it was.
  adamw_set_cpu_isa("sse2");
  setenv("ZT_ADAMW_ISA", "avx9000", 1);
  try {
    adamw_set_cpu_isa("");
    ADD_FAILURE() << "ZT_ADAMW_ISA=avx9000 was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("ZT_ADAMW_ISA=avx9000"), std::string::npos) << e.what();
  }
  EXPECT_STREQ(adamw_cpu_isa(), "sse2");
  EXPECT_THROW(adamw_set_cpu_isa("AVX2"), UserError);  // names are lower case
}

// An ISA the CPU lacks is refused, never run (it would die of SIGILL).
TEST(AdamWIsa, RefusesAnIsaTheCpuLacks) {
  IsaGuard guard;
  const std::vector<std::string> isas = adamw_cpu_isas();
  int missing = 0;
  for (const char* name : {"avx512f", "avx2"}) {
    if (std::find(isas.begin(), isas.end(), name) != isas.end()) continue;
    ++missing;
    try {
      adamw_set_cpu_isa(name);
      ADD_FAILURE() << name << " accepted on a CPU without it";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find("lacks"), std::string::npos) << e.what();
    }
    setenv("ZT_ADAMW_ISA", name, 1);
    EXPECT_THROW(adamw_set_cpu_isa(""), UserError);
  }
  if (missing == 0) GTEST_SKIP() << "this CPU has every ISA (" << isas.front() << "): nothing to refuse";
}

// The heart of it: every ISA, both lerp branches, with and without each
// working copy, odd lengths (vector bodies, peels and tails), misaligned
// arrays, decay spans of every shape, NaN, infinities and subnormals. The
// longest length gives each of up to 4 threads a part long enough for the
// streamed copy ([Note: streaming the working copy] in adamw.cpp): its
// unaligned head, whole blocks and tail.
TEST(AdamWIsa, EveryIsaMatchesTheScalarFormulaBitForBit) {
  IsaGuard guard;
  const std::vector<int64_t> lengths = {1,  2,  3,  5,   7,   8,   9,    15,   16,   17,
                                        31, 33, 63, 65,  127, 129, 1000, 1023, 4097, 140003};
  int cases = 0;
  for (const std::string& isa : adamw_cpu_isas()) {
    adamw_set_cpu_isa(isa);
    ASSERT_EQ(std::string(adamw_cpu_isa()), isa);
    for (const double beta1 : {0.9, 0.3}) {  // lerp weight 0.1 (from the start) and 0.7 (from the end)
      ASSERT_EQ(adamw_scalars(AdamWParams{1e-2, beta1, 0.95, 1e-8, 0.1}, 1, 1.0f).lerp_from_start, beta1 > 0.5);
      for (const CopyKind copy : {CopyKind::none, CopyKind::bf16, CopyKind::f16}) {
        for (const int64_t n : lengths) {
          const uint64_t seed = 1000 + static_cast<uint64_t>(n);
          const std::vector<std::vector<DecayRange>> cuts = tilings(n, seed);
          for (size_t k = 0; k < cuts.size(); ++k) {
            const std::vector<DecayRange>& ranges = cuts[k];
            if (n > 5000 && k == 1) continue;  // the longest: one range (streamed copy) and the mixed cut,
            for (const int64_t offset : {0, 1, 3}) {
              if (n > 5000 && offset != 1) continue;  // misaligned
              if (n > 1000 && offset == 3) continue;
              check_isa_case(isa, n, offset, ranges, beta1, copy, seed);
              if (HasFatalFailure()) return;
              ++cases;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

// adamw_update (one decay flag, its own overloads) takes the same loops.
TEST(AdamWIsa, PlainUpdateMatchesAcrossIsas) {
  IsaGuard guard;
  const int64_t n = 70001;
  const AdamWParams hp = test_params();
  std::vector<float> p0, m0, v0, c_bf16, c_f16;
  std::vector<bf16> b0;
  std::vector<f16> h0;
  bool first = true;
  for (const std::string& isa : adamw_cpu_isas()) {
    adamw_set_cpu_isa(isa);
    State s{mixed_vector(n, 11, 1.0, false), mixed_vector(n, 12, 0.1, false), mixed_vector(n, 13, 0.01, true)};
    State s16 = s, s_h = s;
    std::vector<bf16> b(static_cast<size_t>(n));
    std::vector<f16> h(static_cast<size_t>(n));
    for (int64_t t = 1; t <= 2; ++t) {
      const std::vector<float>& g = mixed_vector(n, 20 + static_cast<uint64_t>(t), 1.0, false);
      adamw_update(s.p.data(), g.data(), s.m.data(), s.v.data(), n, hp, t, 0.5f, true);
      adamw_update(s16.p.data(), g.data(), s16.m.data(), s16.v.data(), n, hp, t, 0.5f, false, b.data());
      adamw_update(s_h.p.data(), g.data(), s_h.m.data(), s_h.v.data(), n, hp, t, 0.5f, true, h.data());
    }
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      ASSERT_TRUE(same_value_bits(s.p[i], s_h.p[i])) << isa << " " << i;
      ASSERT_EQ(b[i].bits, f32_to_bf16(s16.p[i]).bits) << isa << " " << i;
      ASSERT_EQ(h[i].bits, f32_to_f16(s_h.p[i]).bits) << isa << " " << i;
    }
    if (first) {
      p0 = s.p, m0 = s.m, v0 = s.v, b0 = b, h0 = h;
      first = false;
      continue;
    }
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      ASSERT_TRUE(same_value_bits(s.p[i], p0[i])) << isa << " p " << i;
      ASSERT_TRUE(same_value_bits(s.m[i], m0[i])) << isa << " m " << i;
      ASSERT_TRUE(same_value_bits(s.v[i], v0[i])) << isa << " v " << i;
      ASSERT_TRUE(b[i].bits == b0[i].bits || (is_nan16_bf16(b[i].bits) && is_nan16_bf16(b0[i].bits)));
      ASSERT_TRUE(h[i].bits == h0[i].bits || (is_nan16_f16(h[i].bits) && is_nan16_f16(h0[i].bits)));
    }
  }
}

// bf16 gradients (offload.grad_dtype "bf16") are widened exactly: the update
// from them has the bits of the update from their fp32 values, on every ISA,
// with every working copy, aligned or not, in one range or many.
TEST(AdamWIsa, Bf16GradientsGiveTheBitsOfTheirFp32Values) {
  IsaGuard guard;
  const AdamWParams hp = test_params();
  int cases = 0;
  for (const std::string& isa : adamw_cpu_isas()) {
    adamw_set_cpu_isa(isa);
    for (const CopyKind copy : {CopyKind::none, CopyKind::bf16, CopyKind::f16}) {
      for (const int64_t n : {int64_t{1}, int64_t{17}, int64_t{1023}, int64_t{70001}}) {
        const uint64_t seed = 500 + static_cast<uint64_t>(n);
        for (const std::vector<DecayRange>& ranges : tilings(n, seed)) {
          for (const int64_t offset : {0, 1}) {
            const size_t len = static_cast<size_t>(n + offset);
            std::vector<float> p = mixed_vector(n + offset, seed, 1.0, false);
            std::vector<float> m = mixed_vector(n + offset, seed + 1, 0.1, false);
            std::vector<float> v = mixed_vector(n + offset, seed + 2, 0.01, true);
            std::vector<float> rp = p, rm = m, rv = v;
            std::vector<uint16_t> c(len, 0), rc(len, 0);
            for (int64_t t = 1; t <= 2; ++t) {
              const std::vector<float>& g32 = mixed_vector(n + offset, seed + 10 * static_cast<uint64_t>(t), 0.5, false);
              std::vector<bf16> gb(len);
              std::vector<float> gw(len);
              for (size_t i = 0; i < len; ++i) {
                gb[i] = f32_to_bf16(g32[i]);
                gw[i] = bf16_to_f32(gb[i]);
              }
              const int64_t o = offset;
              const float scale = t == 2 ? 0.25f : 1.0f;
              switch (copy) {
                case CopyKind::none:
                  adamw_update_ranges(p.data() + o, gb.data() + o, m.data() + o, v.data() + o, n, ranges, hp, t, scale);
                  adamw_update_ranges(rp.data() + o, gw.data() + o, rm.data() + o, rv.data() + o, n, ranges, hp, t,
                                      scale);
                  break;
                case CopyKind::bf16:
                  adamw_update_ranges(p.data() + o, gb.data() + o, m.data() + o, v.data() + o, n, ranges, hp, t, scale,
                                      reinterpret_cast<bf16*>(c.data() + o));
                  adamw_update_ranges(rp.data() + o, gw.data() + o, rm.data() + o, rv.data() + o, n, ranges, hp, t,
                                      scale, reinterpret_cast<bf16*>(rc.data() + o));
                  break;
                case CopyKind::f16:
                  adamw_update_ranges(p.data() + o, gb.data() + o, m.data() + o, v.data() + o, n, ranges, hp, t, scale,
                                      reinterpret_cast<f16*>(c.data() + o));
                  adamw_update_ranges(rp.data() + o, gw.data() + o, rm.data() + o, rv.data() + o, n, ranges, hp, t,
                                      scale, reinterpret_cast<f16*>(rc.data() + o));
                  break;
              }
              for (size_t i = static_cast<size_t>(o); i < len; ++i) {
                ASSERT_TRUE(same_value_bits(p[i], rp[i]) && same_value_bits(m[i], rm[i]) && same_value_bits(v[i], rv[i]))
                    << isa << " copy " << copy_name(copy) << " n " << n << " offset " << o << " step " << t << " ["
                    << i << "]";
                ASSERT_TRUE(c[i] == rc[i] || (is_nan16_bf16(c[i]) && is_nan16_bf16(rc[i])) ||
                            (is_nan16_f16(c[i]) && is_nan16_f16(rc[i])))
                    << isa << " copy " << copy_name(copy) << " [" << i << "]";
              }
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

// The vectorised roundings of the working copy against core's f32_to_bf16
// and f32_to_f16 for every exponent and sign (all 2^16 upper halves) with
// low halves at and around every rounding tie. A zero gradient and zero
// moments without decay leave p exactly as it was (p*1 + (-0)), so the copy
// is the rounding of the input pattern itself.
TEST(AdamWIsa, WorkingCopyRoundsLikeCoreForEveryExponent) {
  IsaGuard guard;
  const std::vector<uint32_t> lows = {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x1fffu, 0x2000u, 0x3000u,
                                      0x5000u, 0x7fffu, 0x8000u, 0x8001u, 0x9000u, 0xc000u, 0xefffu, 0xffffu};
  const int64_t n = int64_t{1} << 16 << 4;
  std::vector<float> p0(static_cast<size_t>(n));
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    for (size_t k = 0; k < lows.size(); ++k) p0[hi * lows.size() + k] = from_bits(hi << 16 | lows[k]);
  }
  AdamWParams hp = test_params();
  const std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
  for (const std::string& isa : adamw_cpu_isas()) {
    adamw_set_cpu_isa(isa);
    for (const double beta1 : {0.9, 0.3}) {
      hp.beta1 = beta1;
      std::vector<float> p = p0, m = zeros, v = zeros;
      std::vector<bf16> b(static_cast<size_t>(n));
      std::vector<f16> h(static_cast<size_t>(n));
      adamw_update(p.data(), zeros.data(), m.data(), v.data(), n, hp, 1, 1.0f, false, b.data());
      p = p0, m = zeros, v = zeros;
      adamw_update(p.data(), zeros.data(), m.data(), v.data(), n, hp, 1, 1.0f, false, h.data());
      for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
        const uint32_t in = bits_of(p0[i]);
        const bool snan = (in & 0x7f800000u) == 0x7f800000u && (in & 0x007fffffu) != 0 && (in & 0x00400000u) == 0;
        ASSERT_EQ(bits_of(p[i]), snan ? (in | 0x00400000u) : in) << isa << " p unchanged " << std::hex << in;
        ASSERT_EQ(b[i].bits, f32_to_bf16(p[i]).bits) << isa << " bf16 of " << std::hex << in;
        ASSERT_EQ(h[i].bits, f32_to_f16(p[i]).bits) << isa << " f16 of " << std::hex << in;
      }
    }
  }
}

}  // namespace
}  // namespace zt
