#include "core/dtype.hpp"

#include "core/error.hpp"

namespace zt {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::u16: return 2;
  }
  ZT_THROW("bad dtype");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::u16: return "u16";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::u16}) {
    if (name == dtype_name(t)) return t;
  }
  ZT_THROW("unknown dtype '", name, "'");
}

float f16_to_f32(f16 v) {
  const uint32_t h = v.bits;
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      u = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((u >> 23) & 0xffu);
  uint32_t mant = u & 0x7fffffu;
  if (exp == 0xff) {  // inf or NaN
    return f16{static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u))};
  }
  int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return f16{static_cast<uint16_t>(sign)};  // underflow -> 0
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return f16{static_cast<uint16_t>(sign | half)};
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: correct
  return f16{static_cast<uint16_t>(half)};
}

namespace {
template <typename S>
float load(const void* p, size_t i) {
  return to_f32(static_cast<const S*>(p)[i]);
}
}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  if (st == DType::f64 && dt == DType::f32) {
    for (size_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = static_cast<float>(static_cast<const double*>(src)[i]);
    return;
  }
  if (dt == DType::f64) {
    ZT_CHECK(st == DType::f32, "convert to f64 only from f32");
    for (size_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = static_cast<const float*>(src)[i];
    return;
  }
  auto get = [&](size_t i) -> float {
    switch (st) {
      case DType::f32: return load<float>(src, i);
      case DType::bf16: return load<bf16>(src, i);
      case DType::f16: return load<f16>(src, i);
      default: ZT_THROW("convert: unsupported source dtype ", dtype_name(st));
    }
  };
  switch (dt) {
    case DType::f32:
      for (size_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = get(i);
      return;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) static_cast<bf16*>(dst)[i] = f32_to_bf16(get(i));
      return;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) static_cast<f16*>(dst)[i] = f32_to_f16(get(i));
      return;
    default: ZT_THROW("convert: unsupported target dtype ", dtype_name(dt));
  }
}

}  // namespace zt
