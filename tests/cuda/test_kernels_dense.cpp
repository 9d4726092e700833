// Parity of CudaKernels with CpuKernels: matrix products, bias gradients,
// LayerNorm and the embedding. Fresh random inputs on every run, GPU outputs
// poisoned with NaN before each call (every element must be written), and
// the error bounds of [Note: parity tolerances].
#include <cstdio>
#include <tuple>
#include <utility>

#include "cuda_test_support.hpp"
#include "modules/cuda/attention_cudnn.cuh"
#include "modules/cuda/layernorm.cuh"
#include "modules/cuda/lt_tune.cuh"

namespace zt::test {
namespace {

const DType kStorage[] = {DType::f32, DType::bf16, DType::f16};

struct CudaDense : GpuFixture {
  // Runs one matmul on both sides and returns the relative error.
  double matmul_case(int64_t M, int64_t N, int64_t K, DType ta_t, DType tb_t, DType out_t, bool ta, bool tb,
                     bool acc, bool bias, DType bias_t, int64_t offset) {
    const Tensor a = host_random(ta_t, ta ? Shape{K, M} : Shape{M, K});
    const Tensor b = host_random(tb_t, tb ? Shape{N, K} : Shape{K, N});
    const Tensor bh = bias ? host_random(bias_t, Shape{N}) : Tensor();
    const Tensor out = host_random(out_t, Shape{M, N});
    const Tensor a_d = to_gpu(a, offset), b_d = to_gpu(b, offset), out_d = to_gpu(out, offset);
    const Tensor bias_d = bias ? to_gpu(bh, offset) : Tensor();
    if (!acc) poison(out_d);
    cpu_k->matmul(*host_ws, out, a, ta, b, tb, acc, bh);
    gpu_k->matmul(*gpu_ws, out_d, a_d, ta, b_d, tb, acc, bias_d);
    return rel_error(values(out_d), values(out));
  }
  // A LayerNorm backward's inputs on the GPU: x (N, C) in xt, its weight, and
  // the mean and rstd of the CPU's forward.
  std::tuple<Tensor, Tensor, Tensor, Tensor> layernorm_inputs(DType xt, int64_t N, int64_t C) {
    const Tensor x = host_random(xt, Shape{N, C}, 3.0), w = host_random(xt, Shape{C}), b = host_random(xt, Shape{C});
    const Tensor y = host_tensor(xt, Shape{N, C}), mean = host_tensor(DType::f32, Shape{N}),
                 rstd = host_tensor(DType::f32, Shape{N});
    cpu_k->layernorm_fwd(y, mean, rstd, x, w, b);
    return {to_gpu(x), to_gpu(w), to_gpu(mean), to_gpu(rstd)};
  }
};

TEST_F(CudaDense, MatmulSameTypeAllTransposesAccumulateBias) {
  // Odd sizes (unaligned leading dimensions) and aligned ones.
  const int64_t sizes[2][3] = {{37, 45, 29}, {128, 192, 256}};
  for (DType t : kStorage) {
    for (const auto& s : sizes) {
      for (int mask = 0; mask < 16; ++mask) {
        const bool ta = mask & 1, tb = mask & 2, acc = mask & 4, bias = mask & 8;
        const double err = matmul_case(s[0], s[1], s[2], t, t, t, ta, tb, acc, bias, t, 0);
        EXPECT_LT(err, tolerance(t)) << dtype_name(t) << " " << s[0] << "x" << s[1] << "x" << s[2] << " ta " << ta
                                     << " tb " << tb << " acc " << acc << " bias " << bias;
      }
    }
  }
}

TEST_F(CudaDense, MatmulMixedTypesAsInTraining) {
  struct Case {
    DType a, b, out, bias;
    bool ta, tb, acc, bias_on;
    const char* what;
  };
  const Case cases[] = {
      {DType::f32, DType::bf16, DType::f32, DType::f32, false, false, false, false, "dx = dout W (bf16 W)"},
      {DType::f32, DType::bf16, DType::f32, DType::f32, true, false, true, false, "dW += dout^T x (bf16 x)"},
      {DType::bf16, DType::f32, DType::bf16, DType::f32, false, true, false, true, "y = x W^T + b (f32 params)"},
      {DType::bf16, DType::f32, DType::bf16, DType::f32, false, true, true, true, "res += x W^T + b (f32 params)"},
      {DType::bf16, DType::bf16, DType::f32, DType::f32, true, false, true, false, "f32 out from bf16"},
      {DType::f16, DType::f16, DType::f32, DType::f32, true, false, true, false, "f32 out from f16"},
      {DType::f32, DType::f16, DType::f32, DType::f32, false, false, false, false, "dx = dout W (f16 W)"},
      {DType::f32, DType::f32, DType::bf16, DType::f32, false, true, true, true, "f32 inputs, bf16 out"},
      {DType::bf16, DType::f16, DType::f16, DType::f16, false, false, false, true, "bf16 with f16"},
  };
  for (const Case& c : cases) {
    for (int64_t offset : {0, 1}) {
      const double err = matmul_case(96, 80, 72, c.a, c.b, c.out, c.ta, c.tb, c.acc, c.bias_on, c.bias, offset);
      EXPECT_LT(err, 1e-2) << c.what << " offset " << offset;
    }
  }
}

TEST_F(CudaDense, MatmulMisalignedPointersAndEmptyK) {
  for (DType t : kStorage) {
    // Pointers off by one element: other algorithms, and the bias fallback.
    for (int mask = 0; mask < 4; ++mask) {
      const double err = matmul_case(64, 48, 40, t, t, t, mask & 1, false, mask & 2, true, t, 1);
      EXPECT_LT(err, tolerance(t)) << dtype_name(t) << " misaligned, mask " << mask;
    }
    // K = 0: out = [out +] bias, or zeros. (a is stored (K, M): a matrix
    // (M, 0) would have no rows in the Tensor-as-matrix reading.)
    for (int mask = 0; mask < 4; ++mask) {
      const double err = matmul_case(5, 7, 0, t, t, t, true, false, mask & 1, mask & 2, t, 0);
      EXPECT_LT(err, tolerance(t)) << dtype_name(t) << " K = 0, mask " << mask;
    }
  }
}

TEST_F(CudaDense, BiasGradIsExactSumAndDeterministic) {
  for (int64_t R : {1, 1000, 4099}) {
    for (int64_t N : {77, 768}) {
      const Tensor dout = host_random(DType::f32, Shape{R, N});
      const Tensor db = host_random(DType::f32, Shape{N});
      const Tensor dout_d = to_gpu(dout), db_d = to_gpu(db), db2_d = to_gpu(db);
      cpu_k->bias_grad(db, dout);
      gpu_k->bias_grad(db_d, dout_d);
      gpu_k->bias_grad(db2_d, dout_d);
      const std::vector<double> g = values(db_d);
      EXPECT_LT(rel_error(g, values(db)), 1e-5) << R << "x" << N;
      EXPECT_EQ(max_abs_diff(g, values(db2_d)), 0.0) << "bias_grad must be deterministic";
    }
  }
}

// The fused backward passes (one read of a gradient for its bias, its
// 16-bit operand and, for the MLP, GELU's backward) give the bits of the
// separate calls on the same device; an f32 partner leaves the gradient as
// the operand.
TEST_F(CudaDense, FusedBiasGradAndOperandAreTheSeparateCallsBits) {
  for (DType partner : {DType::bf16, DType::f16, DType::f32}) {
    for (int64_t R : {1, 1000, 4099}) {
      for (int64_t N : {77, 768}) {
        const std::string what = std::string(dtype_name(partner)) + " " + std::to_string(R) + "x" + std::to_string(N);
        const Tensor dout = host_random(DType::f32, Shape{R, N}), db = host_random(DType::f32, Shape{N});
        const Tensor x = host_random(DType::bf16, Shape{R, N}, 6.0);
        const Tensor x_d = to_gpu(x);
        {  // bias_grad_and_operand
          const Tensor dout_d = to_gpu(dout), db_sep = to_gpu(db), db_fused = to_gpu(db);
          gpu_k->bias_grad(db_sep, dout_d);
          const Tensor op_sep = gpu_k->matmul_operand(*gpu_ws, dout_d, partner);
          const Tensor op_fused = gpu_k->bias_grad_and_operand(*gpu_ws, db_fused, dout_d, partner);
          EXPECT_EQ(max_abs_diff(values(db_fused), values(db_sep)), 0.0) << what;
          EXPECT_EQ(max_abs_diff(values(op_fused), values(op_sep)), 0.0) << what;
          EXPECT_EQ(op_fused.dtype, partner == DType::f32 ? DType::f32 : partner) << what;
          if (partner == DType::f32) {
            EXPECT_EQ(op_fused.data, dout_d.data) << what;
          }
          gpu_ws->reset();
        }
        {  // gelu_bwd_bias_grad_and_operand
          const Tensor sep_d = to_gpu(dout), fused_d = to_gpu(dout), db_sep = to_gpu(db), db_fused = to_gpu(db);
          gpu_k->gelu_bwd(sep_d, sep_d, x_d);
          gpu_k->bias_grad(db_sep, sep_d);
          const Tensor op_sep = gpu_k->matmul_operand(*gpu_ws, sep_d, partner);
          const Tensor op_fused = gpu_k->gelu_bwd_bias_grad_and_operand(*gpu_ws, db_fused, fused_d, x_d, partner);
          EXPECT_EQ(max_abs_diff(values(db_fused), values(db_sep)), 0.0) << "gelu " << what;
          EXPECT_EQ(max_abs_diff(values(op_fused), values(op_sep)), 0.0) << "gelu " << what;
          // And against the CPU reference: GELU bit for bit, the sums within rounding.
          const Tensor din = host_tensor(DType::f32, Shape{R, N}), db_cpu = host_tensor(DType::f32, Shape{N});
          std::memcpy(db_cpu.data, db.data, db.bytes());
          cpu_k->gelu_bwd(din, dout, x);
          cpu_k->bias_grad(db_cpu, din);
          EXPECT_LT(rel_error(values(db_fused), values(db_cpu)), 1e-5) << "gelu " << what;
          gpu_ws->reset();
        }
      }
    }
  }
}

// The MLP's first product with GELU in its epilogue ([Note: GELU in the
// epilogue]). First with a weight that picks one input column per output
// (bias 0), so the pre-activation is exact and the GELU output must be
// within one unit of its dtype of tanh-form GELU computed in double, plus
// |x| 2^-17: cuBLASLt computes 1 + tanh(u), which loses relative precision
// as tanh(u) nears -1 (at x = -3.5 its GELU was 3.5e-6 from the exact
// -6.16e-4, 5.7 units of f16), whereas an erf-form GELU is 4.7e-4 off at
// x = -2.7, 23 times the allowance there; an f16 output under 2^-14 may be
// flushed to zero. Then random operands against the
// CPU's product and GELU: the pre-activations are one rounding of nearly
// equal sums (1e-3 / 2.5e-4 in norm, as below), the outputs GELU of the
// fp32 sum on the GPU and of the rounded pre-activation on the CPU, two
// roundings apart: tolerance(). An F that is not a multiple of 8 takes the
// product, then GELU's pass.
TEST_F(CudaDense, GeluForwardInTheEpilogue) {
  for (DType t : {DType::bf16, DType::f16}) {
    const double unit = t == DType::bf16 ? 0x1p-7 : 0x1p-10, tiny = t == DType::bf16 ? 0.0 : 0x1p-24;
    for (bool trans_w : {false, true}) {
      {  // exact pre-activations
        const int64_t R = 512, K = 64, F = 1024;
        const Tensor a = host_random(t, Shape{R, K}, 6.0), w = host_tensor(t, trans_w ? Shape{F, K} : Shape{K, F});
        std::vector<double> wv(static_cast<size_t>(K * F), 0.0);
        for (int64_t f = 0; f < F; ++f) wv[static_cast<size_t>(trans_w ? f * K + f % K : (f % K) * F + f)] = 1.0;
        set_values(w, wv);
        const Tensor bias = host_tensor(t, Shape{F});
        set_values(bias, std::vector<double>(static_cast<size_t>(F), 0.0));
        const Tensor out_d = gpu_tensor(t, Shape{R, F}), pre_d = gpu_tensor(t, Shape{R, F});
        poison(out_d);
        poison(pre_d);
        gpu_k->matmul_bias_gelu(*gpu_ws, out_d, pre_d, to_gpu(a), to_gpu(w), trans_w, to_gpu(bias));
        const std::vector<double> av = values(a), pre = values(pre_d), out = values(out_d);
        int64_t pre_bad = 0, out_bad = 0;
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t f = 0; f < F; ++f) {
            const size_t i = static_cast<size_t>(r * F + f);
            const double v = av[static_cast<size_t>(r * K + f % K)];
            pre_bad += pre[i] != v;
            const double g = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            // f16 outputs below its smallest normal (2^-14) may be flushed to zero.
            const bool flushed = t == DType::f16 && out[i] == 0.0 && std::fabs(g) < 0x1p-14;
            const bool ok = flushed || std::fabs(out[i] - g) <= unit * std::fabs(g) + tiny + 0x1p-17 * std::fabs(v);
            if (!ok && out_bad < 5)
              std::printf("GeluForwardInTheEpilogue %s: x %.9g gave %.9g, GELU %.9g\n", dtype_name(t), v, out[i], g);
            out_bad += !ok;
          }
        }
        EXPECT_EQ(pre_bad, 0) << dtype_name(t) << " trans_w " << trans_w << ": pre-activations not exact";
        EXPECT_EQ(out_bad, 0) << dtype_name(t) << " trans_w " << trans_w << ": outputs more than one unit from GELU";
        gpu_ws->reset();
      }
      for (const auto& [R, K, F] : {std::tuple<int64_t, int64_t, int64_t>{1000, 256, 1024}, {4099, 768, 3072},
                                    {333, 64, 77}}) {
        const std::string what = std::string(dtype_name(t)) + " " + std::to_string(R) + "x" + std::to_string(K) +
                                 "x" + std::to_string(F) + " trans_w " + std::to_string(trans_w);
        const Tensor a = host_random(t, Shape{R, K}), w = host_random(t, trans_w ? Shape{F, K} : Shape{K, F});
        const Tensor bias = host_random(t, Shape{F});
        const Tensor out = host_tensor(t, Shape{R, F}), pre = host_tensor(t, Shape{R, F});
        cpu_k->matmul_bias_gelu(*host_ws, out, pre, a, w, trans_w, bias);
        const Tensor out_d = gpu_tensor(t, Shape{R, F}), pre_d = gpu_tensor(t, Shape{R, F});
        poison(out_d);
        poison(pre_d);
        gpu_k->matmul_bias_gelu(*gpu_ws, out_d, pre_d, to_gpu(a), to_gpu(w), trans_w, to_gpu(bias));
        const double pre_err = rel_error(values(pre_d), values(pre)), out_err = rel_error(values(out_d), values(out));
        // The fallback (F % 8 != 0) is matmul's fp32 product on converted
        // copies, which differs from the CPU's in bf16 by ~3e-3: tolerance().
        EXPECT_LT(pre_err, F % 8 != 0 ? tolerance(t) : t == DType::bf16 ? 1e-3 : 2.5e-4) << what;
        EXPECT_LT(out_err, tolerance(t)) << what;
        std::printf("GeluForwardInTheEpilogue %s: pre-activation error %.2e, output error %.2e\n", what.c_str(),
                    pre_err, out_err);
        gpu_ws->reset();
        host_ws->reset();
      }
    }
  }
}

