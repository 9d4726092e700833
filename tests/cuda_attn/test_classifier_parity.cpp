// Parity of the CUDA fused classifier + cross-entropy
// (modules/cuda/classifier.cuh) with CpuKernels: random inputs each run (seed
// printed), a vocabulary that is a multiple of nothing useful (5003), ignored
// targets (-1) among the rows, chunks that do not divide N, outputs poisoned
// with NaN, and dw accumulated onto a non-zero start.
//
// Bounds on ||gpu - cpu|| / ||cpu||:
//   losses, lse  1e-5 in every dtype: the logits are fp32 sums of exact
//                products of the same inputs on both sides.
//   dx, dw       f32 1e-5 (summation order only); bf16 2e-2 and f16 5e-3:
//                the GPU rounds dlogits to the storage dtype before the two
//                products (relative error <= u/2 per element, u = 2^-8 or
//                2^-11, random sign), a few u/2 in the norm.
// Seen on an H200: losses, lse <= 4e-7; dx, dw f32 <= 8e-7, bf16 <= 2.2e-3,
// f16 <= 4e-4.
#include <cstring>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "modules/cpu_kernels.hpp"
#include "modules/cuda/classifier.cuh"
#include "cuda_test_util.hpp"

namespace zt {
namespace {

using test::TestTensor;

struct ClsCase {
  int N, C, V;
  int rows_per_chunk;  // 0: the default chunk budget; else a multiple of 8 (or below 8: 8)
};

double grad_tol(DType t) { return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 2e-2 : 5e-3; }

// A case's inputs: x and w rounded to the storage dtype, targets with every
// tenth row ignored and the first and last classes used, loss weights
// around 1 / N.
struct ClsInputs {
  std::vector<float> x, w, dloss;
  std::vector<int32_t> tg;
  ClsInputs(std::mt19937_64& rng, const ClsCase& c, DType st)
      : x(test::round_to(test::normal_vec(rng, size_t(c.N) * c.C, 1.0f), st)),
        w(test::round_to(test::normal_vec(rng, size_t(c.V) * c.C, 0.5f), st)),
        dloss(c.N),
        tg(c.N) {
    std::uniform_int_distribution<int32_t> pick(0, c.V - 1);
    for (int n = 0; n < c.N; ++n) tg[n] = n % 10 == 3 ? -1 : pick(rng);
    tg[0] = 0;
    if (c.N > 1) tg[c.N - 1] = c.V - 1;
    std::uniform_real_distribution<float> weight(0.5f, 1.5f);
    for (float& d : dloss) d = weight(rng) / c.N;
  }
};

// The CPU reference's tensors, inputs filled; outputs left to the test.
struct CpuRef {
  CpuDevice dev;
  Arena ws{dev, MemTag::workspace};
  CpuKernels cpu;
  TestTensor x, w, tg, loss, lse, dloss, dx, dw;
  CpuRef(const ClsInputs& in, const ClsCase& c, DType st)
      : x(dev, st, Shape{c.N, c.C}), w(dev, st, Shape{c.V, c.C}), tg(dev, DType::i32, Shape{c.N}),
        loss(dev, DType::f32, Shape{c.N}), lse(dev, DType::f32, Shape{c.N}), dloss(dev, DType::f32, Shape{c.N}),
        dx(dev, DType::f32, Shape{c.N, c.C}), dw(dev, DType::f32, Shape{c.V, c.C}) {
    x.fill(dev, in.x);
    w.fill(dev, in.w);
    tg.fill_i32(dev, in.tg);
    dloss.fill(dev, in.dloss);
  }
};

void expect_finite_and_ignored_rows_zero(const std::vector<float>& loss, const std::vector<float>& dx,
                                         const std::vector<float>& dw, const std::vector<int32_t>& tg) {
  EXPECT_EQ(test::count_nonfinite(loss), 0);
  EXPECT_EQ(test::count_nonfinite(dx), 0);
  EXPECT_EQ(test::count_nonfinite(dw), 0);
  for (size_t n = 0; n < tg.size(); ++n) {
    if (tg[n] < 0) {
      EXPECT_EQ(loss[n], 0.0f) << "ignored row " << n;
    }
  }
}

// dw's gradient part, relative to the gradient (the start dw0 cancels).
double dw_gradient_error(const std::vector<float>& dw, const std::vector<float>& dw_ref,
                         const std::vector<float>& dw0) {
  std::vector<float> g(dw.size()), r(dw.size());
  for (size_t i = 0; i < dw.size(); ++i) {
    g[i] = dw[i] - dw0[i];
    r[i] = dw_ref[i] - dw0[i];
  }
  return test::rel_err(g, r);
}

// A stream and a cuBLASLt handle with a 32 MiB workspace, released with the
// object; a failure to make them throws.
struct GpuBlas {
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  TestTensor ws;
  explicit GpuBlas(Device& dev) : ws(dev, DType::u16, Shape{int64_t{16} << 20}) {
    ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    ZT_CUBLAS_CHECK(cublasLtCreate(&lt));
  }
  ~GpuBlas() {
    (void)cublasLtDestroy(lt);
    (void)cudaStreamDestroy(stream);
  }
  GpuBlas(const GpuBlas&) = delete;
  GpuBlas& operator=(const GpuBlas&) = delete;
  ClassifierBlas blas() const { return ClassifierBlas{lt, ws.t.data, ws.t.bytes()}; }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ClassifierParity : public ::testing::TestWithParam<std::tuple<DType, ClsCase>> {};

TEST_P(ClassifierParity, LossAndGradientsMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const DType st = std::get<0>(GetParam());
  const ClsCase c = std::get<1>(GetParam());
  std::mt19937_64 rng(test::test_seed() ^ (uint64_t(c.N) << 40 | uint64_t(c.V) << 8 | uint64_t(c.C)) ^
                      static_cast<uint64_t>(st) << 56);
  const ClsInputs in(rng, c, st);
  const std::vector<float>&x_h = in.x, &w_h = in.w, &dloss_h = in.dloss;
  const std::vector<int32_t>& tg = in.tg;

  // CPU reference: once from dw = 0 to learn the gradient's scale, then from
  // a start of that scale, so that overwriting instead of accumulating fails.
  CpuRef ref(in, c, st);
  CpuKernels& cpu = ref.cpu;
  CpuDevice& cpu_dev = ref.dev;
  Arena& cpu_ws = ref.ws;
  TestTensor &x_c = ref.x, &w_c = ref.w, &tg_c = ref.tg, &loss_c = ref.loss, &lse_c = ref.lse, &dloss_c = ref.dloss,
             &dx_c = ref.dx, &dw_c = ref.dw;
  cpu.classifier_fwd(cpu_ws, loss_c.t, lse_c.t, x_c.t, w_c.t, tg_c.t);
  dw_c.fill(cpu_dev, std::vector<float>(size_t(c.V) * c.C, 0.0f));
  cpu.classifier_bwd(cpu_ws, dx_c.t, dw_c.t, dloss_c.t, x_c.t, w_c.t, tg_c.t, lse_c.t);
  double g2 = 0;
  for (float v : dw_c.read(cpu_dev)) g2 += double(v) * v;
  const float g_rms = static_cast<float>(std::sqrt(g2 / (double(c.V) * c.C)));
  const std::vector<float> dw0 = test::normal_vec(rng, size_t(c.V) * c.C, g_rms);
  dw_c.fill(cpu_dev, dw0);
  cpu.classifier_bwd(cpu_ws, dx_c.t, dw_c.t, dloss_c.t, x_c.t, w_c.t, tg_c.t, lse_c.t);
  const std::vector<float> loss_ref = loss_c.read(cpu_dev), lse_ref = lse_c.read(cpu_dev),
                           dx_ref = dx_c.read(cpu_dev), dw_ref = dw_c.read(cpu_dev);

  // GPU.
  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace, size_t{1} << 20);
  TestTensor x(dev, st, Shape{c.N, c.C}), w(dev, st, Shape{c.V, c.C}), tgt(dev, DType::i32, Shape{c.N}),
      loss(dev, DType::f32, Shape{c.N}), lse(dev, DType::f32, Shape{c.N}), dloss(dev, DType::f32, Shape{c.N}),
      dx(dev, DType::f32, Shape{c.N, c.C}), dw(dev, DType::f32, Shape{c.V, c.C});
  x.fill(dev, x_h);
  w.fill(dev, w_h);
  tgt.fill_i32(dev, tg);
  dloss.fill(dev, dloss_h);
  dw.fill(dev, dw0);
  const GpuBlas gb(dev);
  cudaStream_t stream = gb.stream;
  const ClassifierBlas blas = gb.blas();
  // The launcher rounds rows per chunk down to a multiple of 8 (at least 8).
  const size_t chunk = c.rows_per_chunk == 0 ? kClassifierChunkBytes
                                             : size_t(c.rows_per_chunk) * c.V * (st == DType::f32 ? 4 : 6);

