// Parity of CudaKernels with CpuKernels: GELU, add, cast, scale, zero, and
// the reductions for the optimizer and the loss (sum of squares, sum,
// overflow check).
#include <cmath>
#include <limits>

#include "cuda_test_support.hpp"

namespace zt::test {
namespace {

const DType kStorage[] = {DType::f32, DType::bf16, DType::f16};
const DType kAll[] = {DType::f32, DType::bf16, DType::f16, DType::f64};
// A multiple of the vector width, and an odd count with a scalar tail.
const int64_t kCounts[] = {4096, 1001};

using CudaElementwise = GpuFixture;

TEST_F(CudaElementwise, GeluMatchesTheCpu) {
  for (DType t : kStorage) {
    for (int64_t n : kCounts) {
      for (int64_t offset : {0, 1}) {
        const std::string what = std::string(dtype_name(t)) + " n " + std::to_string(n) + " offset " +
                                 std::to_string(offset);
        const Tensor x = host_random(t, Shape{n}, 6.0), out = host_tensor(t, Shape{n});
        const Tensor x_d = to_gpu(x, offset), out_d = gpu_tensor(t, Shape{n}, offset);
        poison(out_d);
        cpu_k->gelu_fwd(out, x);
        gpu_k->gelu_fwd(out_d, x_d);
        // [Note: GELU parity]: same operations, no contraction on either
        // side, in f32. The 16-bit forward: within one unit of its dtype of
        // GELU computed in double (not of the CPU's, whose 1 - 2 / (1 +
        // e^{2u}) loses all relative precision below x = -4, where the
        // values are under 1e-6).
        if (t == DType::f32) {
          EXPECT_EQ(max_abs_diff(values(out_d), values(out)), 0.0) << what;
        } else {
          const std::vector<double> got = values(out_d), xs = values(x);
          const double unit = t == DType::bf16 ? 0x1p-7 : 0x1p-10, tiny = t == DType::bf16 ? 0.0 : 0x1p-24;
          int64_t bad = 0;
          for (size_t i = 0; i < got.size(); ++i) {
            const double v = xs[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
            const double want = 0.5 * v * (1.0 + std::tanh(u));
            bad += !(std::fabs(got[i] - want) <= unit * std::fabs(want) + tiny);
          }
          EXPECT_EQ(bad, 0) << what << ": elements more than one unit from GELU";
        }

        for (bool alias : {false, true}) {
          const Tensor dout = host_random(DType::f32, Shape{n});
          const Tensor din = alias ? dout : host_tensor(DType::f32, Shape{n});
          const Tensor dout_d = to_gpu(dout, offset);
          const Tensor din_d = alias ? dout_d : gpu_tensor(DType::f32, Shape{n}, offset);
          if (!alias) poison(din_d);
          cpu_k->gelu_bwd(din, dout, x);
          gpu_k->gelu_bwd(din_d, dout_d, x_d);
          EXPECT_EQ(max_abs_diff(values(din_d), values(din)), 0.0) << what << " alias " << alias;
        }
      }
    }
  }
}

TEST_F(CudaElementwise, AddIsExact) {
  for (DType in : kStorage) {
    for (DType out_t : {in, DType::f32}) {
      for (int64_t n : kCounts) {
        for (bool alias : {false, true}) {  // out aliasing a, as a residual add in place
          if (alias && out_t != in) continue;
          const Tensor a = host_random(in, Shape{n}), b = host_random(in, Shape{n});
          const Tensor out = alias ? a : host_tensor(out_t, Shape{n});
          const Tensor a_d = to_gpu(a), b_d = to_gpu(b);
          const Tensor out_d = alias ? a_d : gpu_tensor(out_t, Shape{n});
          if (!alias) poison(out_d);
          cpu_k->add(out, a, b);
          gpu_k->add(out_d, a_d, b_d);
          EXPECT_EQ(max_abs_diff(values(out_d), values(out)), 0.0)
              << dtype_name(in) << " -> " << dtype_name(out_t) << " n " << n << " alias " << alias;
        }
      }
    }
  }
}

TEST_F(CudaElementwise, CastBetweenAllFloatTypesIsExact) {
  for (DType src_t : kAll) {
    for (DType dst_t : kAll) {
      for (int64_t n : kCounts) {
        const Tensor src = host_random(src_t, Shape{n}, 100.0), dst = host_tensor(dst_t, Shape{n});
        const Tensor dst_d = gpu_tensor(dst_t, Shape{n});
        poison(dst_d);
        cpu_k->cast(dst, src);
        gpu_k->cast(dst_d, to_gpu(src));
        EXPECT_EQ(max_abs_diff(values(dst_d), values(dst)), 0.0)
            << dtype_name(src_t) << " -> " << dtype_name(dst_t) << " n " << n;
      }
    }
  }
}

TEST_F(CudaElementwise, ScaleAndZero) {
  for (DType t : kAll) {
    for (int64_t n : kCounts) {
      const Tensor x = host_random(t, Shape{n});
      const Tensor x_d = to_gpu(x);
      cpu_k->scale(x, 0.37);
      gpu_k->scale(x_d, 0.37);
      EXPECT_EQ(max_abs_diff(values(x_d), values(x)), 0.0) << dtype_name(t) << " n " << n;
      gpu_k->zero(x_d);
      for (double v : values(x_d)) ASSERT_EQ(v, 0.0);
    }
  }
}

TEST_F(CudaElementwise, SumSquaresInF64IsDeterministic) {
  for (DType t : kAll) {
    for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{1000003}}) {
      const Tensor x = host_random(t, Shape{n});
      const Tensor acc = host_random(DType::f64, Shape{1});
      const Tensor acc_d = to_gpu(acc), acc2_d = to_gpu(acc), x_d = to_gpu(x);
      cpu_k->sum_squares(x, acc);
      gpu_k->sum_squares(x_d, acc_d);
      gpu_k->sum_squares(x_d, acc2_d);
      const std::vector<double> g = values(acc_d);
      // Squares of f32 values are exact in f64; only the order of the sums
      // differs: ~n * 2^-53 relative.
      EXPECT_LT(rel_error(g, values(acc)), 1e-12) << dtype_name(t) << " n " << n;
      EXPECT_EQ(g[0], values(acc2_d)[0]) << "sum_squares must be deterministic";
    }
  }
}

TEST_F(CudaElementwise, SumIntoInF64MatchesTheCpu) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t n : {int64_t{1}, int64_t{1001}, int64_t{1000003}}) {
      for (int64_t offset : {0, 1}) {  // the vector path and a misaligned x
        // Positive, as losses are, so the sum does not cancel.
        const Tensor x = host_random(t, Shape{n, 1}, 1.0, offset);
        std::vector<double> v = values(x);
        for (double& e : v) e = std::fabs(e) + 0.5;
        set_values(x, v);
        const Tensor acc = host_tensor(DType::f64, Shape{1});
        set_values(acc, {12.25});
        const Tensor acc_d = to_gpu(acc), acc2_d = to_gpu(acc), x_d = to_gpu(x, offset);
        cpu_k->sum_into(x, acc);
        gpu_k->sum_into(x_d, acc_d);
        gpu_k->sum_into(x_d, acc2_d);
        const std::vector<double> g = values(acc_d);
        // Every element is exact in f64; only the order of the sums differs.
        EXPECT_LT(rel_error(g, values(acc)), 1e-12) << dtype_name(t) << " n " << n << " offset " << offset;
        EXPECT_EQ(g[0], values(acc2_d)[0]) << "sum_into must be deterministic";
      }
    }
  }
  const Tensor acc_d = to_gpu(host_random(DType::f64, Shape{1}));
  EXPECT_THROW(gpu_k->sum_into(to_gpu(host_random(DType::bf16, Shape{8})), acc_d), Error);
}

