// Parity of CudaKernels with CpuKernels on the Llama operations (RMSNorm,
// rotary embeddings, SwiGLU, the embedding without a position table) and on
// document masking in RoPE and the GPT embedding, in f32, bf16 and f16
// storage. Grouped-query attention has its own parity test
// (tests/cuda_attn/test_attention_parity.cpp).
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

// [Note: norms' dout in 16 bits]: a 16-bit dout gives the bits of its f32
// widening, plain, accumulating and with the residual gradient.
TEST_F(CudaLlama, RmsNormBackwardTakesDoutIn16Bits) {
  for (DType t : {DType::bf16, DType::f16}) {
    EXPECT_EQ(gpu_k->norm_bwd_dout_dtype(gpu_tensor(t, Shape{4, 8}), DType::f32), t);
    for (int64_t C : {100, 2048}) {
      const int64_t N = 37;
      const Tensor x = host_random(t, Shape{N, C}, 2.0), w = host_random(t, Shape{C});
      const Tensor x_d = to_gpu(x), w_d = to_gpu(w), out_d = gpu_tensor(t, Shape{N, C}),
                   rstd_d = gpu_tensor(DType::f32, Shape{N});
      gpu_k->rmsnorm_fwd(out_d, rstd_d, x_d, w_d, 1e-5);
      const Tensor dout16 = gpu_tensor(t, Shape{N, C}), dout_r = gpu_tensor(DType::f32, Shape{N, C});
      gpu_k->cast(dout16, to_gpu(host_random(DType::f32, Shape{N, C})));
      gpu_k->cast(dout_r, dout16);
      const Tensor dx0 = host_random(DType::f32, Shape{N, C}), dw0 = host_random(DType::f32, Shape{C}),
                   dres = host_random(DType::f32, Shape{N, C});
      for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 accumulate, 2 with dres
        const std::string what = std::string(dtype_name(t)) + " C " + std::to_string(C) + " mode " +
                                 std::to_string(mode);
        std::vector<double> got[2][2];
        for (int narrow = 0; narrow < 2; ++narrow) {
          const Tensor dx_d = to_gpu(dx0), dw_d = to_gpu(dw0);
          gpu_k->rmsnorm_bwd(dx_d, mode == 1, dw_d, narrow ? dout16 : dout_r, x_d, w_d, rstd_d,
                             mode == 2 ? to_gpu(dres) : Tensor());
          got[narrow][0] = values(dx_d);
          got[narrow][1] = values(dw_d);
        }
        EXPECT_EQ(max_abs_diff(got[0][0], got[1][0]), 0.0) << what << ": dx";
        EXPECT_EQ(max_abs_diff(got[0][1], got[1][1]), 0.0) << what << ": dw";
      }
    }
  }
}

