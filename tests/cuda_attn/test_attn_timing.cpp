// Timing of the CUDA attention (flash kernels and cuDNN, ZTRAIN_ATTENTION)
// and fused classifier at GPT-2 124M sizes and larger heads (skipped without
// a GPU). Prints milliseconds per call and TFLOP/s; checks
// only that the results are finite. FLOP counts are the model's (causal
// attention: forward 2 products over half the (T, T) pairs, backward 5, as
// FlashAttention reports them; the classifier: forward 2NVC, backward 4NVC),
// not what the kernels execute (the backward recomputes: attention runs 7
// products, the classifier 6NVC).
#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <functional>

#include "modules/cuda/attention.cuh"
#include "modules/cuda/attention_cudnn.cuh"
#include "modules/cuda/classifier.cuh"
#include "cuda_test_util.hpp"

namespace zt {
namespace {

using test::TestTensor;

// Mean milliseconds of fn over `iters` runs after `warmup` runs.
float time_ms(cudaStream_t stream, const std::function<void()>& fn, int warmup = 3, int iters = 20) {
  for (int i = 0; i < warmup; ++i) fn();
  cudaEvent_t a, b;
  ZT_CHECK(cudaEventCreate(&a) == cudaSuccess && cudaEventCreate(&b) == cudaSuccess, "events");
  ZT_CHECK(cudaEventRecord(a, stream) == cudaSuccess, "record");
  for (int i = 0; i < iters; ++i) fn();
  ZT_CHECK(cudaEventRecord(b, stream) == cudaSuccess, "record");
  ZT_CHECK(cudaEventSynchronize(b) == cudaSuccess, "sync");
  float ms = 0;
  ZT_CHECK(cudaEventElapsedTime(&ms, a, b) == cudaSuccess, "elapsed");
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return ms / iters;
}

// Times forward and backward of one shape on one path (ZTRAIN_ATTENTION):
// the packed (B, T, 3C) launchers when NKV == NH, the grouped-query ones
// otherwise. A cudnn line that did not run on cuDNN fails.
void time_attention(DType st, int B, int T, int NH, int NKV, int hs, const char* path) {
  const bool want_cudnn = std::strncmp(path, "cudnn", 5) == 0;
  if (want_cudnn && !attention_cudnn_compiled()) {
    std::printf("[ timing   ] attention %s B=%d T=%d H=%d KV=%d D=%d cudnn: skipped (no cuDNN in this build)\n",
                dtype_name(st), B, T, NH, NKV, hs);
    return;
  }
  const test::ScopedAttentionPath select(path);
  const int64_t C = int64_t{NH} * hs, Ckv = int64_t{NKV} * hs;
  const bool packed = NKV == NH;
  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace);
  TestTensor out(dev, st, Shape{B, T, C}), lse(dev, DType::f32, Shape{B, NH, T}), dout(dev, DType::f32, Shape{B, T, C});
  // Packed: qkv and dqkv; grouped-query: q, k, v and their gradients.
  const Shape s_qkv = packed ? Shape{B, T, 3 * C} : Shape{B, T, C}, s_kv = packed ? Shape{1} : Shape{B, T, Ckv};
  TestTensor qkv(dev, st, s_qkv), k(dev, st, s_kv), v(dev, st, s_kv), dqkv(dev, DType::f32, s_qkv),
      dk(dev, DType::f32, s_kv), dv(dev, DType::f32, s_kv);
  std::mt19937_64 rng(test::test_seed());
  for (TestTensor* t : {&qkv, &k, &v, &dout}) t->fill(dev, test::normal_vec(rng, size_t(t->t.numel()), 1.0f));
  cudaStream_t s = nullptr;
  ZT_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  const uint64_t calls = attention_cudnn_calls();
  const float fwd = time_ms(s, [&] {
    if (packed) attention_fwd_cuda(out.t, lse.t, qkv.t, NH, Tensor(), ws, s);
    else gqa_attention_fwd_cuda(out.t, lse.t, qkv.t, k.t, v.t, NH, NKV, Tensor(), ws, s);
  });
  const float bwd = time_ms(s, [&] {
    if (packed) attention_bwd_cuda(dqkv.t, dout.t, qkv.t, out.t, lse.t, NH, Tensor(), ws, s);
    else gqa_attention_bwd_cuda(dqkv.t, dk.t, dv.t, dout.t, qkv.t, k.t, v.t, out.t, lse.t, NH, NKV, Tensor(), ws, s);
  });
  const bool ran_cudnn = attention_cudnn_calls() != calls;
  const double f_fwd = 4.0 * B * NH * double(T) * T * hs / 2;  // causal: half the pairs
  const double f_bwd = 2.5 * f_fwd;
  std::printf("[ timing   ] attention %s B=%d T=%d H=%d KV=%d D=%d %s (ran %s): fwd %.3f ms (%.1f TFLOP/s), "
              "bwd %.3f ms (%.1f TFLOP/s), fwd+bwd %.3f ms (%.1f TFLOP/s), workspace %.0f MiB\n",
              dtype_name(st), B, T, NH, NKV, hs, path, ran_cudnn ? "cudnn" : "flash", fwd, f_fwd / fwd * 1e-9, bwd,
              f_bwd / bwd * 1e-9, fwd + bwd, (f_fwd + f_bwd) / (fwd + bwd) * 1e-9, ws.capacity() / 1048576.0);
  EXPECT_EQ(ran_cudnn, want_cudnn) << path << " did not run where asked";
  if (packed && want_cudnn && st != DType::f32) {
    // The backward as the GPT-2 block runs it on cuDNN: dout already in 16
    // bits ([Note: attention's dout in 16 bits]) and the gradients written
    // in 16 bits (attention_bwd_cuda_16bit), no conversion around cuDNN.
    TestTensor dout16(dev, st, Shape{B, T, C}), dqkv16(dev, st, s_qkv);
    dout16.fill(dev, test::normal_vec(rng, size_t(dout16.t.numel()), 1.0f));
    bool took = true;
    const float bwd16 = time_ms(s, [&] {
      took = attention_bwd_cuda_16bit(dqkv16.t, dout16.t, qkv.t, out.t, lse.t, NH, ws, s) && took;
    });
    std::printf("[ timing   ] attention %s B=%d T=%d H=%d D=%d %s, 16-bit dout and gradients (as trained): "
                "bwd %.3f ms (%.1f TFLOP/s), fwd+bwd %.3f ms (%.1f TFLOP/s)\n",
                dtype_name(st), B, T, NH, hs, path, bwd16, f_bwd / bwd16 * 1e-9, fwd + bwd16,
                (f_fwd + f_bwd) / (fwd + bwd16) * 1e-9);
    EXPECT_TRUE(took) << path << ": the 16-bit backward did not run on cuDNN";
  }
  EXPECT_EQ(test::count_nonfinite(out.read(dev)), 0);
  EXPECT_EQ(test::count_nonfinite(dqkv.read(dev)), 0);
  ZT_CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream");
}

// The GPT-2 124M block (16 x 1024, 12 heads of 64), the 1.3B preset's (8 x
// 1024, 32 heads of 64) and larger heads, on both
// paths; f32 runs on the flash kernels only.
TEST(CudaAttnTiming, AttentionGpt2) {
  ZT_SKIP_WITHOUT_GPU();
  struct Shape4 {
    int B, T, NH, NKV, hs;
  };
  const Shape4 shapes[] = {
      {16, 1024, 12, 12, 64}, {8, 1024, 32, 32, 64}, {8, 1024, 16, 16, 128}, {4, 2048, 16, 16, 128},
      {4, 2048, 32, 8, 64}};
  for (const Shape4& c : shapes)
    for (const char* path : {"flash", "cudnn", "cudnn-nondeterministic"})
      time_attention(DType::bf16, c.B, c.T, c.NH, c.NKV, c.hs, path);
  for (const char* path : {"flash", "cudnn"}) time_attention(DType::f16, 16, 1024, 12, 12, 64, path);
  time_attention(DType::f32, 16, 1024, 12, 12, 64, "flash");
}

// One product D (m, n; ldd) = op(A) . op(B), column-major, bf16 in and out,
// fp32 accumulation, cuBLASLt's first heuristic: the reference products of
// the classifier as PyTorch runs them under autocast.
float lt_gemm_ms(cublasLtHandle_t lt, const TestTensor& ws, cudaStream_t s, bool ta, bool tb, int m, int n, int k,
                 const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd) {
  cublasLtMatmulDesc_t op;
  ZT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS, "desc");
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, ta ? k : m, ta ? m : k, lda);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, tb ? n : k, tb ? k : n, ldb);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, ldd);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  const uint64_t wsb = ws.t.bytes();
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  ZT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 1, &r, &found) == CUBLAS_STATUS_SUCCESS &&
               found > 0,
           "no algorithm");
  const float one = 1.0f, zero = 0.0f;
  const float ms = time_ms(s, [&] {
    ZT_CHECK(cublasLtMatmul(lt, op, &one, A, la, B, lb, &zero, D, ld, D, ld, &r.algo, ws.t.data, wsb, s) ==
                 CUBLAS_STATUS_SUCCESS,
             "matmul");
  });
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  return ms;
}