  loss.poison();
  lse.poison();
  dx.poison();
  ZT_TEST_CUDA(cudaDeviceSynchronize());
  classifier_fwd_cuda(ws, loss.t, lse.t, x.t, w.t, tgt.t, blas, stream, chunk);
  // The backward takes the CPU's lse so that it is judged on its own.
  TestTensor lse_in(dev, DType::f32, Shape{c.N});
  lse_in.fill(dev, lse_ref);
  classifier_bwd_cuda(ws, dx.t, dw.t, dloss.t, x.t, w.t, tgt.t, lse_in.t, blas, stream, chunk);
  ZT_TEST_CUDA(cudaStreamSynchronize(stream));
  const std::vector<float> loss_g = loss.read(dev), lse_g = lse.read(dev), dx_g = dx.read(dev),
                           dw_g = dw.read(dev);
  EXPECT_EQ(test::count_nonfinite(lse_g), 0);
  expect_finite_and_ignored_rows_zero(loss_g, dx_g, dw_g, tg);
  const double e_loss = test::rel_err(loss_g, loss_ref), e_lse = test::rel_err(lse_g, lse_ref),
               e_dx = test::rel_err(dx_g, dx_ref), e_dw = dw_gradient_error(dw_g, dw_ref, dw0);
  EXPECT_LE(e_loss, 1e-5);
  EXPECT_LE(e_lse, 1e-5);
  EXPECT_LE(e_dx, grad_tol(st));
  EXPECT_LE(e_dw, grad_tol(st));
  std::printf("[ errors   ] %s N=%d C=%d V=%d chunk=%d: loss %.2e lse %.2e dx %.2e dw %.2e\n", dtype_name(st), c.N,
              c.C, c.V, c.rows_per_chunk, e_loss, e_lse, e_dx, e_dw);
}

// The one pass (classifier_fwd_bwd_cuda, [Note: classifier in one pass]) on
// the same cases, against the CPU's forward then backward. With f32 logits
// the bounds are those above. With 16-bit logits (the storage dtype) each
// logit carries a rounding error of up to u/2 of its size (u = 2^-8 bf16,
// 2^-11 f16), so the loss (lse - logit of the target, logits of a few units
// here) moves by about u/2 |logit|, i.e. ~1e-3 (bf16) relative to a loss of
// ~8, and the softmax's probabilities by the same relative amount: bounds
// bf16 1e-2 loss / 5e-2 gradients, f16 2e-3 / 1e-2.
class ClassifierOnePass : public ::testing::TestWithParam<std::tuple<DType, bool, ClsCase>> {};

TEST_P(ClassifierOnePass, MatchesCpuForwardThenBackward) {
  ZT_SKIP_WITHOUT_GPU();
  const DType st = std::get<0>(GetParam());
  const bool logits16 = std::get<1>(GetParam());
  const ClsCase c = std::get<2>(GetParam());
  if (logits16 && st == DType::f32) GTEST_SKIP() << "f32 storage has f32 logits";
  std::mt19937_64 rng(test::test_seed() ^ (uint64_t(c.N) << 40 | uint64_t(c.V) << 8 | uint64_t(c.C)) ^
                      static_cast<uint64_t>(st) << 56 ^ 0x5eed);
  const ClsInputs in(rng, c, st);
  const std::vector<int32_t>& tg = in.tg;
  CpuRef ref(in, c, st);
  // dw starts non-zero, so that overwriting instead of accumulating fails.
  const std::vector<float> dw0 = test::normal_vec(rng, size_t(c.V) * c.C, 1e-3f);
  ref.dw.fill(ref.dev, dw0);
  ref.cpu.classifier_fwd(ref.ws, ref.loss.t, ref.lse.t, ref.x.t, ref.w.t, ref.tg.t);
  ref.cpu.classifier_bwd(ref.ws, ref.dx.t, ref.dw.t, ref.dloss.t, ref.x.t, ref.w.t, ref.tg.t, ref.lse.t);
  const std::vector<float> loss_ref = ref.loss.read(ref.dev), dx_ref = ref.dx.read(ref.dev),
                           dw_ref = ref.dw.read(ref.dev);

  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace, size_t{1} << 20);
  TestTensor x(dev, st, Shape{c.N, c.C}), w(dev, st, Shape{c.V, c.C}), tgt(dev, DType::i32, Shape{c.N}),
      loss(dev, DType::f32, Shape{c.N}), dloss(dev, DType::f32, Shape{c.N}), dx(dev, DType::f32, Shape{c.N, c.C}),
      dw(dev, DType::f32, Shape{c.V, c.C});
  x.fill(dev, in.x);
  w.fill(dev, in.w);
  tgt.fill_i32(dev, tg);
  dloss.fill(dev, in.dloss);
  dw.fill(dev, dw0);
  const GpuBlas gb(dev);
  cudaStream_t stream = gb.stream;
  const ClassifierBlas blas = gb.blas();
  const DType ldt = logits16 ? st : DType::f32;
  const size_t vp = (size_t(c.V) + 7) / 8 * 8;
  const size_t chunk = c.rows_per_chunk == 0 ? kClassifierChunkBytes : size_t(c.rows_per_chunk) * vp * dtype_size(ldt);
  loss.poison();
  dx.poison();
  ZT_TEST_CUDA(cudaDeviceSynchronize());
  classifier_fwd_bwd_cuda(ws, loss.t, dx.t, dw.t, dloss.t, x.t, w.t, tgt.t, blas, stream, chunk, ldt);
  ZT_TEST_CUDA(cudaStreamSynchronize(stream));
  const std::vector<float> loss_g = loss.read(dev), dx_g = dx.read(dev), dw_g = dw.read(dev);
  expect_finite_and_ignored_rows_zero(loss_g, dx_g, dw_g, tg);
  const double e_loss = test::rel_err(loss_g, loss_ref), e_dx = test::rel_err(dx_g, dx_ref),
               e_dw = dw_gradient_error(dw_g, dw_ref, dw0);
  const double tl = !logits16 ? 1e-5 : st == DType::bf16 ? 1e-2 : 2e-3;
  const double tg_ = !logits16 ? grad_tol(st) : st == DType::bf16 ? 5e-2 : 1e-2;
  EXPECT_LE(e_loss, tl);
  EXPECT_LE(e_dx, tg_);
  EXPECT_LE(e_dw, tg_);
  std::printf("[ errors   ] one pass %s logits %s N=%d C=%d V=%d chunk=%d: loss %.2e dx %.2e dw %.2e\n",
              dtype_name(st), dtype_name(ldt), c.N, c.C, c.V, c.rows_per_chunk, e_loss, e_dx, e_dw);

