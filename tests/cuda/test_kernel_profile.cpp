// ProfiledKernels (`ztrain --profile`, [Note: kernel profile]): wrapping the
// CUDA kernels changes no result, and the report charges each call to its
// class with the count and rate of what ran.
#include "cuda_test_support.hpp"
#include "modules/cuda/kernel_profile.hpp"

namespace zt::test {
namespace {

using KernelProfile = GpuFixture;

TEST_F(KernelProfile, SameResultsAndEveryCallCharged) {
  ProfiledKernels prof(std::make_unique<CudaKernels>(*gpu), gpu->stream());
  const int64_t M = 256, N = 128, K = 64;
  const Tensor a = to_gpu(host_random(DType::bf16, Shape{M, K})), b = to_gpu(host_random(DType::bf16, Shape{N, K}));
  const Tensor x = to_gpu(host_random(DType::bf16, Shape{M, N})), w = to_gpu(host_random(DType::bf16, Shape{N}));
  const Tensor out_p = gpu_tensor(DType::f32, Shape{M, N}), out_k = gpu_tensor(DType::f32, Shape{M, N});
  const Tensor y_p = gpu_tensor(DType::bf16, Shape{M, N}), y_k = gpu_tensor(DType::bf16, Shape{M, N});
  const Tensor r_p = gpu_tensor(DType::f32, Shape{M}), r_k = gpu_tensor(DType::f32, Shape{M});
  for (int i = 0; i < 3; ++i) prof.matmul(*gpu_ws, out_p, a, false, b, true, false, Tensor());
  gpu_k->matmul(*gpu_ws, out_k, a, false, b, true, false);
  prof.rmsnorm_fwd(y_p, r_p, x, w, 1e-5, Tensor());
  gpu_k->rmsnorm_fwd(y_k, r_k, x, w, 1e-5);
  EXPECT_EQ(max_abs_diff(values(out_p), values(out_k)), 0.0);
  EXPECT_EQ(max_abs_diff(values(y_p), values(y_k)), 0.0);

  const std::string rep = prof.report(2, 1.0);  // 2 steps, 500 ms each
  std::printf("%s", rep.c_str());
  const auto line = [&](const std::string& key) {
    const size_t at = rep.find(key);
    return at == std::string::npos ? std::string() : rep.substr(at, rep.find('\n', at) - at);
  };
  const std::string mm = line("matmul 256x128x64 bf16.bf16^T->f32");
  ASSERT_FALSE(mm.empty()) << rep;
  EXPECT_NE(mm.find(" 1.5 "), std::string::npos) << "3 calls over 2 steps: " << mm;
  EXPECT_NE(mm.find("TFLOP/s"), std::string::npos) << mm;
  const std::string rn = line("rmsnorm_fwd");
  ASSERT_FALSE(rn.empty()) << rep;
  EXPECT_NE(rn.find(" 0.5 "), std::string::npos) << "1 call over 2 steps: " << rn;
  EXPECT_NE(rn.find("GB/s"), std::string::npos) << rn;
  EXPECT_NE(rep.find("500.00 ms wall per step"), std::string::npos) << rep;
  EXPECT_NE(rep.find("outside Kernels"), std::string::npos) << rep;
}

}  // namespace
}  // namespace zt::test