// The MLP's backward through GELU with the derivative in the product's
// epilogue ([Note: GELU in the epilogue]) against the CPU's product, exact
// GELU backward and f32 bias sums, its operand rounded to the same 16-bit
// dtype. The two sides round nearly equal f32 values (the sums' order and
// GELU's formula differ in the last fp32 bits), so a few elements differ by
// one unit: a norm error bound of 1e-3 (bf16) and 2.5e-4 (f16), which an
// erf-based or missing derivative would exceed. The bias gradient is summed
// from the rounded operand on the GPU: tolerance(). Where the epilogue runs,
// the call takes only the operand from the arena (no f32 gradient); an F
// that is not a multiple of 8 takes the product and the fused pass instead.
TEST_F(CudaDense, GeluBackwardInTheEpilogue) {
  for (DType t : {DType::bf16, DType::f16}) {
    for (bool trans_w : {false, true}) {
      for (const auto& [R, K, F] : {std::tuple<int64_t, int64_t, int64_t>{1000, 256, 1024},
                                    {4099, 768, 3072}, {333, 64, 77}}) {
        const std::string what = std::string(dtype_name(t)) + " " + std::to_string(R) + "x" + std::to_string(K) +
                                 "x" + std::to_string(F) + " trans_w " + std::to_string(trans_w);
        const Tensor dout = host_random(t, Shape{R, K}), w = host_random(t, trans_w ? Shape{F, K} : Shape{K, F});
        const Tensor pre = host_random(t, Shape{R, F}, 4.0), db = host_random(DType::f32, Shape{F});
        const Tensor db_cpu = host_tensor(DType::f32, Shape{F});
        std::memcpy(db_cpu.data, db.data, db.bytes());
        const Tensor op_cpu =
            cpu_k->matmul_gelu_bwd_bias_grad_and_operand(*host_ws, db_cpu, DType::f32, dout, w, trans_w, pre, t);
        const Tensor op_cpu_t = host_tensor(t, Shape{R, F});
        cpu_k->cast(op_cpu_t, op_cpu);
        const Tensor dout_d = to_gpu(dout), w_d = to_gpu(w), pre_d = to_gpu(pre), db_d = to_gpu(db);
        Arena ws(*gpu, MemTag::workspace, size_t{256} << 20);  // one chunk holds either path's allocations
        const Tensor op_d =
            gpu_k->matmul_gelu_bwd_bias_grad_and_operand(ws, db_d, DType::f32, dout_d, w_d, trans_w, pre_d, t);
        const Arena::Mark after = ws.mark();
        ASSERT_EQ(op_d.dtype, t) << what;
        {  // the same bits again
          const Tensor db2_d = to_gpu(db);
          const Tensor op2_d =
              gpu_k->matmul_gelu_bwd_bias_grad_and_operand(ws, db2_d, DType::f32, dout_d, w_d, trans_w, pre_d, t);
          EXPECT_EQ(max_abs_diff(values(op2_d), values(op_d)), 0.0) << what << ": operand not deterministic";
          EXPECT_EQ(max_abs_diff(values(db2_d), values(db_d)), 0.0) << what << ": bias gradient not deterministic";
          ws.release_to(after);
        }
        const double err = rel_error(values(op_d), values(op_cpu_t));
        EXPECT_LT(err, t == DType::bf16 ? 1e-3 : 2.5e-4) << what;
        EXPECT_LT(rel_error(values(db_d), values(db_cpu)), tolerance(t)) << what;
        if (F % 8 == 0) {
          EXPECT_TRUE(after.chunk == 0 && after.used < static_cast<size_t>(R * F) * 4)
              << what << ": an f32 gradient was allocated, so the epilogue did not run";
        }
        std::printf("GeluBackwardInTheEpilogue %s: operand error %.2e\n", what.c_str(), err);
        host_ws->reset();
      }
    }
  }
}

