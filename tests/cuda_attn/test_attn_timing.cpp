// Timing of the CUDA attention and fused classifier at GPT-2 124M sizes
// (skipped without a GPU). Prints milliseconds per call and TFLOP/s; checks
// only that the results are finite. FLOP counts are the model's (causal
// attention: forward 2 products over half the (T, T) pairs, backward 5, as
// FlashAttention reports them; the classifier: forward 2NVC, backward 4NVC),
// not what the kernels execute (the backward recomputes: attention runs 7
// products, the classifier 6NVC).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <functional>

#include "modules/cuda/attention.cuh"
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

void time_attention(DType st, int B, int T, int NH, int hs) {
  const int64_t C = int64_t{NH} * hs;
  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace);
  TestTensor qkv(dev, st, Shape{B, T, 3 * C}), out(dev, st, Shape{B, T, C}), lse(dev, DType::f32, Shape{B, NH, T}),
      dout(dev, DType::f32, Shape{B, T, C}), dqkv(dev, DType::f32, Shape{B, T, 3 * C});
  std::mt19937_64 rng(test::test_seed());
  qkv.fill(dev, test::normal_vec(rng, size_t(qkv.t.numel()), 1.0f));
  dout.fill(dev, test::normal_vec(rng, size_t(dout.t.numel()), 1.0f));
  cudaStream_t s = nullptr;
  ZT_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
  const float fwd = time_ms(s, [&] { attention_fwd_cuda(out.t, lse.t, qkv.t, NH, s); });
  const float bwd = time_ms(s, [&] { attention_bwd_cuda(dqkv.t, dout.t, qkv.t, out.t, lse.t, NH, ws, s); });
  const double f_fwd = 4.0 * B * NH * double(T) * T * hs / 2;  // causal: half the pairs
  const double f_bwd = 2.5 * f_fwd;
  std::printf("[ timing   ] attention %s B=%d T=%d H=%d D=%d: fwd %.3f ms (%.1f TFLOP/s), bwd %.3f ms (%.1f TFLOP/s), "
              "fwd+bwd %.3f ms (%.1f TFLOP/s)\n",
              dtype_name(st), B, T, NH, hs, fwd, f_fwd / fwd * 1e-9, bwd, f_bwd / bwd * 1e-9, fwd + bwd,
              (f_fwd + f_bwd) / (fwd + bwd) * 1e-9);
  EXPECT_EQ(test::count_nonfinite(out.read(dev)), 0);
  EXPECT_EQ(test::count_nonfinite(dqkv.read(dev)), 0);
  ZT_CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream");
}

TEST(CudaAttnTiming, AttentionGpt2) {
  ZT_SKIP_WITHOUT_GPU();
  time_attention(DType::bf16, 16, 1024, 12, 64);
  time_attention(DType::f16, 16, 1024, 12, 64);
  time_attention(DType::bf16, 8, 2048, 16, 128);
  time_attention(DType::f32, 16, 1024, 12, 64);
}

TEST(CudaAttnTiming, ClassifierGpt2) {
  ZT_SKIP_WITHOUT_GPU();
  const int N = 16384, C = 768, V = 50257;
  const DType st = DType::bf16;
  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace);
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
  for (size_t mib : {64, 256, 1024}) {
    const size_t chunk = mib << 20;
    const float fwd = time_ms(s, [&] { classifier_fwd_cuda(ws, loss.t, lse.t, x.t, w.t, tgt.t, blas, s, chunk); });
    const float bwd = time_ms(
        s, [&] { classifier_bwd_cuda(ws, dx.t, dw.t, dloss.t, x.t, w.t, tgt.t, lse.t, blas, s, chunk); }, 2, 10);
    std::printf("[ timing   ] classifier bf16 N=%d C=%d V=%d chunk %zu MiB: fwd %.3f ms (%.1f TFLOP/s), "
                "bwd %.3f ms (%.1f TFLOP/s model, %.1f executed)\n",
                N, C, V, mib, fwd, f / fwd * 1e-9, bwd, 2 * f / bwd * 1e-9, 3 * f / bwd * 1e-9);
  }
  EXPECT_EQ(test::count_nonfinite(loss.read(dev)), 0);
  EXPECT_EQ(test::count_nonfinite(dx.read(dev)), 0);
  (void)cublasLtDestroy(lt);
  ZT_CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream");
}

}  // namespace
}  // namespace zt