// The classifier at the shapes of GPT-2 124M (mb 16), the 1.3B preset (mb 8)
// and Llama 3.2 1B (mb 4, T 2048): the separate forward and backward, the
// one pass with f32 and with 16-bit logits at several chunk budgets, and the
// three bf16 products alone that the one pass is judged against: logits
// (N, Vp) = x . w^T, dx = G . w, dw = G^T . x with V padded to Vp, a multiple
// of 8, in w, G and dw (with GPT-2's odd V as the contiguous extent cuBLASLt
// runs them 4-8x slower, [Note: classifier in one pass]). Under
// ZT_PROFILE_CLASSIFIER=f32 (or bf16) only the one pass at 1 GiB with those
// logits runs, at GPT-2 124M's shape, between cudaProfilerStart and Stop,
// for `nsys profile --capture-range=cudaProfilerApi`.
TEST(CudaAttnTiming, Classifier) {
  ZT_SKIP_WITHOUT_GPU();
  struct Shape3 {
    int N, C, V;
  };
  for (const Shape3 sh : {Shape3{16384, 768, 50257}, Shape3{8192, 2048, 50257}, Shape3{8192, 2048, 128256}}) {
    const int N = sh.N, C = sh.C, V = sh.V;
    const int64_t Vp = (int64_t{V} + 7) / 8 * 8;
    const DType st = DType::bf16;
    test::PlainCudaDevice dev;
    Arena ws(dev, MemTag::workspace);
    const char* profile_env = std::getenv("ZT_PROFILE_CLASSIFIER");
    const bool profile = profile_env != nullptr;
    if (profile && V != 50257) continue;
    TestTensor x(dev, st, Shape{N, C}), w(dev, st, Shape{V, C}), tgt(dev, DType::i32, Shape{N}),
        loss(dev, DType::f32, Shape{N}), lse(dev, DType::f32, Shape{N}), dloss(dev, DType::f32, Shape{N}),
        dx(dev, DType::f32, Shape{N, C}), dw(dev, DType::f32, Shape{V, C}),
        lt_ws(dev, DType::u16, Shape{int64_t{16} << 20});  // 32 MiB
    std::mt19937_64 rng(test::test_seed());
    x.fill(dev, test::normal_vec(rng, size_t(N) * C, 1.0f));
    w.fill(dev, test::normal_vec(rng, size_t(V) * C, 0.02f));
    std::vector<int32_t> tg(N);
    for (int n = 0; n < N; ++n) tg[n] = static_cast<int32_t>(rng() % V);
    tgt.fill_i32(dev, tg);
    dloss.fill(dev, std::vector<float>(N, 1.0f / N));
    dev.memset_zero(dw.t.data, dw.t.bytes());
    cudaStream_t s = nullptr;
    ZT_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    cublasLtHandle_t lt = nullptr;
    ASSERT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    const ClassifierBlas blas{lt, lt_ws.t.data, lt_ws.t.bytes()};
    const double f = 2.0 * N * double(V) * C;
    float gemms = 0;
    if (!profile) {
      const int vp = static_cast<int>(Vp);
      TestTensor logits(dev, st, Shape{int64_t{N}, Vp}), dx16(dev, st, Shape{N, C}), dw16(dev, st, Shape{Vp, C}),
          wp(dev, st, Shape{Vp, C});
      dev.memset_zero(logits.t.data, logits.t.bytes());
      dev.memset_zero(wp.t.data, wp.t.bytes());
      ZT_CHECK(cudaMemcpy(wp.t.data, w.t.data, w.t.bytes(), cudaMemcpyDeviceToDevice) == cudaSuccess, "copy");
      const float a = lt_gemm_ms(lt, lt_ws, s, true, false, vp, N, C, wp.t.data, C, x.t.data, C, logits.t.data, Vp);
      const float b = lt_gemm_ms(lt, lt_ws, s, false, false, C, N, vp, wp.t.data, C, logits.t.data, Vp, dx16.t.data, C);
      const float c = lt_gemm_ms(lt, lt_ws, s, false, true, C, vp, N, x.t.data, C, logits.t.data, Vp, dw16.t.data, C);
      gemms = a + b + c;
      std::printf("[ timing   ] classifier products bf16 N=%d C=%d V=%d: logits %.3f, dx %.3f, dw %.3f ms, "
                  "%.3f ms (%.1f TFLOP/s)\n",
                  N, C, V, a, b, c, gemms, 3 * f / gemms * 1e-9);
      // The same products over the V classes alone, the leading dimensions
      // still Vp: why the one pass pads an odd vocabulary ([Note: classifier
      // in one pass]; cuBLASLt's fast kernels want the contiguous extent a
      // multiple of 16 bytes).
      const float a2 = lt_gemm_ms(lt, lt_ws, s, true, false, V, N, C, w.t.data, C, x.t.data, C, logits.t.data, Vp);
      const float b2 = lt_gemm_ms(lt, lt_ws, s, false, false, C, N, V, w.t.data, C, logits.t.data, Vp, dx16.t.data, C);
      const float c2 = lt_gemm_ms(lt, lt_ws, s, false, true, C, V, N, x.t.data, C, logits.t.data, Vp, dw16.t.data, C);
      std::printf("[ timing   ] classifier products bf16 N=%d C=%d V=%d over V (ld %lld): logits %.3f, dx %.3f, "
                  "dw %.3f ms, %.3f ms (%.1f TFLOP/s)\n",
                  N, C, V, static_cast<long long>(Vp), a2, b2, c2, a2 + b2 + c2, 3 * f / (a2 + b2 + c2) * 1e-9);
      // The floor of any one pass that keeps the dlogits in memory for
      // cuBLAS's gradient products: its loss-and-dlogits pass reads the
      // 16-bit logits once and writes the dlogits once, which a plain
      // device-to-device copy of the logits' bytes also does. The products
      // plus that copy are what such a pass costs at best.
      {
        TestTensor dst(dev, st, Shape{int64_t{N}, Vp});
        const size_t bytes = logits.t.bytes();
        const float cp = time_ms(s, [&] {
          ZT_CHECK(cudaMemcpyAsync(dst.t.data, logits.t.data, bytes, cudaMemcpyDeviceToDevice, s) == cudaSuccess,
                   "copy");
        });
        std::printf("[ timing   ] classifier floor bf16 N=%d C=%d V=%d: a copy of the logits' %.3f GB (read and "
                    "written) %.3f ms (%.0f GB/s moved); products + copy %.3f ms (%.3fx the products)\n",
                    N, C, V, bytes * 1e-9, cp, 2.0 * bytes / cp * 1e-6, gemms + cp, (gemms + cp) / gemms);
      }
    }
    if (profile) {
      {
        const DType ldt = dtype_from_name(profile_env);
        auto run = [&] { classifier_fwd_bwd_cuda(ws, loss.t, dx.t, dw.t, dloss.t, x.t, w.t, tgt.t, blas, s, 1u << 30, ldt); };
        run();
        ZT_CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        ZT_CHECK(cudaProfilerStart() == cudaSuccess, "profiler start");
        for (int i = 0; i < 5; ++i) run();
        ZT_CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
        ZT_CHECK(cudaProfilerStop() == cudaSuccess, "profiler stop");
      }
      (void)cublasLtDestroy(lt);
      ZT_CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream");
      continue;
    }
    for (size_t mib : {256, 1024}) {
      const size_t chunk = mib << 20;
      const float fwd = time_ms(s, [&] { classifier_fwd_cuda(ws, loss.t, lse.t, x.t, w.t, tgt.t, blas, s, chunk); });
      const float bwd = time_ms(
          s, [&] { classifier_bwd_cuda(ws, dx.t, dw.t, dloss.t, x.t, w.t, tgt.t, lse.t, blas, s, chunk); }, 2, 10);
      std::printf("[ timing   ] classifier bf16 N=%d C=%d V=%d chunk %zu MiB: fwd %.3f + bwd %.3f = %.3f ms "
                  "(%.2fx the products)\n",
                  N, C, V, mib, fwd, bwd, fwd + bwd, (fwd + bwd) / gemms);
    }
    for (DType ldt : {DType::f32, DType::bf16})
      for (size_t mib : {256, 512, 1024, 2048}) {
        const size_t chunk = mib << 20;
        const float one = time_ms(
            s,
            [&] { classifier_fwd_bwd_cuda(ws, loss.t, dx.t, dw.t, dloss.t, x.t, w.t, tgt.t, blas, s, chunk, ldt); },
            2, 10);
        std::printf("[ timing   ] classifier one pass bf16 N=%d C=%d V=%d logits %s chunk %zu MiB: %.3f ms "
                    "(%.1f TFLOP/s, %.2fx the products)\n",
                    N, C, V, dtype_name(ldt), mib, one, 3 * f / one * 1e-9, one / gemms);
      }
    EXPECT_EQ(test::count_nonfinite(loss.read(dev)), 0);
    EXPECT_EQ(test::count_nonfinite(dx.read(dev)), 0);
    (void)cublasLtDestroy(lt);
    ZT_CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream");
  }
}

}  // namespace
}  // namespace zt