// Attention's backward with its bias gradient and operand in one call: where
// cuDNN runs, its 16-bit gradients are the operand as they come, with the
// bits of the f32 gradients (widened) going through bias_grad_and_operand.
TEST_F(CudaDense, AttentionBackwardOperandIsTheSeparateCallsBits) {
  const int64_t B = 2, T = 128, NH = 2, hs = 64, C = NH * hs;
  for (DType t : {DType::bf16, DType::f16}) {
    for (DType partner : {t, DType::f32}) {
      const std::string what = std::string(dtype_name(t)) + " partner " + dtype_name(partner);
      const Tensor qkv_d = to_gpu(host_random(t, Shape{B, T, 3 * C}));
      const Tensor dout_d = to_gpu(host_random(DType::f32, Shape{B, T, C}));
      const Tensor db = host_random(DType::f32, Shape{3 * C});
      const Tensor out_d = gpu_tensor(t, Shape{B, T, C}), lse_d = gpu_tensor(DType::f32, Shape{B, NH, T});
      gpu_k->attention_fwd(*gpu_ws, out_d, lse_d, qkv_d, static_cast<int>(NH), Tensor());
      const Tensor dqkv_sep = gpu_tensor(DType::f32, Shape{B, T, 3 * C}), dqkv_f = gpu_tensor(DType::f32, Shape{B, T, 3 * C});
      const Tensor db_sep = to_gpu(db), db_fused = to_gpu(db);
      gpu_k->attention_bwd(*gpu_ws, dqkv_sep, dout_d, qkv_d, out_d, lse_d, static_cast<int>(NH), Tensor());
      const Tensor op_sep = gpu_k->bias_grad_and_operand(*gpu_ws, db_sep, dqkv_sep, partner);
      const uint64_t calls = attention_cudnn_calls();
      const Tensor op_fused = gpu_k->attention_bwd_bias_grad_and_operand(
          *gpu_ws, db_fused, dqkv_f, dout_d, qkv_d, out_d, lse_d, static_cast<int>(NH), Tensor(), partner);
      if (attention_cudnn_compiled()) {
        EXPECT_EQ(attention_cudnn_calls() - calls, 1u) << what << ": the backward did not run on cuDNN";
      }
      EXPECT_EQ(op_fused.dtype, partner) << what;
      EXPECT_EQ(max_abs_diff(values(op_fused), values(op_sep)), 0.0) << what;
      EXPECT_EQ(max_abs_diff(values(db_fused), values(db_sep)), 0.0) << what;
      gpu_ws->reset();
    }
  }
}

