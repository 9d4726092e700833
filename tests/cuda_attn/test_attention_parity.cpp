// Parity of the CUDA attention (modules/cuda/attention.cuh) with CpuKernels:
// fresh random inputs each run (seed printed), outputs poisoned with NaN
// before each call so that an element left unwritten fails, several shapes
// (T not a multiple of the 64-row tiles, head sizes 16..128 including padded
// and unaligned ones, B * n_head above the H200's 132 SMs), in f32, bf16 and
// f16 storage. The backward gets the CPU's forward outputs, so each
// direction is judged on its own, and must be bitwise reproducible (but
// for cuDNN's non-deterministic backward, ZTRAIN_ATTENTION=cudnn-nondeterministic).
// 16-bit cases run on both paths ([Note: two attention paths] in
// modules/cuda/attention_cudnn.cuh), chosen with ZTRAIN_ATTENTION: flash
// must never reach cuDNN; cudnn must reach it for head sizes 64 and 128
// without document masking (T > 1), and never with document masking. The
// cuDNN backward rounds its gradients to the storage dtype once more (u/2
// in the norm: within the bounds below).
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

#include <algorithm>
#include <string>
#include <tuple>

#include "modules/cpu_kernels.hpp"
#include "modules/cuda/attention.cuh"
#include "modules/cuda/attention_cudnn.cuh"
#include "cuda_test_util.hpp"

