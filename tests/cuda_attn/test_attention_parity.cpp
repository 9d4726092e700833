// Parity of the CUDA attention (modules/cuda/attention.cuh) with CpuKernels:
// fresh random inputs each run (seed printed), outputs poisoned with NaN
// before each call so that an element left unwritten fails, several shapes
// (T not a multiple of the 64-row tiles, head sizes 16..128 including padded
// and unaligned ones, B * n_head above the H200's 132 SMs), in f32, bf16 and
// f16 storage. The backward gets the CPU's forward outputs, so each
// direction is judged on its own, and must be bitwise reproducible.
//
// Bounds on ||gpu - cpu|| / ||cpu||, per tensor and per part of dqkv:
//   f32   1e-5: both sides compute in fp32 and differ only in summation order
//         and exp implementation (a few ulp; observed ~1e-7..1e-6).
//   bf16  2e-2: unit roundoff u = 2^-8. The GPU rounds P (forward) and dO,
//         P^T, dS^T (backward) to bf16 before the tensor-core products, each
//         a relative error <= u/2 per element with random sign, and the
//         output is rounded once more; a few u/2 in the norm (~5e-3)
//         leaves a 4x margin.
//   f16   5e-3: the same with u = 2^-11.
//   lse   1e-5 (f32), 1e-4 (16-bit): fp32 sums of exact products on both sides.
// Seen on an H200: f32 <= 2e-6, bf16 <= 3.5e-3, f16 <= 5e-4, lse <= 2e-7.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "modules/cpu_kernels.hpp"
#include "modules/cuda/attention.cuh"
#include "cuda_test_util.hpp"

namespace zt {
namespace {

using test::TestTensor;

struct AttnCase {
  int B, T, NH, hs;
};

double out_tol(DType t) { return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 2e-2 : 5e-3; }
double lse_tol(DType t) { return t == DType::f32 ? 1e-5 : 1e-4; }

class AttentionParity : public ::testing::TestWithParam<std::tuple<DType, AttnCase>> {};

TEST_P(AttentionParity, ForwardAndBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const DType st = std::get<0>(GetParam());
  const AttnCase c = std::get<1>(GetParam());
  const int64_t C = static_cast<int64_t>(c.NH) * c.hs, n_qkv = int64_t{c.B} * c.T * 3 * C,
                n_out = int64_t{c.B} * c.T * C;
  std::mt19937_64 rng(test::test_seed() ^ (uint64_t(c.B) << 48 | uint64_t(c.T) << 24 | uint64_t(c.NH) << 8 | c.hs) ^
                      static_cast<uint64_t>(st));
  // Scores ~ N(0, 1.5^2): softmaxes neither flat nor one-hot.
  const std::vector<float> qkv_h = test::round_to(test::normal_vec(rng, n_qkv, 1.225f), st);
  const std::vector<float> dout_h = test::normal_vec(rng, n_out, 1.0f);

  // CPU reference.
  CpuDevice cpu_dev;
  Arena cpu_ws(cpu_dev, MemTag::workspace);
  CpuKernels cpu;
  TestTensor qkv_c(cpu_dev, st, Shape{c.B, c.T, 3 * C}), out_c(cpu_dev, st, Shape{c.B, c.T, C}),
      lse_c(cpu_dev, DType::f32, Shape{c.B, c.NH, c.T}), dout_c(cpu_dev, DType::f32, Shape{c.B, c.T, C}),
      dqkv_c(cpu_dev, DType::f32, Shape{c.B, c.T, 3 * C});
  qkv_c.fill(cpu_dev, qkv_h);
  dout_c.fill(cpu_dev, dout_h);
  cpu.attention_fwd(cpu_ws, out_c.t, lse_c.t, qkv_c.t, c.NH, Tensor());
  cpu.attention_bwd(cpu_ws, dqkv_c.t, dout_c.t, qkv_c.t, out_c.t, lse_c.t, c.NH, Tensor());
  const std::vector<float> out_ref = out_c.read(cpu_dev), lse_ref = lse_c.read(cpu_dev),
                           dqkv_ref = dqkv_c.read(cpu_dev);

  // GPU.
  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace, size_t{1} << 20);
  TestTensor qkv(dev, st, Shape{c.B, c.T, 3 * C}), out(dev, st, Shape{c.B, c.T, C}),
      lse(dev, DType::f32, Shape{c.B, c.NH, c.T}), dout(dev, DType::f32, Shape{c.B, c.T, C}),
      dqkv(dev, DType::f32, Shape{c.B, c.T, 3 * C});
  qkv.fill(dev, qkv_h);
  dout.fill(dev, dout_h);
  cudaStream_t stream = nullptr;
  ZT_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  out.poison();
  lse.poison();
  ZT_TEST_CUDA(cudaDeviceSynchronize());
  attention_fwd_cuda(out.t, lse.t, qkv.t, c.NH, stream);
  ZT_TEST_CUDA(cudaStreamSynchronize(stream));
  const std::vector<float> out_g = out.read(dev), lse_g = lse.read(dev);
  EXPECT_EQ(test::count_nonfinite(out_g), 0) << "out has unwritten or non-finite elements";
  EXPECT_EQ(test::count_nonfinite(lse_g), 0) << "lse has unwritten or non-finite elements";
  const double e_out = test::rel_err(out_g, out_ref), e_lse = test::rel_err(lse_g, lse_ref);
  EXPECT_LE(e_out, out_tol(st));
  EXPECT_LE(e_lse, lse_tol(st));