// [Note: the norm writes the products' operand]: with dx_operand, the
// backward's dx keeps its bits and the operand is dx rounded as cast rounds
// it, bit for bit, in all three forms (plain, accumulated, with dres).
TEST_F(CudaLlama, RmsNormBackwardWritesTheProductsOperand) {
  EXPECT_FALSE(cpu_k->norm_bwd_writes_operand(host_tensor(DType::bf16, Shape{4, 8}), DType::bf16));
  EXPECT_FALSE(gpu_k->norm_bwd_writes_operand(gpu_tensor(DType::f32, Shape{4, 8}), DType::bf16));
  EXPECT_FALSE(gpu_k->norm_bwd_writes_operand(gpu_tensor(DType::bf16, Shape{4, 8}), DType::f16));
  for (DType t : {DType::bf16, DType::f16}) {
    EXPECT_TRUE(gpu_k->norm_bwd_writes_operand(gpu_tensor(t, Shape{4, 8}), t));
    for (int64_t C : {100, 2048}) {
      const int64_t N = 37;
      const Tensor x_d = to_gpu(host_random(t, Shape{N, C}, 2.0)), w_d = to_gpu(host_random(t, Shape{C}));
      const Tensor out_d = gpu_tensor(t, Shape{N, C}), rstd_d = gpu_tensor(DType::f32, Shape{N});
      gpu_k->rmsnorm_fwd(out_d, rstd_d, x_d, w_d, 1e-5);
      const Tensor dout_d = to_gpu(host_random(DType::f32, Shape{N, C}));
      const Tensor dx0 = host_random(DType::f32, Shape{N, C}), dw0 = host_random(DType::f32, Shape{C}),
                   dres = host_random(DType::f32, Shape{N, C});
      for (int mode = 0; mode < 3; ++mode) {  // 0 plain, 1 accumulate, 2 with dres
        const std::string what = std::string(dtype_name(t)) + " C " + std::to_string(C) + " mode " +
                                 std::to_string(mode);
        const Tensor dx_ref = to_gpu(dx0), dw_ref = to_gpu(dw0), dx_d = to_gpu(dx0), dw_d = to_gpu(dw0);
        const Tensor op = gpu_tensor(t, Shape{N, C}), op_ref = gpu_tensor(t, Shape{N, C});
        poison(op);
        const Tensor dres_d = mode == 2 ? to_gpu(dres) : Tensor();
        gpu_k->rmsnorm_bwd(dx_ref, mode == 1, dw_ref, dout_d, x_d, w_d, rstd_d, dres_d);
        gpu_k->rmsnorm_bwd(dx_d, mode == 1, dw_d, dout_d, x_d, w_d, rstd_d, dres_d, op);
        gpu_k->cast(op_ref, dx_ref);
        EXPECT_EQ(max_abs_diff(values(dx_d), values(dx_ref)), 0.0) << what << ": dx";
        EXPECT_EQ(max_abs_diff(values(dw_d), values(dw_ref)), 0.0) << what << ": dw";
        EXPECT_TRUE(values(op) == values(op_ref)) << what << ": operand (poisoned with NaN before)";
      }
    }
  }
}

// RMSNorm's vector path: dw's column sums by vectors are the scalar sums'
// bits (dout one element off alignment sends the same inputs down the
// scalar kernels), and dx of both paths agrees to f32 rounding (the lanes
// sum other columns).
TEST_F(CudaLlama, RmsNormVectorAndScalarPathsAgree) {
  for (DType t : kStorage) {
    for (int64_t C : {64, 2048}) {
      const int64_t N = 4099;
      const std::string what = std::string(dtype_name(t)) + " C " + std::to_string(C);
      const Tensor x = host_random(t, Shape{N, C}, 2.0), w_d = to_gpu(host_random(t, Shape{C}));
      const Tensor rstd_d = gpu_tensor(DType::f32, Shape{N}), rstd_o = gpu_tensor(DType::f32, Shape{N});
      std::vector<double> out[2], rstd[2], dw[2], dx[2];
      const Tensor dout = host_random(t, Shape{N, C}), dw0 = host_random(DType::f32, Shape{C});
      for (int off = 0; off < 2; ++off) {  // 0: vectors, 1: one element off
        const Tensor x_o = to_gpu(x, off), out_d = gpu_tensor(t, Shape{N, C}, off);
        gpu_k->rmsnorm_fwd(out_d, off ? rstd_o : rstd_d, x_o, w_d, 1e-5);
        out[off] = values(out_d);
        rstd[off] = values(off ? rstd_o : rstd_d);
        // Both backwards from the vector forward's rstd.
        const Tensor dout_d = to_gpu(dout, off), dx_d = gpu_tensor(DType::f32, Shape{N, C}, off), dw_d = to_gpu(dw0);
        gpu_k->rmsnorm_bwd(dx_d, false, dw_d, dout_d, x_o, w_d, rstd_d);
        dw[off] = values(dw_d);
        dx[off] = values(dx_d);
      }
      EXPECT_EQ(max_abs_diff(dw[0], dw[1]), 0.0) << what << ": dw";
      EXPECT_LT(rel_error(rstd[0], rstd[1]), 1e-6) << what << ": rstd";
      EXPECT_LT(rel_error(out[0], out[1]), tolerance(t)) << what << ": out";
      EXPECT_LT(rel_error(dx[0], dx[1]), 1e-5) << what << ": dx";
    }
  }
}