namespace zt {
namespace {

using test::TestTensor;

struct AttnCase {
  int B, T, NH, hs;
};

// Which attention path a parameterised case asks for.
// cudnn_nd: cuDNN with its non-deterministic backward
// (ZTRAIN_ATTENTION=cudnn-nondeterministic), held to the same tolerances.
enum class Path { flash, cudnn, cudnn_nd };
const char* path_name(Path p) {
  return p == Path::flash ? "flash" : p == Path::cudnn ? "cudnn" : "cudnn-nondeterministic";
}
// The path in a test's name (letters, digits and underscores only).
const char* path_id(Path p) { return p == Path::cudnn_nd ? "cudnn_nd" : path_name(p); }

// Skips a cudnn case in a build without cuDNN; else selects the path.
#define ZT_SELECT_PATH(path, guard)                                                     \
  if ((path) != Path::flash && !attention_cudnn_compiled())                             \
    GTEST_SKIP() << "this build has no cuDNN";                                          \
  const test::ScopedAttentionPath guard(path_name(path))

// Whether a call must run on cuDNN: 16-bit, no documents, T > 1, hs 64 or
// 128 (other multiples of 8 may run there too; that is cuDNN's choice).
bool must_use_cudnn(Path p, DType st, int T, int hs, bool docs) {
  return p != Path::flash && st != DType::f32 && !docs && T > 1 && (hs == 64 || hs == 128);
}

// Checks the number of cuDNN calls since `before` for one call on path p.
void expect_path(Path p, bool must_cudnn, uint64_t before, const char* what) {
  const uint64_t n = attention_cudnn_calls() - before;
  if (p == Path::flash) {
    EXPECT_EQ(n, 0u) << what << ": ZTRAIN_ATTENTION=flash reached cuDNN";
  }
  if (must_cudnn) {
    EXPECT_EQ(n, 1u) << what << ": did not run on cuDNN";
  }
}

double out_tol(DType t) { return t == DType::f32 ? 1e-5 : t == DType::bf16 ? 2e-2 : 5e-3; }
double lse_tol(DType t) { return t == DType::f32 ? 1e-5 : 1e-4; }

class AttentionParity : public ::testing::TestWithParam<std::tuple<DType, AttnCase, Path>> {};

TEST_P(AttentionParity, ForwardAndBackwardMatchCpu) {
  ZT_SKIP_WITHOUT_GPU();
  const DType st = std::get<0>(GetParam());
  const AttnCase c = std::get<1>(GetParam());
  const Path path = std::get<2>(GetParam());
  ZT_SELECT_PATH(path, select);
  const bool must_cudnn = must_use_cudnn(path, st, c.T, c.hs, false);
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
  uint64_t calls = attention_cudnn_calls();
  attention_fwd_cuda(out.t, lse.t, qkv.t, c.NH, Tensor(), ws, stream);
  ZT_TEST_CUDA(cudaStreamSynchronize(stream));
  const bool fwd_cudnn = attention_cudnn_calls() != calls;
  expect_path(path, must_cudnn, calls, "forward");
  const std::vector<float> out_g = out.read(dev), lse_g = lse.read(dev);
  EXPECT_EQ(test::count_nonfinite(out_g), 0) << "out has unwritten or non-finite elements";
  EXPECT_EQ(test::count_nonfinite(lse_g), 0) << "lse has unwritten or non-finite elements";
  const double e_out = test::rel_err(out_g, out_ref), e_lse = test::rel_err(lse_g, lse_ref);
  EXPECT_LE(e_out, out_tol(st));
  EXPECT_LE(e_lse, lse_tol(st));

  // Backward on the CPU's forward results, twice: same bits both times
  // (except on cuDNN's non-deterministic backward).
  out.fill(dev, out_ref);
  lse.fill(dev, lse_ref);
  std::vector<float> dqkv_g[2];
  for (auto& r : dqkv_g) {
    dqkv.poison();
    ZT_TEST_CUDA(cudaDeviceSynchronize());
    calls = attention_cudnn_calls();
    attention_bwd_cuda(dqkv.t, dout.t, qkv.t, out.t, lse.t, c.NH, Tensor(), ws, stream);
    ZT_TEST_CUDA(cudaStreamSynchronize(stream));
    expect_path(path, must_cudnn, calls, "backward");
    r = dqkv.read(dev);
  }
  EXPECT_EQ(test::count_nonfinite(dqkv_g[0]), 0) << "dqkv has unwritten or non-finite elements";
  if (path != Path::cudnn_nd) {
    EXPECT_TRUE(dqkv_g[0] == dqkv_g[1]) << "backward is not bitwise reproducible";
  }
  double e_part[3];
  for (int p = 0; p < 3; ++p) {
    e_part[p] = test::rel_err_if(dqkv_g[0], dqkv_ref, [&](size_t i) { return static_cast<int64_t>(i) % (3 * C) / C == p; });
    EXPECT_LE(e_part[p], out_tol(st)) << "d" << "qkv"[p];
  }
  std::printf("[ errors   ] %s B=%d T=%d NH=%d hs=%d %s (ran %s): out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n",
              dtype_name(st), c.B, c.T, c.NH, c.hs, path_name(path), fwd_cudnn ? "cudnn" : "flash", e_out, e_lse,
              e_part[0], e_part[1], e_part[2]);
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

std::string case_name(const ::testing::TestParamInfo<std::tuple<DType, AttnCase, Path>>& info) {
  const AttnCase c = std::get<1>(info.param);
  return std::string(dtype_name(std::get<0>(info.param))) + "_B" + std::to_string(c.B) + "_T" +
         std::to_string(c.T) + "_H" + std::to_string(c.NH) + "_D" + std::to_string(c.hs) + "_" +
         path_id(std::get<2>(info.param));
}

// f32 has only the flash path; 16-bit runs both.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionParity,
                         ::testing::Combine(::testing::Values(DType::f32), ::testing::ValuesIn(kCases),
                                            ::testing::Values(Path::flash)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Shapes16, AttentionParity,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16), ::testing::ValuesIn(kCases),
                                            ::testing::Values(Path::flash, Path::cudnn, Path::cudnn_nd)),
                         case_name);

// ---- grouped-query attention and document masking ----------------------------
// The reference of a packed row is the CPU's grouped-query attention run on
// each document alone, as a sequence of its own: document masking must make
// the packed computation exactly that (attention is position-free, so the
// per-document results do not depend on where the document sits). Rows hold
// documents of random lengths, some of length 1; `docs` false runs the GQA
// kernels without doc_start against the CPU on the whole rows.
struct GqaCase {
  int B, T, NH, NKV, hs;
  bool docs;
};

class GqaParity : public ::testing::TestWithParam<std::tuple<DType, GqaCase, Path>> {};

// Slice rows [s, e) of row b of a (B, T, W) host array into a (1, e - s, W) one.
std::vector<float> slice_rows(const std::vector<float>& v, int T, int64_t W, int b, int s, int e) {
  const auto first = v.begin() + (int64_t{b} * T + s) * W;
  return std::vector<float>(first, first + int64_t{e - s} * W);
}
void put_rows(std::vector<float>& v, int T, int64_t W, int b, int s, const std::vector<float>& part) {
  std::copy(part.begin(), part.end(), v.begin() + (int64_t{b} * T + s) * W);
}

TEST_P(GqaParity, PackedDocumentsMatchCpuPerDocument) {
  ZT_SKIP_WITHOUT_GPU();
  const DType st = std::get<0>(GetParam());
  const GqaCase c = std::get<1>(GetParam());
  const Path path = std::get<2>(GetParam());
  ZT_SELECT_PATH(path, select);
  const bool must_cudnn = must_use_cudnn(path, st, c.T, c.hs, c.docs);
  const int64_t Wq = int64_t{c.NH} * c.hs, Wkv = int64_t{c.NKV} * c.hs;
  std::mt19937_64 rng(test::test_seed() ^ (uint64_t(c.T) << 24 | uint64_t(c.NH) << 16 | uint64_t(c.NKV) << 8 | c.hs) ^
                      (static_cast<uint64_t>(st) << 40) ^ (c.docs ? 0x5bd1e995ull : 0));
  const std::vector<float> q_h = test::round_to(test::normal_vec(rng, size_t(c.B) * c.T * Wq, 1.225f), st);
  const std::vector<float> k_h = test::round_to(test::normal_vec(rng, size_t(c.B) * c.T * Wkv, 1.225f), st);
  const std::vector<float> v_h = test::round_to(test::normal_vec(rng, size_t(c.B) * c.T * Wkv, 1.225f), st);
  const std::vector<float> dout_h = test::normal_vec(rng, size_t(c.B) * c.T * Wq, 1.0f);

  // Documents: [starts[b][i], starts[b][i + 1]) per row.
  std::vector<std::vector<int>> bounds(c.B);
  std::vector<int32_t> doc_start(size_t(c.B) * c.T);
  for (int b = 0; b < c.B; ++b) {
    bounds[b].push_back(0);
    while (c.docs && bounds[b].back() < c.T) {
      const int r = static_cast<int>(rng() % 8);
      const int len = r == 0 ? 1 : 1 + static_cast<int>(rng() % (b == 0 ? 150 : 40));  // long and short ones
      bounds[b].push_back(std::min(c.T, bounds[b].back() + len));
    }
    if (!c.docs) bounds[b].push_back(c.T);
    for (size_t i = 0; i + 1 < bounds[b].size(); ++i)
      for (int t = bounds[b][i]; t < bounds[b][i + 1]; ++t) doc_start[size_t(b) * c.T + t] = bounds[b][i];
  }

  // CPU reference, document by document.
  CpuDevice cpu_dev;
  Arena cpu_ws(cpu_dev, MemTag::workspace);
  CpuKernels cpu;
  std::vector<float> out_ref(q_h.size()), lse_ref(size_t(c.B) * c.NH * c.T), dq_ref(q_h.size()),
      dk_ref(k_h.size()), dv_ref(v_h.size());
  for (int b = 0; b < c.B; ++b) {
    for (size_t i = 0; i + 1 < bounds[b].size(); ++i) {
      const int s = bounds[b][i], e = bounds[b][i + 1], L = e - s;
      TestTensor q(cpu_dev, st, Shape{1, L, Wq}), k(cpu_dev, st, Shape{1, L, Wkv}), v(cpu_dev, st, Shape{1, L, Wkv}),
          out(cpu_dev, st, Shape{1, L, Wq}), lse(cpu_dev, DType::f32, Shape{1, c.NH, L}),
          dout(cpu_dev, DType::f32, Shape{1, L, Wq}), dq(cpu_dev, DType::f32, Shape{1, L, Wq}),
          dk(cpu_dev, DType::f32, Shape{1, L, Wkv}), dv(cpu_dev, DType::f32, Shape{1, L, Wkv});
      q.fill(cpu_dev, slice_rows(q_h, c.T, Wq, b, s, e));
      k.fill(cpu_dev, slice_rows(k_h, c.T, Wkv, b, s, e));
      v.fill(cpu_dev, slice_rows(v_h, c.T, Wkv, b, s, e));
      dout.fill(cpu_dev, slice_rows(dout_h, c.T, Wq, b, s, e));
      cpu.gqa_attention_fwd(cpu_ws, out.t, lse.t, q.t, k.t, v.t, c.NH, c.NKV, Tensor());
      cpu.gqa_attention_bwd(cpu_ws, dq.t, dk.t, dv.t, dout.t, q.t, k.t, v.t, out.t, lse.t, c.NH, c.NKV, Tensor());
      put_rows(out_ref, c.T, Wq, b, s, out.read(cpu_dev));
      put_rows(dq_ref, c.T, Wq, b, s, dq.read(cpu_dev));
      put_rows(dk_ref, c.T, Wkv, b, s, dk.read(cpu_dev));
      put_rows(dv_ref, c.T, Wkv, b, s, dv.read(cpu_dev));
      const std::vector<float> l = lse.read(cpu_dev);
      for (int h = 0; h < c.NH; ++h)
        for (int t = 0; t < L; ++t) lse_ref[(size_t(b) * c.NH + h) * c.T + s + t] = l[size_t(h) * L + t];
    }
  }

  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace, size_t{1} << 20);
  TestTensor q(dev, st, Shape{c.B, c.T, Wq}), k(dev, st, Shape{c.B, c.T, Wkv}), v(dev, st, Shape{c.B, c.T, Wkv}),
      out(dev, st, Shape{c.B, c.T, Wq}), lse(dev, DType::f32, Shape{c.B, c.NH, c.T}),
      dout(dev, DType::f32, Shape{c.B, c.T, Wq}), dq(dev, DType::f32, Shape{c.B, c.T, Wq}),
      dk(dev, DType::f32, Shape{c.B, c.T, Wkv}), dv(dev, DType::f32, Shape{c.B, c.T, Wkv}),
      ds(dev, DType::i32, Shape{c.B, c.T});
  q.fill(dev, q_h);
  k.fill(dev, k_h);
  v.fill(dev, v_h);
  dout.fill(dev, dout_h);
  ds.fill_i32(dev, doc_start);
  const Tensor doc = c.docs ? ds.t : Tensor();
  cudaStream_t stream = nullptr;
  ZT_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  out.poison();
  lse.poison();
  ZT_TEST_CUDA(cudaDeviceSynchronize());
  uint64_t calls = attention_cudnn_calls();
  gqa_attention_fwd_cuda(out.t, lse.t, q.t, k.t, v.t, c.NH, c.NKV, doc, ws, stream);
  ZT_TEST_CUDA(cudaStreamSynchronize(stream));
  const bool fwd_cudnn = attention_cudnn_calls() != calls;
  expect_path(path, must_cudnn, calls, "forward");
  if (c.docs) {
    EXPECT_FALSE(fwd_cudnn) << "document masking reached cuDNN";
  }
  const std::vector<float> out_g = out.read(dev), lse_g = lse.read(dev);
  EXPECT_EQ(test::count_nonfinite(out_g), 0) << "out has unwritten or non-finite elements";
  EXPECT_EQ(test::count_nonfinite(lse_g), 0) << "lse has unwritten or non-finite elements";
  const double e_out = test::rel_err(out_g, out_ref), e_lse = test::rel_err(lse_g, lse_ref);
  EXPECT_LE(e_out, out_tol(st));
  EXPECT_LE(e_lse, lse_tol(st));