// [Note: attention's dout in 16 bits]: where cuDNN runs the backward, dout
// may come already rounded to the storage dtype, with the bits of the f32
// dout that the call rounds itself; with ZTRAIN_ATTENTION=flash (or document
// masking) the backward wants f32, and a 16-bit dout given anyway is widened
// for the flash kernels (the bits of its f32 widening).
TEST_F(CudaDense, AttentionBackwardTakesDoutIn16Bits) {
  const int64_t B = 2, T = 128, NH = 2, hs = 64, C = NH * hs;
  const Tensor doc = gpu_tensor(DType::i32, Shape{B, T});
  for (DType t : {DType::bf16, DType::f16}) {
    const std::string what = dtype_name(t);
    const Tensor qkv_d = to_gpu(host_random(t, Shape{B, T, 3 * C}));
    const Tensor out_d = gpu_tensor(t, Shape{B, T, C}), lse_d = gpu_tensor(DType::f32, Shape{B, NH, T});
    gpu_k->attention_fwd(*gpu_ws, out_d, lse_d, qkv_d, static_cast<int>(NH), Tensor());
    const Tensor dout16 = gpu_tensor(t, Shape{B, T, C}), dout_r = gpu_tensor(DType::f32, Shape{B, T, C});
    gpu_k->cast(dout16, to_gpu(host_random(DType::f32, Shape{B, T, C})));
    gpu_k->cast(dout_r, dout16);  // the rounded values, in f32
    const Tensor db = host_random(DType::f32, Shape{3 * C});
    // (operand, bias gradient) of one call with `dout`.
    auto run = [&](const Tensor& dout) {
      const Tensor dqkv = gpu_tensor(DType::f32, Shape{B, T, 3 * C}), db_d = to_gpu(db);
      const Tensor op = gpu_k->attention_bwd_bias_grad_and_operand(*gpu_ws, db_d, dqkv, dout, qkv_d, out_d, lse_d,
                                                                   static_cast<int>(NH), Tensor(), t);
      return std::make_pair(values(op), values(db_d));
    };
    EXPECT_EQ(gpu_k->attention_bwd_dout_dtype(qkv_d, Tensor(), DType::f32),
              attention_cudnn_compiled() ? t : DType::f32) << what;
    EXPECT_EQ(gpu_k->attention_bwd_dout_dtype(qkv_d, doc, DType::f32), DType::f32) << what << ": document masking";
    const auto wide = run(dout_r);
    const uint64_t calls = attention_cudnn_calls();
    const auto narrow = run(dout16);
    if (attention_cudnn_compiled()) {
      EXPECT_EQ(attention_cudnn_calls() - calls, 1u) << what << ": the backward did not run on cuDNN";
    }
    EXPECT_EQ(max_abs_diff(narrow.first, wide.first), 0.0) << what;
    EXPECT_EQ(max_abs_diff(narrow.second, wide.second), 0.0) << what;
    ZT_CHECK(setenv("ZTRAIN_ATTENTION", "flash", 1) == 0, "setenv");
    EXPECT_EQ(gpu_k->attention_bwd_dout_dtype(qkv_d, Tensor(), DType::f32), DType::f32) << what << ": flash";
    const auto flash_wide = run(dout_r);
    const uint64_t flash_calls = attention_cudnn_calls();
    const auto flash_narrow = run(dout16);
    EXPECT_EQ(attention_cudnn_calls(), flash_calls) << what << ": flash selected, cuDNN ran";
    EXPECT_EQ(max_abs_diff(flash_narrow.first, flash_wide.first), 0.0) << what << ": flash";
    EXPECT_EQ(max_abs_diff(flash_narrow.second, flash_wide.second), 0.0) << what << ": flash";
    ZT_CHECK(unsetenv("ZTRAIN_ATTENTION") == 0, "unsetenv");
    gpu_ws->reset();
  }
}

