// Element types and the fp32 <-> bf16/f16 conversions (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace zt {

enum class DType : uint8_t { f32, f64, bf16, f16, i32, u16 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
DType dtype_from_name(const std::string& name);  // throws on unknown

// bf16: the upper 16 bits of an IEEE binary32, rounded to nearest even.
struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};

inline float bf16_to_f32(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) {  // NaN stays NaN
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>((u + rounding) >> 16)};
}

float f16_to_f32(f16 v);
f16 f32_to_f16(float f);

// Loads and stores in fp32 for any floating storage type; kernels are written
// once against these.
inline float to_f32(float v) { return v; }
inline float to_f32(bf16 v) { return bf16_to_f32(v); }
inline float to_f32(f16 v) { return f16_to_f32(v); }
inline double to_f64(double v) { return v; }
template <typename T>
inline T from_f32(float v);
template <>
inline float from_f32<float>(float v) { return v; }
template <>
inline double from_f32<double>(float v) { return v; }
template <>
inline bf16 from_f32<bf16>(float v) { return f32_to_bf16(v); }
template <>
inline f16 from_f32<f16>(float v) { return f32_to_f16(v); }

template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<uint16_t> { static constexpr DType value = DType::u16; };

// Bulk conversions between any two floating dtypes (f32, f64, bf16, f16).
void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace zt