  out.fill(dev, out_ref);
  lse.fill(dev, lse_ref);
  std::vector<float> g[2][3];
  for (auto& r : g) {
    dq.poison();
    dk.poison();
    dv.poison();
    ZT_TEST_CUDA(cudaDeviceSynchronize());
    calls = attention_cudnn_calls();
    gqa_attention_bwd_cuda(dq.t, dk.t, dv.t, dout.t, q.t, k.t, v.t, out.t, lse.t, c.NH, c.NKV, doc, ws, stream);
    ZT_TEST_CUDA(cudaStreamSynchronize(stream));
    expect_path(path, must_cudnn, calls, "backward");
    if (c.docs) {
      EXPECT_EQ(attention_cudnn_calls(), calls) << "document masking reached cuDNN";
    }
    r[0] = dq.read(dev);
    r[1] = dk.read(dev);
    r[2] = dv.read(dev);
  }
  const std::vector<float>* ref[3] = {&dq_ref, &dk_ref, &dv_ref};
  double e[3];
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(test::count_nonfinite(g[0][p]), 0) << "d" << "qkv"[p] << " has unwritten or non-finite elements";
    if (path != Path::cudnn_nd) {
      EXPECT_TRUE(g[0][p] == g[1][p]) << "d" << "qkv"[p] << " is not bitwise reproducible";
    }
    e[p] = test::rel_err(g[0][p], *ref[p]);
    EXPECT_LE(e[p], out_tol(st)) << "d" << "qkv"[p];
  }
  std::printf("[ errors   ] %s B=%d T=%d NH=%d NKV=%d hs=%d docs=%d %s (ran %s): out %.2e lse %.2e dq %.2e dk %.2e "
              "dv %.2e\n",
              dtype_name(st), c.B, c.T, c.NH, c.NKV, c.hs, int(c.docs), path_name(path), fwd_cudnn ? "cudnn" : "flash",
              e_out, e_lse, e[0], e[1], e[2]);
  ZT_TEST_CUDA(cudaStreamDestroy(stream));
}

