// Test-local helpers for the CUDA attention and classifier tests: GPU
// detection (tests skip without one), a minimal cudaMalloc Device for the
// workspace Arena, device buffers filled from host floats in any storage
// dtype, NaN poisoning, and relative errors.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "runtime/device.hpp"

#define ZT_TEST_CUDA(expr)                                                                          \
  do {                                                                                              \
    const cudaError_t zt_test_err_ = (expr);                                                        \
    ASSERT_EQ(zt_test_err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(zt_test_err_);      \
  } while (0)

// Skips the current test when the process sees no GPU (or no driver).
#define ZT_SKIP_WITHOUT_GPU()                                                    \
  do {                                                                           \
    int zt_n_dev_ = 0;                                                           \
    if (cudaGetDeviceCount(&zt_n_dev_) != cudaSuccess || zt_n_dev_ == 0) {       \
      (void)cudaGetLastError();                                                  \
      GTEST_SKIP() << "no CUDA device";                                          \
    }                                                                            \
  } while (0)

namespace zt::test {

// Plain cudaMalloc device, so that these tests depend on nothing but the
// kernels under test (runtime/cuda's CudaDevice adds a caching allocator).
class PlainCudaDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return "cuda (test)"; }
  void memset_zero(void* p, size_t bytes) override { check(cudaMemset(p, 0, bytes)); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void synchronize() override { check(cudaDeviceSynchronize()); }

 protected:
  void* raw_allocate(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return p;
  }
  void raw_deallocate(void* p, size_t) noexcept override { (void)cudaFree(p); }

 private:
  static void check(cudaError_t e) { ZT_CHECK(e == cudaSuccess, cudaGetErrorString(e)); }
};

// Sets ZTRAIN_ATTENTION (flash or cudnn: which path runs 16-bit attention,
// read by the launchers at every call) for one scope, then restores it.
class ScopedAttentionPath {
 public:
  explicit ScopedAttentionPath(const char* path) {
    const char* old = std::getenv(kVar);
    had_ = old != nullptr;
    if (had_) old_ = old;
    ::setenv(kVar, path, 1);
  }
  ~ScopedAttentionPath() {
    if (had_) ::setenv(kVar, old_.c_str(), 1);
    else ::unsetenv(kVar);
  }
  ScopedAttentionPath(const ScopedAttentionPath&) = delete;
  ScopedAttentionPath& operator=(const ScopedAttentionPath&) = delete;

 private:
  static constexpr const char* kVar = "ZTRAIN_ATTENTION";
  bool had_ = false;
  std::string old_;
};

// A random seed per run, printed so that a failure can be replayed with
// ZT_TEST_SEED=<seed>.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* env = std::getenv("ZT_TEST_SEED");
    const uint64_t s = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("[ seed     ] ZT_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

inline std::vector<float> normal_vec(std::mt19937_64& rng, size_t n, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Host values rounded to `dtype` and widened back, so CPU and GPU see the
// same inputs bit for bit.
inline std::vector<float> round_to(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> tmp(v.size() * dtype_size(dtype));
  convert(v.data(), DType::f32, tmp.data(), dtype, v.size());
  std::vector<float> out(v.size());
  convert(tmp.data(), dtype, out.data(), DType::f32, v.size());
  return out;
}

// A tensor owned by a Buffer on either device, filled from or read as floats.
struct TestTensor {
  Buffer buf;
  Tensor t;
  TestTensor(Device& dev, DType dtype, Shape shape) : buf(dev, dtype, shape, MemTag::activations) {
    t = buf.tensor();
  }
  void fill(Device& dev, const std::vector<float>& v) {
    ZT_CHECK(static_cast<int64_t>(v.size()) == t.numel(), "fill size");
    std::vector<uint8_t> tmp(t.bytes());
    convert(v.data(), DType::f32, tmp.data(), t.dtype, v.size());
    dev.copy_from_host(t.data, tmp.data(), tmp.size());
  }
  void fill_i32(Device& dev, const std::vector<int32_t>& v) { dev.copy_from_host(t.data, v.data(), t.bytes()); }
  std::vector<float> read(Device& dev) const {
    std::vector<uint8_t> tmp(t.bytes());
    dev.copy_to_host(tmp.data(), t.data, tmp.size());
    std::vector<float> v(static_cast<size_t>(t.numel()));
    convert(tmp.data(), t.dtype, v.data(), DType::f32, v.size());
    return v;
  }
  // All bytes 0xFF: a NaN in f32, bf16 and f16 alike.
  void poison() {
    ZT_CHECK(t.device == DeviceKind::cuda, "poison a device tensor");
    ZT_CHECK(cudaMemset(t.data, 0xFF, t.bytes()) == cudaSuccess, "poison");
  }
};

inline int64_t count_nonfinite(const std::vector<float>& v) {
  int64_t n = 0;
  for (float x : v) n += std::isfinite(x) ? 0 : 1;
  return n;
}

// ||a - b|| / ||b|| over elements [begin, end) with a stride pattern given by
// `take(i)` (default: all).
template <typename Take>
double rel_err_if(const std::vector<float>& a, const std::vector<float>& b, Take take) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!take(i)) continue;
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_err_if(a, b, [](size_t) { return true; });
}

}  // namespace zt::test