  // With a plan cache the products' algorithms are chosen by timing ([Note:
  // timed algorithm choice]): the same bits at the call that chooses and at
  // the next, which uses the choice.
  const std::shared_ptr<ClassifierPlans> plans = make_classifier_plans();
  ClassifierBlas cached = blas;
  cached.plans = plans.get();
  for (int call = 0; call < 2; ++call) {
    dw.fill(dev, dw0);
    loss.poison();
    dx.poison();
    classifier_fwd_bwd_cuda(ws, loss.t, dx.t, dw.t, dloss.t, x.t, w.t, tgt.t, cached, stream, chunk, ldt);
    ZT_TEST_CUDA(cudaStreamSynchronize(stream));
    EXPECT_TRUE(same_bits(loss.read(dev), loss_g) && same_bits(dx.read(dev), dx_g) && same_bits(dw.read(dev), dw_g))
        << "call " << call << " with the plan cache gave other bits than the heuristic's algorithms";
  }
}

const ClsCase kCases[] = {
    {300, 64, 5003, 128},  // chunks of 128, 128, 44
    {300, 64, 5003, 40},   // 7 chunks of 40 and a last one of 20 (not a multiple of 8)
    {300, 64, 5003, 0},    // one chunk
    {256, 32, 2051, 64},   // chunks divide N
    {77, 40, 1001, 7},     // C not a multiple of 16; chunks of 8, the last of 5
    {5, 24, 3, 2},         // V smaller than a warp, one chunk of 5
    {40, 32, 60001, 16},   // rows too long for shared memory (120 KB at 16 bits): the one pass's other row kernel
};

std::string case_name(const ::testing::TestParamInfo<std::tuple<DType, ClsCase>>& info) {
  const ClsCase c = std::get<1>(info.param);
  return std::string(dtype_name(std::get<0>(info.param))) + "_N" + std::to_string(c.N) + "_C" +
         std::to_string(c.C) + "_V" + std::to_string(c.V) + "_R" + std::to_string(c.rows_per_chunk);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClassifierParity,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::ValuesIn(kCases)),
                         case_name);

std::string one_pass_name(const ::testing::TestParamInfo<std::tuple<DType, bool, ClsCase>>& info) {
  const ClsCase c = std::get<2>(info.param);
  return std::string(dtype_name(std::get<0>(info.param))) + (std::get<1>(info.param) ? "_L16" : "_L32") + "_N" +
         std::to_string(c.N) + "_C" + std::to_string(c.C) + "_V" + std::to_string(c.V) + "_R" +
         std::to_string(c.rows_per_chunk);
}

INSTANTIATE_TEST_SUITE_P(Shapes, ClassifierOnePass,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16, DType::f16),
                                            ::testing::Bool(), ::testing::ValuesIn(kCases)),
                         one_pass_name);

}  // namespace
}  // namespace zt