const GqaCase kGqaCases[] = {
    {2, 200, 8, 2, 64, false},   // GQA 4:1, no documents
    {1, 130, 4, 1, 128, false},  // multi-query, hs 128
    {2, 300, 6, 3, 64, true},    // documents across tiles
    {3, 129, 4, 4, 32, true},    // multi-head with documents
    {2, 257, 8, 1, 128, true},   // multi-query, hs 128, documents
    {1, 77, 2, 1, 40, true},     // padded head size, T not a tile multiple
};

std::string gqa_case_name(const ::testing::TestParamInfo<std::tuple<DType, GqaCase, Path>>& info) {
  const GqaCase c = std::get<1>(info.param);
  return std::string(dtype_name(std::get<0>(info.param))) + "_B" + std::to_string(c.B) + "_T" +
         std::to_string(c.T) + "_H" + std::to_string(c.NH) + "_KV" + std::to_string(c.NKV) + "_D" +
         std::to_string(c.hs) + (c.docs ? "_docs" : "") + "_" + path_id(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Shapes, GqaParity,
                         ::testing::Combine(::testing::Values(DType::f32), ::testing::ValuesIn(kGqaCases),
                                            ::testing::Values(Path::flash)),
                         gqa_case_name);
INSTANTIATE_TEST_SUITE_P(Shapes16, GqaParity,
                         ::testing::Combine(::testing::Values(DType::bf16, DType::f16), ::testing::ValuesIn(kGqaCases),
                                            ::testing::Values(Path::flash, Path::cudnn, Path::cudnn_nd)),
                         gqa_case_name);

TEST(AttentionChecks, RejectsBadArguments) {
  ZT_SKIP_WITHOUT_GPU();
  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace, size_t{1} << 20);
  TestTensor qkv(dev, DType::bf16, Shape{1, 8, 3 * 64}), out(dev, DType::f32, Shape{1, 8, 64}),
      lse(dev, DType::f32, Shape{1, 2, 8});
  EXPECT_THROW(attention_fwd_cuda(out.t, lse.t, qkv.t, 2, Tensor(), ws, nullptr), Error);  // out dtype != qkv dtype
  TestTensor big(dev, DType::bf16, Shape{1, 8, 3 * 256}), out2(dev, DType::bf16, Shape{1, 8, 256}),
      lse2(dev, DType::f32, Shape{1, 1, 8});
  EXPECT_THROW(attention_fwd_cuda(out2.t, lse2.t, big.t, 1, Tensor(), ws, nullptr), Error);  // hs 256 > 128
}

