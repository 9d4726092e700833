// Parity of CudaKernels with CpuKernels on the Llama operations that have GPU
// kernels (RMSNorm, rotary embeddings, SwiGLU), in f32, bf16 and f16 storage;
// and the refusal of the ones that do not yet (grouped-query attention).
// Tolerances, not bits: the GPU sums a row in another order (warp butterfly)
// and SwiGLU uses expf where the CPU uses its polynomial exp.
#include "cuda_test_support.hpp"
#include "modules/rope.hpp"

namespace zt::test {
namespace {

const DType kStorage[] = {DType::f32, DType::bf16, DType::f16};

using CudaLlama = GpuFixture;

TEST_F(CudaLlama, RmsNormMatchesCpu) {
  for (DType t : kStorage) {
    for (int64_t C : {64, 100, 1000}) {
      const int64_t N = 37;
      const std::string what = std::string(dtype_name(t)) + " C " + std::to_string(C);
      const Tensor x = host_random(t, Shape{N, C}, 2.0), w = host_random(t, Shape{C});
      const Tensor out = host_tensor(t, Shape{N, C}), rstd = host_tensor(DType::f32, Shape{N});
      const Tensor x_d = to_gpu(x), w_d = to_gpu(w);
      const Tensor out_d = gpu_tensor(t, Shape{N, C}), rstd_d = gpu_tensor(DType::f32, Shape{N});
      poison(out_d);
      poison(rstd_d);
      cpu_k->rmsnorm_fwd(out, rstd, x, w, 1e-5);
      gpu_k->rmsnorm_fwd(out_d, rstd_d, x_d, w_d, 1e-5);
      EXPECT_LT(rel_error(values(out_d), values(out)), tolerance(t)) << what;
      EXPECT_LT(rel_error(values(rstd_d), values(rstd)), 1e-5) << what;

      for (bool accumulate : {false, true}) {
        const Tensor dout = host_random(DType::f32, Shape{N, C});
        const Tensor dx = host_random(DType::f32, Shape{N, C}), dw = host_random(DType::f32, Shape{C});
        const Tensor dout_d = to_gpu(dout), dx_d = to_gpu(dx), dw_d = to_gpu(dw);
        cpu_k->rmsnorm_bwd(dx, accumulate, dw, dout, x, w, rstd);
        gpu_k->rmsnorm_bwd(dx_d, accumulate, dw_d, dout_d, x_d, w_d, rstd_d);
        EXPECT_LT(rel_error(values(dx_d), values(dx)), 1e-5) << what << " accumulate " << accumulate;
        EXPECT_LT(rel_error(values(dw_d), values(dw)), 1e-5) << what << " accumulate " << accumulate;
      }
    }
  }
}

TEST_F(CudaLlama, RopeMatchesCpuAndInverts) {
  RopeConfig rope;
  rope.head_dim = 64;
  rope.theta = 500000.0;
  rope.llama3 = true;
  rope.factor = 8;
  rope.low_freq_factor = 1;
  rope.high_freq_factor = 4;
  rope.original_max_position_embeddings = 64;
  const int64_t B = 2, T = 129, W = 3 * 64;
  for (DType t : kStorage) {
    const Tensor x = host_random(t, Shape{B, T, W}), x_d = to_gpu(x);
    cpu_k->rope_fwd(x, rope, Tensor());
    gpu_k->rope_fwd(x_d, rope, Tensor());
    EXPECT_LT(rel_error(values(x_d), values(x)), tolerance(t)) << dtype_name(t);
  }
  const Tensor g = host_random(DType::f32, Shape{B, T, W}), g_d = to_gpu(g);
  const std::vector<double> before = values(g);
  cpu_k->rope_bwd(g, rope, Tensor());
  gpu_k->rope_bwd(g_d, rope, Tensor());
  EXPECT_LT(rel_error(values(g_d), values(g)), 1e-6);
  gpu_k->rope_fwd(g_d, rope, Tensor());  // forward after the inverse: the identity
  EXPECT_LT(rel_error(values(g_d), before), 1e-6);
}

TEST_F(CudaLlama, SwigluMatchesCpu) {
  const int64_t n = 4099;
  for (DType t : kStorage) {
    const Tensor gate = host_random(t, Shape{n}, 6.0), up = host_random(t, Shape{n}, 2.0);
    const Tensor out = host_tensor(t, Shape{n});
    const Tensor gate_d = to_gpu(gate), up_d = to_gpu(up), out_d = gpu_tensor(t, Shape{n});
    poison(out_d);
    cpu_k->swiglu_fwd(out, gate, up);
    gpu_k->swiglu_fwd(out_d, gate_d, up_d);
    EXPECT_LT(rel_error(values(out_d), values(out)), tolerance(t)) << dtype_name(t);
    const Tensor dout = host_random(DType::f32, Shape{n}), dout_d = to_gpu(dout);
    const Tensor dup = host_tensor(DType::f32, Shape{n}), dup_d = gpu_tensor(DType::f32, Shape{n});
    poison(dup_d);
    cpu_k->swiglu_bwd(dout, dup, dout, gate, up);  // dgate in place of dout, as the block does
    gpu_k->swiglu_bwd(dout_d, dup_d, dout_d, gate_d, up_d);
    EXPECT_LT(rel_error(values(dout_d), values(dout)), 1e-5) << dtype_name(t);
    EXPECT_LT(rel_error(values(dup_d), values(dup)), 1e-5) << dtype_name(t);
  }
}

TEST_F(CudaLlama, GroupedQueryAttentionIsRefusedByName) {
  const Tensor q = gpu_tensor(DType::f32, Shape{1, 4, 8}), k = gpu_tensor(DType::f32, Shape{1, 4, 4});
  const Tensor out = gpu_tensor(DType::f32, Shape{1, 4, 8}), lse = gpu_tensor(DType::f32, Shape{1, 2, 4});
  try {
    gpu_k->gqa_attention_fwd(*gpu_ws, out, lse, q, k, k, 2, 1, Tensor());
    ADD_FAILURE() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.arch \"llama\" is not yet available on the CUDA backend"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace zt::test
