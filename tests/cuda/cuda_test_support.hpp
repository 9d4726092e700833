// Test-local helpers for the GPU parity tests: skipping without a GPU, fresh
// random seeds, host <-> device tensors, NaN poisoning and error norms.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "../modules/module_test_support.hpp"
#include "modules/cpu_kernels.hpp"
#include "modules/cuda/cuda_kernels.hpp"
#include "runtime/cuda/cuda_device.hpp"

// Skips the current test where the process sees no GPU (no device, no
// driver, or cudaGetDeviceCount failing).
#define ZT_REQUIRE_GPU()                                                  \
  do {                                                                    \
    if (::zt::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

namespace zt::test {

// A new seed on every run (random_device mixed with the clock), printed so a
// failing run can be reproduced by hand.
inline uint64_t fresh_seed() {
  std::random_device rd;
  const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ t;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

// Host and device buffers of one test, and copies between them.
struct GpuFixture : ::testing::Test {
  std::unique_ptr<CpuDevice> host;
  std::unique_ptr<CudaDevice> gpu;
  std::unique_ptr<CpuKernels> cpu_k;
  std::unique_ptr<CudaKernels> gpu_k;
  std::unique_ptr<Arena> host_ws, gpu_ws;
  std::vector<Buffer> owned;
  uint64_t seed = 0;
  uint64_t draws = 0;

  void SetUp() override {
    ZT_REQUIRE_GPU();
    seed = fresh_seed();
    host = std::make_unique<CpuDevice>();
    gpu = std::make_unique<CudaDevice>(0);
    cpu_k = std::make_unique<CpuKernels>();
    gpu_k = std::make_unique<CudaKernels>(*gpu);
    host_ws = std::make_unique<Arena>(*host, MemTag::workspace, size_t{1} << 20);
    gpu_ws = std::make_unique<Arena>(*gpu, MemTag::workspace, size_t{1} << 20);
  }
  void TearDown() override {
    if (gpu) gpu->synchronize();  // surfaces asynchronous faults in this test
    gpu_ws.reset();
    owned.clear();
    gpu_k.reset();
  }

  // An uninitialised host tensor; with `offset` elements of padding before
  // it, so that pointers can be misaligned on purpose.
  Tensor host_tensor(DType t, Shape s, int64_t offset = 0) { return make(*host, t, s, offset); }
  Tensor gpu_tensor(DType t, Shape s, int64_t offset = 0) { return make(*gpu, t, s, offset); }
  Tensor make(Device& dev, DType t, Shape s, int64_t offset) {
    owned.emplace_back(dev, static_cast<size_t>(s.numel() + offset) * dtype_size(t) + 1, MemTag::activations);
    return Tensor(static_cast<char*>(owned.back().data()) + offset * dtype_size(t), t, s, dev.kind());
  }
  // Uniform values in [-scale, scale) from this run's seed.
  Tensor host_random(DType t, Shape s, double scale = 1.0, int64_t offset = 0) {
    Tensor x = host_tensor(t, s, offset);
    fill_uniform(x, rng_key(seed, ++draws), scale);
    return x;
  }
  // A device copy of a host tensor (same dtype and shape).
  Tensor to_gpu(const Tensor& h, int64_t offset = 0) {
    Tensor d = gpu_tensor(h.dtype, h.shape, offset);
    gpu->copy_from_host(d.data, h.data, h.bytes());
    return d;
  }
  // Every element as double.
  std::vector<double> values(const Tensor& t) {
    std::vector<char> raw(t.bytes());
    if (t.device == DeviceKind::cuda) {
      gpu->copy_to_host(raw.data(), t.data, t.bytes());
    } else {
      std::memcpy(raw.data(), t.data, t.bytes());
    }
    const size_t n = static_cast<size_t>(t.numel());
    std::vector<double> v(n);
    if (t.dtype == DType::f64) {
      std::memcpy(v.data(), raw.data(), n * sizeof(double));
    } else if (t.dtype == DType::i32) {
      for (size_t i = 0; i < n; ++i) v[i] = reinterpret_cast<const int32_t*>(raw.data())[i];
    } else {  // f32, bf16, f16: exactly representable in f32
      std::vector<float> f(n);
      convert(raw.data(), t.dtype, f.data(), DType::f32, n);
      for (size_t i = 0; i < n; ++i) v[i] = f[i];
    }
    return v;
  }
  // Writes `v` into a host tensor, rounding to its dtype as the CPU does.
  void set_values(const Tensor& h, const std::vector<double>& v) {
    ASSERT_EQ(static_cast<int64_t>(v.size()), h.numel());
    if (h.dtype == DType::f64) {
      std::memcpy(h.data, v.data(), v.size() * sizeof(double));
    } else {
      const std::vector<float> f(v.begin(), v.end());
      convert(f.data(), DType::f32, h.data, h.dtype, f.size());
    }
  }
  // Fills a device tensor with NaN, so an element a kernel fails to write shows.
  void poison(const Tensor& d) {
    const Tensor h = host_tensor(d.dtype, d.shape);
    set_values(h, std::vector<double>(static_cast<size_t>(d.numel()), std::nan("")));
    gpu->copy_from_host(d.data, h.data, d.bytes());
  }
};

// ||got - want|| / ||want||; infinite when any element of got is not finite
// (an unwritten, NaN-poisoned element) or the sizes differ.
inline double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = a.size() == b.size() ? 0 : INFINITY;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// [Note: parity tolerances] Relative error bounds ||gpu - cpu|| / ||cpu||.
// f32 results: both sides compute in fp32 on the same inputs and differ only
// in the order of sums (~sqrt(K) * 2^-24 for a length-K sum, K <= a few
// thousand here), so 1e-5 leaves a wide margin (TF32 is off). Results stored
// in bf16 or f16, or products whose f32 operand the GPU rounds to 16 bits
// first ([Note: matmul precision]): one 16-bit rounding is 2^-9 (bf16)
// relative at most, ~1e-3 in norm, so 1e-2.
inline double tolerance(DType rounded) { return rounded == DType::f32 ? 1e-5 : 1e-2; }

inline const char* name_of(DType t) { return dtype_name(t); }

}  // namespace zt::test