// ZTRAIN_ATTENTION takes flash or cudnn (cudnn only where the build has
// cuDNN); anything else is refused by name, not ignored.
TEST(AttentionChecks, RejectsUnknownPath) {
  ZT_SKIP_WITHOUT_GPU();
  test::PlainCudaDevice dev;
  Arena ws(dev, MemTag::workspace, size_t{1} << 20);
  TestTensor qkv(dev, DType::bf16, Shape{1, 8, 3 * 64}), out(dev, DType::bf16, Shape{1, 8, 64}),
      lse(dev, DType::f32, Shape{1, 1, 8});
  qkv.fill(dev, std::vector<float>(size_t(qkv.t.numel()), 0.5f));
  {
    const test::ScopedAttentionPath select("flashy");
    EXPECT_THROW(attention_fwd_cuda(out.t, lse.t, qkv.t, 1, Tensor(), ws, nullptr), UserError);
  }
  {
    const test::ScopedAttentionPath select("cudnn");
    if (attention_cudnn_compiled()) {
      EXPECT_NO_THROW(attention_fwd_cuda(out.t, lse.t, qkv.t, 1, Tensor(), ws, nullptr));
    } else {
      EXPECT_THROW(attention_fwd_cuda(out.t, lse.t, qkv.t, 1, Tensor(), ws, nullptr), UserError);
    }
  }
  ZT_TEST_CUDA(cudaDeviceSynchronize());
}

}  // namespace
}  // namespace zt
