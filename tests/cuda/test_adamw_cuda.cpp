// The fused GPU AdamW against the CPU's adamw_update on random data: the
// same operation order on both sides ([Note: AdamW formula]), so parameters,
// m, v and the working copy must agree bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

#include "cuda_test_support.hpp"
#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "optim/clip_math.hpp"
#include "optim/cuda/adamw.cuh"
#include "optim/cuda/step_verdict.cuh"

namespace zt::test {
namespace {

struct AdamWCase {
  double beta1;  // 0.9: lerp from the start; 0.3: aten's other lerp branch
  bool decay;
  int64_t step;
  DType copy;  // f32 here means "no working copy"
  int64_t offset;
};

// Elements of two arrays whose bits differ.
int64_t bit_mismatches(const void* a, const void* b, int64_t n, size_t elem) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(static_cast<const char*>(a) + i * elem, static_cast<const char*>(b) + i * elem, elem) != 0) ++bad;
  }
  return bad;
}

using CudaAdamW = GpuFixture;

TEST_F(CudaAdamW, MatchesCpuBitForBit) {
  const int64_t n = 1000003;  // odd: vector body and scalar tail
  const AdamWCase cases[] = {
      {0.9, true, 1, DType::f32, 0},   {0.9, false, 7, DType::bf16, 0}, {0.3, true, 3, DType::f16, 0},
      {0.9, true, 1000, DType::bf16, 1}, {0.3, false, 2, DType::f32, 1},
  };
  for (const AdamWCase& c : cases) {
    AdamWParams hp;
    hp.lr = 3e-4;
    hp.beta1 = c.beta1;
    hp.beta2 = 0.95;
    hp.eps = 1e-8;
    hp.weight_decay = 0.1;
    const float grad_scale = 0.37f;
    // Random state as after some steps: v >= 0.
    const Tensor p = host_random(DType::f32, Shape{n}), g = host_random(DType::f32, Shape{n}, 4.0);
    const Tensor m = host_random(DType::f32, Shape{n}, 0.1), v = host_random(DType::f32, Shape{n}, 0.01);
    float* vh = v.as<float>();
    for (int64_t i = 0; i < n; ++i) vh[i] = std::fabs(vh[i]);
    const Tensor p_d = to_gpu(p, c.offset), g_d = to_gpu(g, c.offset), m_d = to_gpu(m, c.offset),
                 v_d = to_gpu(v, c.offset);
    const bool with_copy = c.copy != DType::f32;
    const Tensor copy = host_tensor(c.copy, Shape{n});
    const Tensor copy_d = gpu_tensor(c.copy, Shape{n});
    if (with_copy) poison(copy_d);

    if (c.copy == DType::bf16) {
      adamw_update(p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n, hp, c.step, grad_scale, c.decay,
                   static_cast<bf16*>(copy.data));
    } else if (c.copy == DType::f16) {
      adamw_update(p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n, hp, c.step, grad_scale, c.decay,
                   static_cast<f16*>(copy.data));
    } else {
      adamw_update(p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n, hp, c.step, grad_scale, c.decay);
    }
    adamw_update_cuda(static_cast<float*>(p_d.data), static_cast<const float*>(g_d.data),
                      static_cast<float*>(m_d.data), static_cast<float*>(v_d.data), n, hp, c.step, grad_scale,
                      c.decay, with_copy ? copy_d.data : nullptr, c.copy, gpu->stream());

    const std::string what = "beta1 " + std::to_string(c.beta1) + " decay " + std::to_string(c.decay) + " step " +
                             std::to_string(c.step) + " copy " + dtype_name(c.copy) + " offset " +
                             std::to_string(c.offset);
    for (const auto& [host_t, dev_t, name] : {std::make_tuple(p, p_d, "param"), std::make_tuple(m, m_d, "m"),
                                              std::make_tuple(v, v_d, "v")}) {
      std::vector<float> back(static_cast<size_t>(n));
      gpu->copy_to_host(back.data(), dev_t.data, dev_t.bytes());
      EXPECT_EQ(bit_mismatches(back.data(), host_t.data, n, 4), 0) << name << ", " << what;
    }
    if (with_copy) {
      std::vector<char> back(copy_d.bytes());
      gpu->copy_to_host(back.data(), copy_d.data, copy_d.bytes());
      EXPECT_EQ(bit_mismatches(back.data(), copy.data, n, 2), 0) << "working copy, " << what;
    }
  }
}

