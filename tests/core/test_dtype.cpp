// fp32 <-> bf16 / f16 conversions: round to nearest even, NaN and infinity,
// f16 subnormals and overflow, and the bulk convert().
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/dtype.hpp"
#include "core/rng.hpp"

namespace zt {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint16_t bf16_bits(float f) { return f32_to_bf16(f).bits; }
uint16_t f16_bits(float f) { return f32_to_f16(f).bits; }

TEST(DtypeBf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(-2.0f), 0xC000);
  // The dropped 16 bits decide: below half rounds down, above half up, and an
  // exact half rounds to the even neighbour.
  EXPECT_EQ(bf16_bits(from_bits(0x3F807FFF)), 0x3F80);
  EXPECT_EQ(bf16_bits(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(bf16_bits(from_bits(0x3F808000)), 0x3F80);  // tie, 0x3F80 is even
  EXPECT_EQ(bf16_bits(from_bits(0x3F818000)), 0x3F82);  // tie, 0x3F81 is odd
  EXPECT_EQ(bf16_bits(from_bits(0xBF818000)), 0xBF82);  // sign does not matter
  // Rounding may carry into the exponent, and past the largest finite value to inf.
  EXPECT_EQ(bf16_bits(from_bits(0x3FFFFFFF)), 0x4000);
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7F80);
}

TEST(DtypeBf16, NanStaysNanAndInfStaysInf) {
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bf16_bits(-std::numeric_limits<float>::infinity()), 0xFF80);
  // NaNs whose payload lives only in the dropped bits must not become inf.
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFF800001u, 0x7FFFFFFFu}) {
    const bf16 b = f32_to_bf16(from_bits(nan));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << nan;
    EXPECT_EQ(b.bits & 0x8000, (nan >> 16) & 0x8000) << "sign of " << std::hex << nan;
  }
}

TEST(DtypeBf16, EveryBf16ValueRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const bf16 b{static_cast<uint16_t>(bits)};
    const float f = bf16_to_f32(b);
    EXPECT_EQ(to_bits(f), bits << 16);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
    else
      EXPECT_EQ(f32_to_bf16(f).bits, bits);
  }
}

TEST(DtypeF16, NormalValuesAndRounding) {
  EXPECT_EQ(f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(f16_bits(0.5f), 0x3800);
  EXPECT_EQ(f16_bits(65504.0f), 0x7BFF);  // largest finite f16
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(f16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(f16_bits(-0.0f), 0x8000);
}

TEST(DtypeF16, OverflowGoesToInfinity) {
  EXPECT_EQ(f16_bits(65519.0f), 0x7BFF);  // below the midpoint to 65536
  EXPECT_EQ(f16_bits(65520.0f), 0x7C00);  // the midpoint rounds to even: inf
  EXPECT_EQ(f16_bits(1e5f), 0x7C00);
  EXPECT_EQ(f16_bits(-1e30f), 0xFC00);
  EXPECT_EQ(f16_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(from_bits(0x7F800001u)))));
}

TEST(DtypeF16, Subnormals) {
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -14)), 0x0400);         // smallest normal
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -24)), 0x0001);         // smallest subnormal
  EXPECT_EQ(f16_bits(1023 * std::ldexp(1.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -25)), 0x0000);         // tie between 0 and 2^-24: even
  EXPECT_EQ(f16_bits(1.5f * std::ldexp(1.0f, -25)), 0x0001);
  EXPECT_EQ(f16_bits(3 * std::ldexp(1.0f, -25)), 0x0002);  // tie between 1 and 2 ulps: even
  EXPECT_EQ(f16_bits(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f16_bits(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(f16_to_f32(f16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(f16{0x03FF}), 1023 * std::ldexp(1.0f, -24));
}

TEST(DtypeF16, EveryF16ValueRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const f16 h{static_cast<uint16_t>(bits)};
    const float f = f16_to_f32(h);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << std::hex << bits;
    else
      EXPECT_EQ(f32_to_f16(f).bits, bits) << std::hex << bits;
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own conversion (IEEE round to nearest even) as reference, over
// random bit patterns covering all exponents.
TEST(DtypeF16, MatchesCompilerFloat16) {
  const CounterRng rng{rng_key(7)};
  for (uint64_t i = 0; i < 200000; ++i) {
    const float f = from_bits(static_cast<uint32_t>(rng.bits(i)));
    if (std::isnan(f)) continue;
    const _Float16 ref = static_cast<_Float16>(f);
    uint16_t ref_bits;
    std::memcpy(&ref_bits, &ref, 2);
    ASSERT_EQ(f16_bits(f), ref_bits) << "input bits " << std::hex << to_bits(f);
  }
}
#endif

TEST(DtypeConvert, BulkMatchesScalar) {
  std::vector<float> src = {0.0f, 1.0f, -3.14159f, 1e-6f, 70000.0f, 1e-30f};
  std::vector<bf16> b(src.size());
  std::vector<f16> h(src.size());
  std::vector<float> back(src.size());
  convert(src.data(), DType::f32, b.data(), DType::bf16, src.size());
  convert(src.data(), DType::f32, h.data(), DType::f16, src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(b[i].bits, bf16_bits(src[i]));
    EXPECT_EQ(h[i].bits, f16_bits(src[i]));
  }
  convert(b.data(), DType::bf16, back.data(), DType::f32, b.size());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(back[i], bf16_to_f32(b[i]));
  convert(h.data(), DType::f16, b.data(), DType::bf16, h.size());  // f16 -> bf16 through fp32
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(b[i].bits, bf16_bits(f16_to_f32(h[i])));
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_from_name("f16"), DType::f16);
}

}  // namespace
}  // namespace zt
