// Timing of the CUDA attention (flash kernels and cuDNN, ZTRAIN_ATTENTION)
// and fused classifier at GPT-2 124M sizes and larger heads (skipped without
// a GPU). Prints milliseconds per call and TFLOP/s; checks
// only that the results are finite. FLOP counts are the model's (causal
// attention: forward 2 products over half the (T, T) pairs, backward 5, as
// FlashAttention reports them; the classifier: forward 2NVC, backward 4NVC),
// not what the kernels execute (the backward recomputes: attention runs 7
// products, the classifier 6NVC).
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

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
  EXPECT_EQ(test::count_nonfinite(out.read(dev)), 0);
  EXPECT_EQ(test::count_nonfinite(dqkv.read(dev)), 0);
  ZT_CHECK(cudaStreamDestroy(s) == cudaSuccess, "stream");
}

// The GPT-2 124M block (16 x 1024, 12 heads of 64) and larger heads, on both
// paths; f32 runs on the flash kernels only.
TEST(CudaAttnTiming, AttentionGpt2) {
  ZT_SKIP_WITHOUT_GPU();
  struct Shape4 {
    int B, T, NH, NKV, hs;
  };
  const Shape4 shapes[] = {
      {16, 1024, 12, 12, 64}, {8, 1024, 16, 16, 128}, {4, 2048, 16, 16, 128}, {4, 2048, 32, 8, 64}};
  for (const Shape4& c : shapes)
    for (const char* path : {"flash", "cudnn", "cudnn-nondeterministic"})
      time_attention(DType::bf16, c.B, c.T, c.NH, c.NKV, c.hs, path);
  for (const char* path : {"flash", "cudnn"}) time_attention(DType::f16, 16, 1024, 12, 12, 64, path);
  time_attention(DType::f32, 16, 1024, 12, 12, 64, "flash");
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