TEST_F(CudaElementwise, CheckOverflowFindsInfAndNan) {
  const double bad[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                        std::nan("")};
  for (DType t : kAll) {
    for (int64_t n : kCounts) {
      const Tensor x = host_random(t, Shape{n});
      const Tensor flag = host_tensor(DType::i32, Shape{1});
      flag.as<int32_t>()[0] = 0;
      const Tensor flag_d = to_gpu(flag);
      gpu_k->check_overflow(to_gpu(x), flag_d);
      EXPECT_EQ(values(flag_d)[0], 0.0) << dtype_name(t) << ": finite values raised the flag";
      for (double b : bad) {
        for (int64_t pos : {int64_t{0}, n / 2 + 3, n - 1}) {  // vector body and scalar tail
          std::vector<double> v = values(x);
          v[static_cast<size_t>(pos)] = b;
          const Tensor xb = host_tensor(t, Shape{n});
          set_values(xb, v);
          const Tensor f_d = to_gpu(flag);
          gpu_k->check_overflow(to_gpu(xb), f_d);
          EXPECT_EQ(values(f_d)[0], 1.0) << dtype_name(t) << " value " << b << " at " << pos;
        }
      }
      // A raised flag stays raised.
      flag.as<int32_t>()[0] = 1;
      const Tensor f1 = to_gpu(flag);
      gpu_k->check_overflow(to_gpu(x), f1);
      EXPECT_EQ(values(f1)[0], 1.0);
    }
  }
}

}  // namespace
}  // namespace zt::test