// A shard of 70 decay ranges (three launches of up to 32), with ends that
// split float4 accesses and ranges of one element, against the CPU's
// adamw_update_ranges, bit for bit, with no working copy, a bf16 one and an
// f16 one written in the same pass; aligned and one float off alignment.
// Ranges that do not tile the shard are refused.
TEST_F(CudaAdamW, RangesInOneLaunchMatchCpuBitForBit) {
  std::vector<DecayRange> ranges;
  int64_t at = 0;
  for (int r = 0; r < 70; ++r) {
    const int64_t len = r % 7 == 3 ? 1 : 1 + (r * 7919) % 4099;
    ranges.push_back({at, at + len, r % 3 != 0});
    at += len;
  }
  const int64_t n = at;
  AdamWParams hp;
  hp.lr = 1e-3;
  hp.weight_decay = 0.1;
  for (const auto& [offset, copy_t] : {std::make_pair(int64_t{0}, DType::f32), std::make_pair(int64_t{1}, DType::f32),
                                       std::make_pair(int64_t{0}, DType::bf16), std::make_pair(int64_t{1}, DType::bf16),
                                       std::make_pair(int64_t{0}, DType::f16)}) {
    const std::string what = "offset " + std::to_string(offset) + " copy " + dtype_name(copy_t);
    const Tensor p = host_random(DType::f32, Shape{n}), g = host_random(DType::f32, Shape{n}, 4.0);
    const Tensor m = host_random(DType::f32, Shape{n}, 0.1), v = host_random(DType::f32, Shape{n}, 0.01);
    float* vh = v.as<float>();
    for (int64_t i = 0; i < n; ++i) vh[i] = std::fabs(vh[i]);
    const Tensor p_d = to_gpu(p, offset), g_d = to_gpu(g, offset), m_d = to_gpu(m, offset), v_d = to_gpu(v, offset);
    const bool with_copy = copy_t != DType::f32;  // f32: no working copy
    const Tensor copy = host_tensor(copy_t, Shape{n});
    const Tensor copy_d = gpu_tensor(copy_t, Shape{n});
    if (with_copy) poison(copy_d);
    if (copy_t == DType::bf16) {
      adamw_update_ranges(p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n, ranges, hp, 5, 0.5f,
                          static_cast<bf16*>(copy.data));
    } else if (copy_t == DType::f16) {
      adamw_update_ranges(p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n, ranges, hp, 5, 0.5f,
                          static_cast<f16*>(copy.data));
    } else {
      adamw_update_ranges(p.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n, ranges, hp, 5, 0.5f);
    }
    // At offset 1 the scale comes from a verdict in device memory ([Note:
    // verdict on the device]), the argument being a wrong one it replaces.
    const Tensor verdict_d = gpu_tensor(DType::f64, Shape{kVerdictLength});
    const double verdict[kVerdictLength] = {4.0, 0.0, 0.5, 2.0};
    gpu->copy_from_host(verdict_d.data, verdict, sizeof verdict);
    adamw_update_ranges_cuda(static_cast<float*>(p_d.data), static_cast<const float*>(g_d.data),
                             static_cast<float*>(m_d.data), static_cast<float*>(v_d.data), n, ranges, hp, 5,
                             offset == 1 ? 3.0f : 0.5f, with_copy ? copy_d.data : nullptr, copy_t,
                             offset == 1 ? static_cast<const double*>(verdict_d.data) : nullptr, gpu->stream());
    for (const auto& [host_t, dev_t, name] : {std::make_tuple(p, p_d, "param"), std::make_tuple(m, m_d, "m"),
                                              std::make_tuple(v, v_d, "v")}) {
      std::vector<float> back(static_cast<size_t>(n));
      gpu->copy_to_host(back.data(), dev_t.data, dev_t.bytes());
      EXPECT_EQ(bit_mismatches(back.data(), host_t.data, n, 4), 0) << name << ", " << what;
    }
    if (with_copy) {
      std::vector<char> back(copy_d.bytes());
      gpu->copy_to_host(back.data(), copy_d.data, copy_d.bytes());
      EXPECT_EQ(bit_mismatches(back.data(), copy.data, n, 2), 0) << "working copy, " << what;
    }
  }
  const Tensor x = gpu_tensor(DType::f32, Shape{n});
  float* xp = static_cast<float*>(x.data);
  std::vector<DecayRange> gap = ranges;
  gap[5].begin += 1;
  EXPECT_THROW(
      adamw_update_ranges_cuda(xp, xp, xp, xp, n, gap, hp, 1, 1.0f, nullptr, DType::f32, nullptr, gpu->stream()),
      Error);
  EXPECT_THROW(adamw_update_ranges_cuda(xp, xp, xp, xp, n + 1, ranges, hp, 1, 1.0f, nullptr, DType::f32, nullptr,
                                        gpu->stream()),
               Error);
}