// [Note: attention's dout in 16 bits] for grouped-query attention: a 16-bit
// dout gives the f32 dout's bits on cuDNN and, with ZTRAIN_ATTENTION=flash,
// on the flash kernels (which take its widening).
TEST_F(CudaDense, GqaAttentionBackwardTakesDoutIn16Bits) {
  const int64_t B = 2, T = 128, NH = 4, NKV = 2, hs = 64, C = NH * hs, KV = NKV * hs;
  for (DType t : {DType::bf16, DType::f16}) {
    const Tensor q = to_gpu(host_random(t, Shape{B, T, C})), k = to_gpu(host_random(t, Shape{B, T, KV})),
                 v = to_gpu(host_random(t, Shape{B, T, KV}));
    const Tensor out = gpu_tensor(t, Shape{B, T, C}), lse = gpu_tensor(DType::f32, Shape{B, NH, T});
    gpu_k->gqa_attention_fwd(*gpu_ws, out, lse, q, k, v, static_cast<int>(NH), static_cast<int>(NKV), Tensor());
    const Tensor dout16 = gpu_tensor(t, Shape{B, T, C}), dout_r = gpu_tensor(DType::f32, Shape{B, T, C});
    gpu_k->cast(dout16, to_gpu(host_random(DType::f32, Shape{B, T, C})));
    gpu_k->cast(dout_r, dout16);
    auto run = [&](const Tensor& dout) {
      const Tensor dq = gpu_tensor(DType::f32, Shape{B, T, C}), dk = gpu_tensor(DType::f32, Shape{B, T, KV}),
                   dv = gpu_tensor(DType::f32, Shape{B, T, KV});
      gpu_k->gqa_attention_bwd(*gpu_ws, dq, dk, dv, dout, q, k, v, out, lse, static_cast<int>(NH),
                               static_cast<int>(NKV), Tensor());
      return std::vector<std::vector<double>>{values(dq), values(dk), values(dv)};
    };
    for (const char* path : {"cudnn", "flash"}) {
      if (std::string(path) == "cudnn" && !attention_cudnn_compiled()) continue;
      ZT_CHECK(setenv("ZTRAIN_ATTENTION", path, 1) == 0, "setenv");
      const std::string what = std::string(dtype_name(t)) + " " + path;
      EXPECT_EQ(gpu_k->attention_bwd_dout_dtype(q, Tensor(), DType::f32),
                std::string(path) == "cudnn" ? t : DType::f32) << what;
      const auto wide = run(dout_r);
      const uint64_t calls = attention_cudnn_calls();
      const auto narrow = run(dout16);
      EXPECT_EQ(attention_cudnn_calls() - calls, std::string(path) == "cudnn" ? 1u : 0u) << what;
      for (int i = 0; i < 3; ++i) EXPECT_EQ(max_abs_diff(narrow[i], wide[i]), 0.0) << what << " gradient " << i;
      gpu_ws->reset();
    }
    ZT_CHECK(unsetenv("ZTRAIN_ATTENTION") == 0, "unsetenv");
  }
}

// [Note: attention's gradients in 16 bits]: dq, dk and dv written by
// gqa_attention_bwd in the storage dtype, then rotated by rope_bwd in that
// dtype, are the rounding of the f32 gradients rotated in f32, bit for bit, on
// cuDNN; with ZTRAIN_ATTENTION=flash (where gqa_grad_dtype answers f32, and
// where a shape cuDNN declines goes) the 16-bit gradients are the rounding of
// the flash kernels' f32 ones.
TEST_F(CudaDense, GqaGradientsIn16BitsAreTheF32Rounded) {
  const int64_t B = 2, T = 128, NH = 4, NKV = 2, hs = 64, C = NH * hs, KV = NKV * hs;
  RopeConfig rope;
  rope.head_dim = hs;
  rope.theta = 500000.0;
  for (DType t : {DType::bf16, DType::f16}) {
    const Tensor q = to_gpu(host_random(t, Shape{B, T, C})), k = to_gpu(host_random(t, Shape{B, T, KV})),
                 v = to_gpu(host_random(t, Shape{B, T, KV}));
    const Tensor out = gpu_tensor(t, Shape{B, T, C}), lse = gpu_tensor(DType::f32, Shape{B, NH, T});
    gpu_k->gqa_attention_fwd(*gpu_ws, out, lse, q, k, v, static_cast<int>(NH), static_cast<int>(NKV), Tensor());
    const Tensor dout = gpu_tensor(t, Shape{B, T, C});
    gpu_k->cast(dout, to_gpu(host_random(DType::f32, Shape{B, T, C})));
    // dq, dk, dv in dtype g after the backward and the rotation, as t.
    auto run = [&](DType g, bool rotate) {
      const Tensor dq = gpu_tensor(g, Shape{B, T, C}), dk = gpu_tensor(g, Shape{B, T, KV}),
                   dv = gpu_tensor(g, Shape{B, T, KV});
      gpu_k->gqa_attention_bwd(*gpu_ws, dq, dk, dv, dout, q, k, v, out, lse, static_cast<int>(NH),
                               static_cast<int>(NKV), Tensor());
      if (rotate) gpu_k->rope_bwd(dq, dk, rope, Tensor());
      std::vector<std::vector<double>> r;
      for (const Tensor* x : {&dq, &dk, &dv}) {
        const Tensor rounded = gpu_tensor(t, x->shape);
        gpu_k->cast(rounded, *x);
        r.push_back(values(rounded));
      }
      return r;
    };
    for (const char* path : {"cudnn", "flash"}) {
      if (std::string(path) == "cudnn" && !attention_cudnn_compiled()) continue;
      ZT_CHECK(setenv("ZTRAIN_ATTENTION", path, 1) == 0, "setenv");
      const std::string what = std::string(dtype_name(t)) + " " + path;
      EXPECT_EQ(gpu_k->gqa_grad_dtype(q, Tensor(), DType::f32), std::string(path) == "cudnn" ? t : DType::f32)
          << what;
      const bool cudnn = std::string(path) == "cudnn";
      const auto wide = run(DType::f32, cudnn);
      const uint64_t calls = attention_cudnn_calls();
      const auto narrow = run(t, cudnn);
      EXPECT_EQ(attention_cudnn_calls() - calls, cudnn ? 1u : 0u) << what;
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(max_abs_diff(narrow[i], wide[i]), 0.0) << what << " gradient " << i;
        double largest = 0;
        for (double x : narrow[i]) largest = std::max(largest, std::fabs(x));
        EXPECT_GT(largest, 0.0) << what << " gradient " << i;
      }
      gpu_ws->reset();
    }
    ZT_CHECK(unsetenv("ZTRAIN_ATTENTION") == 0, "unsetenv");
    EXPECT_EQ(gpu_k->gqa_grad_dtype(q, gpu_tensor(DType::i32, Shape{B, T}), DType::f32), DType::f32)
        << "document masking";
  }
}