  // Backward on the CPU's forward results, twice: same bits both times.
  out.fill(dev, out_ref);
  lse.fill(dev, lse_ref);
  std::vector<float> dqkv_g[2];
  for (auto& r : dqkv_g) {
    dqkv.poison();
    ZT_TEST_CUDA(cudaDeviceSynchronize());
    attention_bwd_cuda(dqkv.t, dout.t, qkv.t, out.t, lse.t, c.NH, ws, stream);
    ZT_TEST_CUDA(cudaStreamSynchronize(stream));
    r = dqkv.read(dev);
  }
  EXPECT_EQ(test::count_nonfinite(dqkv_g[0]), 0) << "dqkv has unwritten or non-finite elements";
  EXPECT_TRUE(dqkv_g[0] == dqkv_g[1]) << "backward is not bitwise reproducible";
  double e_part[3];
  for (int p = 0; p < 3; ++p) {
    e_part[p] = test::rel_err_if(dqkv_g[0], dqkv_ref, [&](size_t i) { return static_cast<int64_t>(i) % (3 * C) / C == p; });
    EXPECT_LE(e_part[p], out_tol(st)) << "d" << "qkv"[p];
  }
  std::printf("[ errors   ] %s B=%d T=%d NH=%d hs=%d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
              dtype_name(st), c.B, c.T, c.NH, c.hs, e_out, e_lse, e_part[0], e_part[1], e_part[2]);
  ZT_TEST_CUDA(cudaStreamDestroy(stream));
}

const AttnCase kCases[] = {
    {2, 64, 2, 64},    // one tile exactly
    {1, 100, 3, 32},   // T not a multiple of the tile
    {2, 129, 2, 128},  // hs 128, one row past two tiles
    {3, 70, 48, 16},   // B * NH = 144 > 132 SMs, hs 16
    {1, 300, 1, 40},   // hs padded 40 -> 64, 16-byte path
    {1, 33, 2, 20},    // hs % 8 != 0: element loads, padded 20 -> 32
    {2, 1, 2, 64},     // a single token
    {1, 200, 4, 96},   // hs padded 96 -> 128
    {2, 257, 70, 32},  // B * NH = 140, several tiles
};

std::string case_name(const ::testing::TestParamInfo<std::tuple<DType, AttnCase>>& info) {
  const AttnCase c = std::get<1>(info.param);
  return std::string(dtype_name(std::get<0>(info.param))) + "_B" + std::to_string(c.B) + "_T" +
         std::to_string(c.T) + "_H" + std::to_string(c.NH) + "_D" + std::to_string(c.hs);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionParity,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::ValuesIn(kCases)),
                         case_name);

TEST(AttentionChecks, RejectsBadArguments) {
  ZT_SKIP_WITHOUT_GPU();
  test::PlainCudaDevice dev;
  TestTensor qkv(dev, DType::bf16, Shape{1, 8, 3 * 64}), out(dev, DType::f32, Shape{1, 8, 64}),
      lse(dev, DType::f32, Shape{1, 2, 8});
  EXPECT_THROW(attention_fwd_cuda(out.t, lse.t, qkv.t, 2, nullptr), Error);  // out dtype != qkv dtype
  TestTensor big(dev, DType::bf16, Shape{1, 8, 3 * 256}), out2(dev, DType::bf16, Shape{1, 8, 256}),
      lse2(dev, DType::f32, Shape{1, 1, 8});
  EXPECT_THROW(attention_fwd_cuda(out2.t, lse2.t, big.t, 1, nullptr), Error);  // hs 256 > 128
}

}  // namespace
}  // namespace zt