// [Note: verdict on the device]: a verdict that says skip leaves the master,
// the moments and the working copy as they were.
TEST_F(CudaAdamW, VerdictThatSkipsChangesNothing) {
  const int64_t n = 1000;
  const std::vector<DecayRange> ranges = {{0, 600, true}, {600, n, false}};
  AdamWParams hp;
  const Tensor p = host_random(DType::f32, Shape{n}), g = host_random(DType::f32, Shape{n});
  const Tensor p_d = to_gpu(p), g_d = to_gpu(g), m_d = to_gpu(p), v_d = to_gpu(p),
               copy_d = gpu_tensor(DType::bf16, Shape{n});
  gpu_k->zero(copy_d);
  const Tensor verdict_d = gpu_tensor(DType::f64, Shape{kVerdictLength});
  const double verdict[kVerdictLength] = {std::nan(""), 1.0, 1.0, std::nan("")};
  gpu->copy_from_host(verdict_d.data, verdict, sizeof verdict);
  adamw_update_ranges_cuda(static_cast<float*>(p_d.data), static_cast<const float*>(g_d.data),
                           static_cast<float*>(m_d.data), static_cast<float*>(v_d.data), n, ranges, hp, 1, 1.0f,
                           copy_d.data, DType::bf16, static_cast<const double*>(verdict_d.data), gpu->stream());
  for (const Tensor& t : {p_d, m_d, v_d}) {
    std::vector<float> back(static_cast<size_t>(n));
    gpu->copy_to_host(back.data(), t.data, t.bytes());
    EXPECT_EQ(bit_mismatches(back.data(), p.data, n, 4), 0);
  }
  std::vector<uint16_t> copy(static_cast<size_t>(n), 1);
  gpu->copy_to_host(copy.data(), copy_d.data, copy_d.bytes());
  EXPECT_EQ(std::count(copy.begin(), copy.end(), uint16_t{0}), n);
}

// The verdict's kernels give the host's bits: the coefficient with and
// without clipping, a norm that is not finite, a loss that is not.
TEST_F(CudaAdamW, VerdictKernelsMatchTheHost) {
  const Tensor v_d = gpu_tensor(DType::f64, Shape{kVerdictLength});
  const Tensor loss_d = gpu_tensor(DType::f64, Shape{1});
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    double sum_sq, loss, clip, loss_scale;
  };
  for (const Case c : {Case{0.37, 2.5, 1.0, 1.0}, Case{123.456789, 2.5, 1.0, 1.0}, Case{123.456789, 2.5, 0.0, 1.0},
                       Case{9.75e6, 3.0, 0.5, 1024.0}, Case{inf, 2.0, 1.0, 1.0}, Case{1.0, std::nan(""), 1.0, 1.0},
                       Case{std::nan(""), 1.0, 1.0, 1.0}}) {
    double host[kVerdictLength] = {c.sum_sq, -1.0, -1.0, -1.0};
    gpu->copy_from_host(v_d.data, host, sizeof host);
    gpu->copy_from_host(loss_d.data, &c.loss, sizeof c.loss);
    auto* vd = static_cast<double*>(v_d.data);
    step_verdict_flag_cuda(vd, static_cast<const double*>(loss_d.data), gpu->stream());
    step_verdict_finish_cuda(vd, c.clip, c.loss_scale, gpu->stream());
    double back[kVerdictLength];
    gpu->copy_to_host(back, v_d.data, sizeof back);
    host[kVerdictSkip] = std::isfinite(c.sum_sq) && std::isfinite(c.loss) ? 0.0 : 1.0;
    finish_step_verdict(host, c.clip, c.loss_scale);
    EXPECT_EQ(bit_mismatches(back, host, kVerdictLength, 8), 0) << "sum of squares " << c.sum_sq << ", loss " << c.loss;
    // finish_step_verdict is GradientFinalizer's host arithmetic.
    const double norm = std::sqrt(c.sum_sq) / c.loss_scale;
    if (std::isfinite(norm)) {
      EXPECT_EQ(static_cast<float>(back[kVerdictGradScale]),
                static_cast<float>(clip_coefficient(norm, c.clip) / c.loss_scale));
    }
  }
}

TEST_F(CudaAdamW, FloatWorkingCopyIsTheParameters) {
  const int64_t n = 77;
  AdamWParams hp;
  const Tensor p = host_random(DType::f32, Shape{n}), g = host_random(DType::f32, Shape{n});
  const Tensor p_d = to_gpu(p), g_d = to_gpu(g), m_d = gpu_tensor(DType::f32, Shape{n}),
               v_d = gpu_tensor(DType::f32, Shape{n}), copy_d = gpu_tensor(DType::f32, Shape{n});
  gpu_k->zero(m_d);
  gpu_k->zero(v_d);
  poison(copy_d);
  adamw_update_cuda(static_cast<float*>(p_d.data), static_cast<const float*>(g_d.data),
                    static_cast<float*>(m_d.data), static_cast<float*>(v_d.data), n, hp, 1, 1.0f, true, copy_d.data,
                    DType::f32, gpu->stream());
  EXPECT_EQ(max_abs_diff(values(copy_d), values(p_d)), 0.0);
  EXPECT_THROW(adamw_update_cuda(static_cast<float*>(p_d.data), static_cast<const float*>(g_d.data),
                                 static_cast<float*>(m_d.data), static_cast<float*>(v_d.data), n, hp, 0, 1.0f, true,
                                 nullptr, DType::f32, gpu->stream()),
               Error);
}

}  // namespace
}  // namespace zt::test