// [Note: timed algorithm choice]: a product whose algorithm was chosen by
// running the candidates gives the bits of the heuristic's first choice, for
// the plain, bias, GELU_AUX_BIAS and DGELU products at the shapes of a GPT-2
// block (fresh CudaKernels each way, so each builds and chooses its own
// plans), for an f32 product accumulated into (chosen at a call with beta = 1,
// its output kept aside and put back), and a second call with the chosen plan
// gives them again. An unknown ZTRAIN_GEMM_ALGO is refused by name.
TEST_F(CudaDense, TimedAlgorithmChoiceKeepsTheHeuristicsBits) {
  const int64_t R = 2048, C = 768, F = 3072;
  for (DType t : {DType::bf16, DType::f16}) {
    const Tensor x = to_gpu(host_random(t, Shape{R, C})), w1 = to_gpu(host_random(t, Shape{F, C}, 0.05));
    const Tensor b1 = to_gpu(host_random(t, Shape{F})), w2 = to_gpu(host_random(t, Shape{C, F}, 0.05));
    const Tensor dy = to_gpu(host_random(t, Shape{R, C})), b2 = to_gpu(host_random(t, Shape{C}));
    const Tensor dwc0 = host_random(DType::f32, Shape{C, C});
    // Every product's outputs, as raw bits, with the choice `algo`.
    auto products = [&](const char* algo) {
      ZT_CHECK(setenv("ZTRAIN_GEMM_ALGO", algo, 1) == 0, "setenv");
      CudaKernels k(*gpu);
      std::vector<std::vector<uint16_t>> outs;
      const Tensor h = gpu_tensor(t, Shape{R, F}), pre = gpu_tensor(t, Shape{R, F});
      const Tensor y = gpu_tensor(t, Shape{R, C}), yb = gpu_tensor(t, Shape{R, C});
      const Tensor dw = gpu_tensor(DType::f32, Shape{C, F}), db = gpu_tensor(DType::f32, Shape{F});
      const Tensor dwc = to_gpu(dwc0);  // accumulated into: chosen at a call with beta = 1
      k.zero(db);
      for (int round = 0; round < 2; ++round) {
        k.matmul_bias_gelu(*gpu_ws, h, pre, x, w1, true, b1);      // GELU_AUX_BIAS
        k.matmul(*gpu_ws, y, h, false, w2, true, false, Tensor());  // plain
        k.matmul(*gpu_ws, yb, h, false, w2, true, false, b2);       // BIAS
        k.matmul(*gpu_ws, dw, dy, true, h, false, false, Tensor());  // f32 out from 16-bit
        const Tensor g = k.matmul_gelu_bwd_bias_grad_and_operand(*gpu_ws, db, DType::f32, dy, w2, false, pre, t);
        k.matmul(*gpu_ws, dwc, dy, true, x, false, true, Tensor());  // f32 +=
        gpu->synchronize();
        for (const Tensor* o : {&h, &pre, &y, &yb, &dw, &g, &db, &dwc}) {
          std::vector<uint16_t> bits(o->bytes() / 2);
          ZT_CUDA_CHECK(cudaMemcpy(bits.data(), o->data, o->bytes(), cudaMemcpyDeviceToHost));
          outs.push_back(std::move(bits));
        }
        gpu_ws->reset();
      }
      return outs;
    };
    const size_t before = cuda::lt_choices_made().size();
    const auto heuristic = products("heuristic");
    EXPECT_EQ(cuda::lt_choices_made().size(), before) << "the heuristic's run timed a product";
    const auto timed = products("timed");
    // The timing ran: each product with a choice recorded one, and the
    // block's 2048 x 3072 x 768 products had more than one candidate to time
    // (5-8 on the H200), so a choice that never ran cannot pass as bits kept.
    const auto made = cuda::lt_choices_made();
    int block_choices = 0, accumulate_choices = 0;
    for (size_t i = before; i < made.size(); ++i) {
      const cuda::LtChoice& c = made[i].choice;
      EXPECT_FALSE(c.untimed) << made[i].what;
      if (made[i].what.find("2048x3072x768") != std::string::npos && c.identical > 1) ++block_choices;
      if (made[i].what.find("768x768x2048") != std::string::npos && c.identical >= 1) ++accumulate_choices;
    }
    EXPECT_GE(block_choices, 2) << dtype_name(t) << ": GELU_AUX_BIAS and DGELU at 2048x3072x768 chose among "
                                << "fewer than two bit-identical candidates, or no choice ran";
    EXPECT_EQ(accumulate_choices, 1) << dtype_name(t) << ": the accumulating product made no choice";
    ASSERT_EQ(heuristic.size(), timed.size());
    for (size_t i = 0; i < heuristic.size(); ++i)
      EXPECT_TRUE(heuristic[i] == timed[i]) << dtype_name(t) << ": output " << i % 8 << " of round " << i / 8
                                            << " differs between the heuristic's and the timed choice";
    ZT_CHECK(setenv("ZTRAIN_GEMM_ALGO", "fastest", 1) == 0, "setenv");
    CudaKernels k(*gpu);
    const Tensor y = gpu_tensor(t, Shape{R, F});
    EXPECT_THROW(k.matmul(*gpu_ws, y, x, false, w2, false, false, Tensor()), UserError);
    ZT_CHECK(unsetenv("ZTRAIN_GEMM_ALGO") == 0, "unsetenv");
    gpu_ws->reset();
  }
}

TEST_F(CudaDense, LayerNormForward) {
  for (DType xt : kStorage) {
    for (DType wt : {xt, DType::f32}) {
      for (int64_t C : {768, 75}) {  // vector and scalar paths
        const int64_t N = 67;
        const Tensor x = host_random(xt, Shape{N, C}, 3.0), w = host_random(wt, Shape{C}), b = host_random(wt, Shape{C});
        const Tensor out = host_tensor(xt, Shape{N, C}), mean = host_tensor(DType::f32, Shape{N}),
                     rstd = host_tensor(DType::f32, Shape{N});
        const Tensor out_d = gpu_tensor(xt, Shape{N, C}), mean_d = gpu_tensor(DType::f32, Shape{N}),
                     rstd_d = gpu_tensor(DType::f32, Shape{N});
        for (const Tensor* t : {&out_d, &mean_d, &rstd_d}) poison(*t);
        cpu_k->layernorm_fwd(out, mean, rstd, x, w, b);
        gpu_k->layernorm_fwd(out_d, mean_d, rstd_d, to_gpu(x), to_gpu(w), to_gpu(b));
        const std::string what = std::string(dtype_name(xt)) + "/" + dtype_name(wt) + " C " + std::to_string(C);
        EXPECT_LT(rel_error(values(out_d), values(out)), tolerance(xt)) << what;
        EXPECT_LT(rel_error(values(mean_d), values(mean)), 1e-5) << what;
        EXPECT_LT(rel_error(values(rstd_d), values(rstd)), 1e-5) << what;
      }
    }
  }
}