// The residual-stream forms ([Note: residual stream]): the forward's copy of
// x is x's bits, and the backward's dx = dres + the norm's gradient matches
// the CPU's composition (copy, then accumulate).
TEST_F(CudaLlama, RmsNormWithResidualStreamMatchesCpu) {
  for (DType t : kStorage) {
    for (int64_t C : {64, 100}) {
      const int64_t N = 41;
      const std::string what = std::string(dtype_name(t)) + " C " + std::to_string(C);
      const Tensor x = host_random(t, Shape{N, C}, 2.0), w = host_random(t, Shape{C});
      const Tensor out = host_tensor(t, Shape{N, C}), rstd = host_tensor(DType::f32, Shape{N});
      const Tensor res = host_tensor(t, Shape{N, C});
      const Tensor x_d = to_gpu(x), w_d = to_gpu(w);
      const Tensor out_d = gpu_tensor(t, Shape{N, C}), rstd_d = gpu_tensor(DType::f32, Shape{N}),
                   res_d = gpu_tensor(t, Shape{N, C});
      for (const Tensor* p : {&out_d, &rstd_d, &res_d}) poison(*p);
      cpu_k->rmsnorm_fwd(out, rstd, x, w, 1e-5, res);
      gpu_k->rmsnorm_fwd(out_d, rstd_d, x_d, w_d, 1e-5, res_d);
      EXPECT_LT(rel_error(values(out_d), values(out)), tolerance(t)) << what;
      EXPECT_EQ(max_abs_diff(values(res_d), values(x)), 0.0) << what;

      const Tensor dout = host_random(DType::f32, Shape{N, C}), dres = host_random(DType::f32, Shape{N, C});
      const Tensor dx = host_tensor(DType::f32, Shape{N, C}), dw = host_random(DType::f32, Shape{C});
      const Tensor dx_d = gpu_tensor(DType::f32, Shape{N, C}), dw_d = to_gpu(dw);
      poison(dx_d);
      cpu_k->rmsnorm_bwd(dx, false, dw, dout, x, w, rstd, dres);
      gpu_k->rmsnorm_bwd(dx_d, false, dw_d, to_gpu(dout), x_d, w_d, rstd_d, to_gpu(dres));
      EXPECT_LT(rel_error(values(dx_d), values(dx)), 1e-5) << what;
      EXPECT_LT(rel_error(values(dw_d), values(dw)), 1e-5) << what;
      // dx may alias dres (the residual gradient updated in place).
      const Tensor dres2_d = to_gpu(dres);
      gpu_k->rmsnorm_bwd(dres2_d, false, to_gpu(dw), to_gpu(dout), x_d, w_d, rstd_d, dres2_d);
      EXPECT_LT(rel_error(values(dres2_d), values(dx)), 1e-5) << what << " aliased";
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
    cpu_k->rope_fwd(x, Tensor(), rope, Tensor());
    gpu_k->rope_fwd(x_d, Tensor(), rope, Tensor());
    EXPECT_LT(rel_error(values(x_d), values(x)), tolerance(t)) << dtype_name(t);
  }
  const Tensor g = host_random(DType::f32, Shape{B, T, W}), g_d = to_gpu(g);
  const std::vector<double> before = values(g);
  cpu_k->rope_bwd(g, Tensor(), rope, Tensor());
  gpu_k->rope_bwd(g_d, Tensor(), rope, Tensor());
  EXPECT_LT(rel_error(values(g_d), values(g)), 1e-6);
  gpu_k->rope_fwd(g_d, Tensor(), rope, Tensor());  // forward after the inverse: the identity
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

// Documents of row 0: [0, 50) [50, 51) [51, 130); row 1: [0, 130) whole.
const std::vector<std::vector<int64_t>> kDocs = {{0, 50, 51, 130}, {0, 130}};

Tensor doc_start_tensor(GpuFixture& f, int64_t T) {
  const Tensor ds = f.host_tensor(DType::i32, Shape{static_cast<int64_t>(kDocs.size()), T});
  for (size_t b = 0; b < kDocs.size(); ++b)
    for (size_t i = 0; i + 1 < kDocs[b].size(); ++i)
      for (int64_t t = kDocs[b][i]; t < kDocs[b][i + 1]; ++t) ds.as<int32_t>()[b * T + t] = static_cast<int32_t>(kDocs[b][i]);
  return ds;
}

// Rows [s, e) of row b of x (B, T, W) as a (1, e - s, W) host tensor, and back.
Tensor doc_rows(GpuFixture& f, const Tensor& x, int64_t b, int64_t s, int64_t e) {
  const int64_t T = x.shape[1], W = x.shape[2];
  const Tensor d = f.host_tensor(x.dtype, Shape{1, e - s, W});
  const size_t row = static_cast<size_t>(W) * dtype_size(x.dtype);
  std::memcpy(d.data, static_cast<const char*>(x.data) + (b * T + s) * row, static_cast<size_t>(e - s) * row);
  return d;
}
void put_doc_rows(const Tensor& x, const Tensor& d, int64_t b, int64_t s) {
  const size_t row = static_cast<size_t>(x.shape[2]) * dtype_size(x.dtype);
  std::memcpy(static_cast<char*>(x.data) + (b * x.shape[1] + s) * row, d.data, d.bytes());
}

// With doc_start, each document is rotated as a sequence of its own: the CPU
// run on each document alone is the reference.
TEST_F(CudaLlama, RopeWithDocumentsRotatesEachDocumentFromPositionZero) {
  RopeConfig rope;
  rope.head_dim = 64;
  rope.theta = 10000.0;
  const int64_t B = 2, T = 130, W = 2 * 64;
  const Tensor ds = doc_start_tensor(*this, T), ds_d = to_gpu(ds);
  for (int pass = 0; pass < 2; ++pass) {  // 0: forward (bf16), 1: backward (f32 gradients)
    const DType t = pass == 0 ? DType::bf16 : DType::f32;
    const Tensor x = host_random(t, Shape{B, T, W}), x_d = to_gpu(x), want = host_tensor(t, Shape{B, T, W});
    for (int64_t b = 0; b < B; ++b) {
      for (size_t i = 0; i + 1 < kDocs[b].size(); ++i) {
        const Tensor d = doc_rows(*this, x, b, kDocs[b][i], kDocs[b][i + 1]);
        if (pass == 0) cpu_k->rope_fwd(d, Tensor(), rope, Tensor()); else cpu_k->rope_bwd(d, Tensor(), rope, Tensor());
        put_doc_rows(want, d, b, kDocs[b][i]);
      }
    }
    if (pass == 0) gpu_k->rope_fwd(x_d, Tensor(), rope, ds_d); else gpu_k->rope_bwd(x_d, Tensor(), rope, ds_d);
    EXPECT_LT(rel_error(values(x_d), values(want)), pass == 0 ? tolerance(t) : 1e-6) << "pass " << pass;
    // Without doc_start the second document of row 0 would be rotated from 50 on.
    EXPECT_GT(rel_error(values(x_d), values(x)), 1e-2);
  }
}

// q and k of different widths (grouped-query attention) rotated in one call
// match the CPU's separate rotations, forward and inverse, with documents.
TEST_F(CudaLlama, RopeOfQueriesAndKeysInOneCallMatchesCpu) {
  RopeConfig rope;
  rope.head_dim = 64;
  rope.theta = 10000.0;
  const int64_t B = 2, T = 130;
  const Tensor ds = doc_start_tensor(*this, T), ds_d = to_gpu(ds);
  for (const Tensor* doc : {&ds, static_cast<const Tensor*>(nullptr)}) {
    const Tensor dsc = doc ? ds : Tensor(), dsg = doc ? ds_d : Tensor();
    for (int pass = 0; pass < 2; ++pass) {
      const DType t = pass == 0 ? DType::bf16 : DType::f32;
      const Tensor q = host_random(t, Shape{B, T, 4 * 64}), k = host_random(t, Shape{B, T, 2 * 64});
      const Tensor q_d = to_gpu(q), k_d = to_gpu(k);
      if (pass == 0) {
        cpu_k->rope_fwd(q, Tensor(), rope, dsc);
        cpu_k->rope_fwd(k, Tensor(), rope, dsc);
        gpu_k->rope_fwd(q_d, k_d, rope, dsg);
      } else {
        cpu_k->rope_bwd(q, Tensor(), rope, dsc);
        cpu_k->rope_bwd(k, Tensor(), rope, dsc);
        gpu_k->rope_bwd(q_d, k_d, rope, dsg);
      }
      const double tol = pass == 0 ? tolerance(t) : 1e-6;
      EXPECT_LT(rel_error(values(q_d), values(q)), tol) << "pass " << pass << (doc ? " documents" : "");
      EXPECT_LT(rel_error(values(k_d), values(k)), tol) << "pass " << pass << (doc ? " documents" : "");
    }
  }
}

TEST_F(CudaLlama, EmbeddingWithoutPositionTableMatchesCpuExactly) {
  const int64_t B = 3, T = 17, V = 11, C = 64;
  for (DType t : kStorage) {
    const Tensor tok = host_tensor(DType::i32, Shape{B, T});
    fill_tokens(tok, rng_key(seed, ++draws), static_cast<int>(V));
    const Tensor wte = host_random(t, Shape{V, C}), out = host_tensor(t, Shape{B, T, C});
    const Tensor out_d = gpu_tensor(t, Shape{B, T, C}), tok_d = to_gpu(tok);
    poison(out_d);
    cpu_k->embedding_fwd(out, tok, wte, Tensor(), Tensor());
    gpu_k->embedding_fwd(out_d, tok_d, to_gpu(wte), Tensor(), Tensor());
    EXPECT_EQ(max_abs_diff(values(out_d), values(out)), 0.0) << dtype_name(t);
    const Tensor dout = host_random(DType::f32, Shape{B, T, C}), dwte = host_random(DType::f32, Shape{V, C});
    const Tensor dwte_d = to_gpu(dwte);
    cpu_k->embedding_bwd(dwte, Tensor(), dout, tok, Tensor());
    gpu_k->embedding_bwd(dwte_d, Tensor(), to_gpu(dout), tok_d, Tensor());
    EXPECT_EQ(max_abs_diff(values(dwte_d), values(dwte)), 0.0) << dtype_name(t);
  }
}

// The GPT position table under document masking: each document reads and
// writes positions from 0. Reference: the CPU on each document alone, in
// row and document order, which is also the order of the GPU's additions.
TEST_F(CudaLlama, EmbeddingPositionsRestartAtEachDocument) {
  const int64_t B = 2, T = 130, V = 7, C = 32;
  const Tensor ds = doc_start_tensor(*this, T), ds_d = to_gpu(ds);
  const Tensor tok = host_tensor(DType::i32, Shape{B, T});
  fill_tokens(tok, rng_key(seed, ++draws), static_cast<int>(V));
  const Tensor wte = host_random(DType::f32, Shape{V, C}), wpe = host_random(DType::f32, Shape{T, C});
  const Tensor want = host_tensor(DType::f32, Shape{B, T, C}), out_d = gpu_tensor(DType::f32, Shape{B, T, C});
  const Tensor dout = host_random(DType::f32, Shape{B, T, C});
  const Tensor dwte = host_random(DType::f32, Shape{V, C}), dwpe = host_random(DType::f32, Shape{T, C});
  const Tensor dwte_d = to_gpu(dwte), dwpe_d = to_gpu(dwpe);
  for (int64_t b = 0; b < B; ++b) {
    for (size_t i = 0; i + 1 < kDocs[b].size(); ++i) {
      const int64_t s = kDocs[b][i], e = kDocs[b][i + 1];
      const Tensor tk(static_cast<int32_t*>(tok.data) + b * T + s, DType::i32, Shape{1, e - s}, DeviceKind::cpu);
      const Tensor o = host_tensor(DType::f32, Shape{1, e - s, C});
      cpu_k->embedding_fwd(o, tk, wte, wpe, Tensor());
      put_doc_rows(want, o, b, s);
      cpu_k->embedding_bwd(dwte, dwpe, doc_rows(*this, dout, b, s, e), tk, Tensor());
    }
  }
  poison(out_d);
  const Tensor tok_d = to_gpu(tok);
  gpu_k->embedding_fwd(out_d, tok_d, to_gpu(wte), to_gpu(wpe), ds_d);
  EXPECT_EQ(max_abs_diff(values(out_d), values(want)), 0.0);
  gpu_k->embedding_bwd(dwte_d, dwpe_d, to_gpu(dout), tok_d, ds_d);
  EXPECT_EQ(max_abs_diff(values(dwte_d), values(dwte)), 0.0);
  EXPECT_EQ(max_abs_diff(values(dwpe_d), values(dwpe)), 0.0);
}

}  // namespace
}  // namespace zt::test
