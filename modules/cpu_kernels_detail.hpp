// Internal to the CpuKernels .cpp files: element loads/stores between storage
// and math precision, dtype dispatch, matrix views and workspace staging.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <type_traits>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#include "runtime/device.hpp"

namespace zt::cpu {

// ---- element conversion ---------------------------------------------------
inline float widen(float v) { return v; }
inline float widen(bf16 v) { return bf16_to_f32(v); }
inline float widen(f16 v) { return f16_to_f32(v); }
inline double widen(double v) { return v; }

// Storage element -> math type M.
template <typename M, typename T>
inline M load(T v) {
  return static_cast<M>(widen(v));
}
// Math value -> storage element (round to nearest even for 16-bit types).
template <typename T, typename M>
inline T narrow(M v) {
  if constexpr (std::is_same_v<T, double>) {
    return static_cast<double>(v);
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(v);
  } else {
    return from_f32<T>(static_cast<float>(v));
  }
}

// The math type of a call: double as soon as any storage type is double.
template <typename... T>
using math_t = std::conditional_t<(std::is_same_v<T, double> || ...), double, float>;

// Calls f(T{}) with T the C++ type of a floating storage dtype.
template <typename F>
void with_storage(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return;
    case DType::bf16: f(bf16{}); return;
    case DType::f16: f(f16{}); return;
    case DType::f64: f(double{}); return;
    default: ZT_THROW("expected a floating-point tensor, got ", dtype_name(t));
  }
}

// A math-precision tensor (gradient, statistic, loss) as M*, checked.
template <typename M>
M* math_ptr(const Tensor& t, const char* what) {
  using V = std::remove_const_t<M>;
  ZT_CHECK(t.dtype == dtype_of<V>::value, what, " must be ", dtype_name(dtype_of<V>::value),
           " (the math dtype of this call), got ", dtype_name(t.dtype));
  ZT_CHECK(t.device == DeviceKind::cpu, what, " is not in host memory");
  return static_cast<M*>(t.data);
}

template <typename T>
T* typed(const Tensor& t) {
  ZT_CHECK(t.device == DeviceKind::cpu, "tensor is not in host memory");
  return static_cast<T*>(t.data);
}

// ---- transcendental functions --------------------------------------------------
// exp for the fp32 paths, written so that `omp simd` loops vectorise it
// (glibc's expf/tanhf are scalar calls without -ffast-math and were half the
// step time of a small model). Cody-Waite reduction x = n ln2 + r and Cephes'
// degree-6 polynomial: within 2 ulp of expf on [-87, 88]; inputs are clamped,
// so it returns ~1e-38 (not 0) far below and ~1.7e38 (not inf) far above.
// The f64 path keeps std::exp for the finite-difference tests.
inline float fast_exp(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + magic;
  const float n = t - magic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n from t's bits, whose low mantissa bits hold n (t is in [2^23, 2^24),
  // where the float spacing is 1), in unsigned arithmetic: a NaN input (a
  // diverged run) passes the clamp, and casting it to int, then shifting a
  // negative value, was undefined (UBSan, ztrain_nonfinite under the asan
  // preset); now the result is NaN through p.
  uint32_t t_bits;
  std::memcpy(&t_bits, &t, sizeof t_bits);
  const uint32_t bits = (t_bits - 0x4B400000u + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
inline double fast_exp(double x) { return std::exp(x); }

// ---- matrix views -------------------------------------------------------------
inline int64_t cols(const Tensor& t) { return t.shape.rank() == 0 ? 1 : t.shape[-1]; }
inline int64_t rows(const Tensor& t) { return cols(t) == 0 ? 0 : t.numel() / cols(t); }

// [begin, end) of part `i` of `n` split into `parts` nearly equal ranges.
inline void split_range(int64_t n, int parts, int i, int64_t& begin, int64_t& end) {
  const int64_t q = n / parts, r = n % parts;
  begin = i * q + std::min<int64_t>(i, r);
  end = begin + q + (i < r ? 1 : 0);
}

// Work (in elements touched) below which a loop stays single-threaded: the
// fork/join costs more than it saves.
constexpr int64_t kParallelGrain = 1 << 15;

// dst = src element-wise, any floating dtypes; parallel for large tensors.
void cast_into(const Tensor& dst, const Tensor& src);

// ---- document masking ([Note: document masking] in kernels.hpp) ---------------
// The (B, T) i32 doc_start of a call as a host array, checked to describe
// documents: doc_start[b, 0] = 0, and each later entry either continues the
// previous token's document or starts one at itself. nullptr when undefined
// (a plain corpus: every start is 0).
inline const int32_t* doc_starts(const Tensor& doc_start, int64_t B, int64_t T, const char* who) {
  if (!doc_start.defined()) return nullptr;
  ZT_CHECK(doc_start.dtype == DType::i32 && doc_start.shape == (Shape{B, T}), who, ": doc_start must be (", B, ", ",
           T, ") i32, got ", doc_start.shape.str(), " ", dtype_name(doc_start.dtype));
  const int32_t* d = typed<const int32_t>(doc_start);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* r = d + b * T;
    for (int64_t t = 0; t < T; ++t) {
      ZT_CHECK(r[t] == t || (t > 0 && r[t] == r[t - 1]), who, ": doc_start[", b, ", ", t, "] = ", r[t],
               " is neither ", t, " (a document starts) nor doc_start[", b, ", ", t - 1, "]");
    }
  }
  return d;
}
// The first key token t (row-major index bt = b T + t) may attend to, which
// is also the token its position counts from.
inline int64_t doc_start_of(const int32_t* doc_start, int64_t bt) { return doc_start ? doc_start[bt] : 0; }

// ---- staging ------------------------------------------------------------------
// Gives a kernel math-precision pointers to tensors stored in another dtype:
// inputs are converted into workspace copies, outputs are computed in a
// workspace buffer and converted back by commit(). Tensors already in the math
// dtype are used in place. Releases the workspace on destruction.
class Staging {
 public:
  explicit Staging(Arena& ws) : ws_(ws), scope_(ws) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  template <typename M>
  const M* in(const Tensor& t) {
    if (t.dtype == dtype_of<M>::value) return typed<const M>(t);
    Tensor tmp = ws_.alloc(dtype_of<M>::value, t.shape);
    cast_into(tmp, t);
    return static_cast<const M*>(tmp.data);
  }
  // keep: the current contents are needed (accumulation into the output).
  template <typename M>
  M* out(const Tensor& t, bool keep) {
    if (t.dtype == dtype_of<M>::value) return typed<M>(t);
    ZT_CHECK(n_pending_ < static_cast<int>(pending_.size()), "too many staged outputs");
    Tensor tmp = ws_.alloc(dtype_of<M>::value, t.shape);
    if (keep) cast_into(tmp, t);
    pending_[n_pending_++] = {t, tmp};
    return static_cast<M*>(tmp.data);
  }
  template <typename M>
  M* temp(int64_t n) {
    return static_cast<M*>(ws_.alloc(dtype_of<M>::value, Shape{n}).data);
  }
  // Converts staged outputs back into their tensors.
  void commit() {
    for (int i = 0; i < n_pending_; ++i) cast_into(pending_[i].dst, pending_[i].tmp);
    n_pending_ = 0;
  }

 private:
  struct Pending {
    Tensor dst, tmp;
  };
  Arena& ws_;
  ArenaScope scope_;  // releases the workspace
  std::array<Pending, 4> pending_{};
  int n_pending_ = 0;
};

}  // namespace zt::cpu