TEST_F(CudaDense, LayerNormBackward) {
  for (DType xt : kStorage) {
    for (DType wt : {xt, DType::f32}) {
      // Vector path (C % 8 == 0) and scalar path; N 4099 spans many chunks
      // of the column sums.
      for (const auto& [N, C] : {std::pair<int64_t, int64_t>{203, 768}, {4099, 768}, {203, 1024}, {203, 256},
                                 {203, 1000}, {203, 2048}, {203, 75}}) {
        for (int mode = 0; mode < 3; ++mode) {  // write dx, accumulate into dx, dx aliasing dout
          const Tensor x = host_random(xt, Shape{N, C}, 3.0), w = host_random(wt, Shape{C}), b = host_random(wt, Shape{C});
          const Tensor y = host_tensor(xt, Shape{N, C}), mean = host_tensor(DType::f32, Shape{N}),
                       rstd = host_tensor(DType::f32, Shape{N});
          cpu_k->layernorm_fwd(y, mean, rstd, x, w, b);
          const Tensor dout = host_random(DType::f32, Shape{N, C});
          const Tensor dx = mode == 2 ? dout : host_random(DType::f32, Shape{N, C});
          const Tensor dw = host_random(DType::f32, Shape{C}), db = host_random(DType::f32, Shape{C});
          const Tensor dout_d = to_gpu(dout);
          const Tensor dx_d = mode == 2 ? dout_d : to_gpu(dx);
          const Tensor dw_d = to_gpu(dw), db_d = to_gpu(db);
          if (mode == 0) poison(dx_d);
          const bool acc = mode == 1;
          cpu_k->layernorm_bwd(dx, acc, dw, db, dout, x, w, mean, rstd);
          gpu_k->layernorm_bwd(dx_d, acc, dw_d, db_d, dout_d, to_gpu(x), to_gpu(w), to_gpu(mean), to_gpu(rstd));
          const std::string what = std::string(dtype_name(xt)) + "/" + dtype_name(wt) + " C " +
                                   std::to_string(C) + " mode " + std::to_string(mode);
          // All fp32 arithmetic on identical inputs.
          EXPECT_LT(rel_error(values(dx_d), values(dx)), 1e-5) << what;
          EXPECT_LT(rel_error(values(dw_d), values(dw)), 1e-5) << what;
          EXPECT_LT(rel_error(values(db_d), values(db)), 1e-5) << what;
        }
      }
    }
  }
}

// [Note: LayerNorm backward in one pass]: the fused kernel's dw and db are
// the separate column sums' bits. dout one float off alignment sends the same
// inputs down the separate kernels (scalar column sums, which the vector
// sums match bit for bit), at 4099 rows (65 chunks, the last one short) for
// each width of the fused kernel.
TEST_F(CudaDense, LayerNormBackwardInOnePassKeepsTheColumnSumsBits) {
  for (DType xt : kStorage) {
    for (int64_t C : {768, 1000, 1024}) {
      const int64_t N = 4099;
      const auto [x_d, w_d, mean_d, rstd_d] = layernorm_inputs(xt, N, C);
      const Tensor dout = host_random(DType::f32, Shape{N, C}), dw0 = host_random(DType::f32, Shape{C}),
                   db0 = host_random(DType::f32, Shape{C});
      std::vector<double> got[2][3];
      for (int off = 0; off < 2; ++off) {  // 0: one pass, 1: the separate kernels
        const Tensor dout_d = to_gpu(dout, off), dx_d = gpu_tensor(DType::f32, Shape{N, C}, off);
        const Tensor dw_d = to_gpu(dw0), db_d = to_gpu(db0);
        const uint64_t one_pass = cuda::layernorm_bwd_one_pass_calls();
        gpu_k->layernorm_bwd(dx_d, false, dw_d, db_d, dout_d, x_d, w_d, mean_d, rstd_d);
        // Which path ran: the comparison below means nothing if both did the same.
        EXPECT_EQ(cuda::layernorm_bwd_one_pass_calls() - one_pass, off == 0 ? 1u : 0u)
            << dtype_name(xt) << " C " << C << (off == 0 ? ": aligned call" : ": misaligned call");
        got[off][0] = values(dw_d);
        got[off][1] = values(db_d);
        got[off][2] = values(dx_d);
      }
      const std::string what = std::string(dtype_name(xt)) + " C " + std::to_string(C);
      EXPECT_EQ(max_abs_diff(got[0][0], got[1][0]), 0.0) << what << ": dw";
      EXPECT_EQ(max_abs_diff(got[0][1], got[1][1]), 0.0) << what << ": db";
      EXPECT_LT(rel_error(got[0][2], got[1][2]), 1e-6) << what << ": dx";
      gpu_ws->reset();
    }
  }
}

// [Note: norms' dout in 16 bits]: a 16-bit dout gives the bits of its
// f32 widening, on the one pass (C up to 1024) and the separate kernels
// (C 2048; C 75 without vectors), with dres, accumulating and plain; the
// query names the 16-bit dtype for 16-bit x only.
TEST_F(CudaDense, LayerNormBackwardTakesDoutIn16Bits) {
  EXPECT_EQ(gpu_k->norm_bwd_dout_dtype(gpu_tensor(DType::f32, Shape{4, 8}), DType::f32), DType::f32);
  for (DType xt : {DType::bf16, DType::f16}) {
    EXPECT_EQ(gpu_k->norm_bwd_dout_dtype(gpu_tensor(xt, Shape{4, 8}), DType::f32), xt);
    for (int64_t C : {768, 2048, 75}) {
      const int64_t N = 1031;
      const auto [x_d, w_d, mean_d, rstd_d] = layernorm_inputs(xt, N, C);
      const Tensor dout16 = gpu_tensor(xt, Shape{N, C}), dout_r = gpu_tensor(DType::f32, Shape{N, C});
      gpu_k->cast(dout16, to_gpu(host_random(DType::f32, Shape{N, C})));
      gpu_k->cast(dout_r, dout16);
      const Tensor dres = host_random(DType::f32, Shape{N, C}), dx0 = host_random(DType::f32, Shape{N, C});
      const Tensor dw0 = host_random(DType::f32, Shape{C}), db0 = host_random(DType::f32, Shape{C});
      for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 accumulate, 2 with dres
        const std::string what = std::string(dtype_name(xt)) + " C " + std::to_string(C) + " mode " +
                                 std::to_string(mode);
        std::vector<double> got[2][3];
        for (int narrow = 0; narrow < 2; ++narrow) {
          const Tensor dx_d = to_gpu(dx0), dw_d = to_gpu(dw0), db_d = to_gpu(db0);
          gpu_k->layernorm_bwd(dx_d, mode == 1, dw_d, db_d, narrow ? dout16 : dout_r, x_d, w_d, mean_d, rstd_d,
                               mode == 2 ? to_gpu(dres) : Tensor());
          got[narrow][0] = values(dx_d);
          got[narrow][1] = values(dw_d);
          got[narrow][2] = values(db_d);
        }
        EXPECT_EQ(max_abs_diff(got[0][0], got[1][0]), 0.0) << what << ": dx";
        EXPECT_EQ(max_abs_diff(got[0][1], got[1][1]), 0.0) << what << ": dw";
        EXPECT_EQ(max_abs_diff(got[0][2], got[1][2]), 0.0) << what << ": db";
      }
      gpu_ws->reset();
    }
  }
}

// [Note: residual stream]: the norm's copy of x is exact, and dx = dres + the
// norm's gradient (dx apart from or aliasing dres) matches the CPU's copy
// then accumulate.
TEST_F(CudaDense, LayerNormWithResidualStream) {
  for (DType xt : kStorage) {
    for (int64_t C : {768, 75}) {
      const int64_t N = 67;
      const std::string what = std::string(dtype_name(xt)) + " C " + std::to_string(C);
      const Tensor x = host_random(xt, Shape{N, C}, 3.0), w = host_random(xt, Shape{C}), b = host_random(xt, Shape{C});
      const Tensor y = host_tensor(xt, Shape{N, C}), mean = host_tensor(DType::f32, Shape{N}),
                   rstd = host_tensor(DType::f32, Shape{N}), res = host_tensor(xt, Shape{N, C});
      const Tensor y_d = gpu_tensor(xt, Shape{N, C}), mean_d = gpu_tensor(DType::f32, Shape{N}),
                   rstd_d = gpu_tensor(DType::f32, Shape{N}), res_d = gpu_tensor(xt, Shape{N, C});
      for (const Tensor* t : {&y_d, &mean_d, &rstd_d, &res_d}) poison(*t);
      const Tensor x_d = to_gpu(x), w_d = to_gpu(w), b_d = to_gpu(b);
      cpu_k->layernorm_fwd(y, mean, rstd, x, w, b, res);
      gpu_k->layernorm_fwd(y_d, mean_d, rstd_d, x_d, w_d, b_d, res_d);
      EXPECT_LT(rel_error(values(y_d), values(y)), tolerance(xt)) << what;
      EXPECT_EQ(max_abs_diff(values(res_d), values(x)), 0.0) << what;
      for (bool alias : {false, true}) {
        const Tensor dout = host_random(DType::f32, Shape{N, C}), dres = host_random(DType::f32, Shape{N, C});
        const Tensor dx = host_tensor(DType::f32, Shape{N, C});
        const Tensor dw = host_random(DType::f32, Shape{C}), db = host_random(DType::f32, Shape{C});
        const Tensor dres_d = to_gpu(dres), dw_d = to_gpu(dw), db_d = to_gpu(db);
        const Tensor dx_d = alias ? dres_d : gpu_tensor(DType::f32, Shape{N, C});
        if (!alias) poison(dx_d);
        cpu_k->layernorm_bwd(dx, false, dw, db, dout, x, w, mean, rstd, dres);
        gpu_k->layernorm_bwd(dx_d, false, dw_d, db_d, to_gpu(dout), x_d, w_d, mean_d, rstd_d, dres_d);
        EXPECT_LT(rel_error(values(dx_d), values(dx)), 1e-5) << what << " alias " << alias;
        EXPECT_LT(rel_error(values(dw_d), values(dw)), 1e-5) << what << " alias " << alias;
        EXPECT_LT(rel_error(values(db_d), values(db)), 1e-5) << what << " alias " << alias;
      }
    }
  }
}

TEST_F(CudaDense, EmbeddingForwardAndExactBackward) {
  // Few tokens: many repeats; with V 3, runs of ~400 positions, longer than
  // a block (the search for a run's end goes over several blocks' widths).
  for (const auto& [T, V] : {std::pair<int64_t, int64_t>{33, 13}, {300, 3}}) {
    const int64_t B = 4, Tmax = T + 7;
    for (DType wt : kStorage) {
      for (DType ot : {wt, DType::bf16}) {
        for (int64_t C : {64, 36}) {
          const Tensor tok = host_tensor(DType::i32, Shape{B, T});
          fill_tokens(tok, rng_key(seed, ++draws), static_cast<int>(V));
          const Tensor wte = host_random(wt, Shape{V, C}), wpe = host_random(wt, Shape{Tmax, C});
          const Tensor out = host_tensor(ot, Shape{B, T, C});
          const Tensor tok_d = to_gpu(tok), out_d = gpu_tensor(ot, Shape{B, T, C});
          poison(out_d);
          cpu_k->embedding_fwd(out, tok, wte, wpe, Tensor());
          gpu_k->embedding_fwd(out_d, tok_d, to_gpu(wte), to_gpu(wpe), Tensor());
          const std::string what = std::string(dtype_name(wt)) + " -> " + dtype_name(ot) + " C " + std::to_string(C) +
                                   " T " + std::to_string(T) + " V " + std::to_string(V);
          // One sum of two values, rounded once: the same on both sides.
          EXPECT_EQ(max_abs_diff(values(out_d), values(out)), 0.0) << what;

          const Tensor dout = host_random(DType::f32, Shape{B, T, C});
          const Tensor dwte = host_random(DType::f32, Shape{V, C}), dwpe = host_random(DType::f32, Shape{Tmax, C});
          const Tensor dwte_d = to_gpu(dwte), dwpe_d = to_gpu(dwpe);
          cpu_k->embedding_bwd(dwte, dwpe, dout, tok, Tensor());
          gpu_k->embedding_bwd(dwte_d, dwpe_d, to_gpu(dout), tok_d, Tensor());
          // [Note: embedding backward]: the CPU's order of additions, bit for bit.
          EXPECT_EQ(max_abs_diff(values(dwte_d), values(dwte)), 0.0) << what;
          EXPECT_EQ(max_abs_diff(values(dwpe_d), values(dwpe)), 0.0) << what;
        }
      }
    }
  }
}

TEST_F(CudaDense, EmbeddingBadTokenGivesNanRowNotAFault) {
  const int64_t B = 1, T = 3, C = 8, V = 5;
  const Tensor tok = host_tensor(DType::i32, Shape{B, T});
  tok.as<int32_t>()[0] = 1;
  tok.as<int32_t>()[1] = 7;  // outside [0, V)
  tok.as<int32_t>()[2] = -1;
  const Tensor wte = host_random(DType::f32, Shape{V, C}), wpe = host_random(DType::f32, Shape{T, C});
  const Tensor out_d = gpu_tensor(DType::f32, Shape{B, T, C});
  gpu_k->embedding_fwd(out_d, to_gpu(tok), to_gpu(wte), to_gpu(wpe), Tensor());
  const std::vector<double> v = values(out_d);
  for (int64_t c = 0; c < C; ++c) {
    EXPECT_TRUE(std::isfinite(v[c]));
    EXPECT_TRUE(std::isnan(v[C + c]));
    EXPECT_TRUE(std::isnan(v[2 * C + c]));
  }
  // The backward skips such tokens.
  const Tensor dwte_d = gpu_tensor(DType::f32, Shape{V, C}), dwpe_d = gpu_tensor(DType::f32, Shape{T, C});
  gpu_k->zero(dwte_d);
  gpu_k->zero(dwpe_d);
  const Tensor dout = host_random(DType::f32, Shape{B, T, C});
  gpu_k->embedding_bwd(dwte_d, dwpe_d, to_gpu(dout), to_gpu(tok), Tensor());
  const std::vector<double> g = values(dwte_d), d = values(dout);
  for (int64_t v2 = 0; v2 < V; ++v2) {
    for (int64_t c = 0; c < C; ++c) EXPECT_EQ(g[v2 * C + c], v2 == 1 ? d[c] : 0.0);
  }
}

}  // namespace
}  // namespace zt::test
