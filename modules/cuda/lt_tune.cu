// [Note: timed algorithm choice] in lt_tune.cuh.
#include "modules/cuda/lt_tune.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "core/error.hpp"

namespace zt::cuda {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // a 64-bit finaliser (splitmix64's)
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// out += sum over 16-bit words i of mix(i, word i): every value at every
// position moves the sum, and the sum of integers mod 2^64 is independent of
// the order the blocks add in.
__global__ void hash_kernel(const uint16_t* __restrict__ p, int64_t n, uint64_t salt,
                            unsigned long long* __restrict__ out) {
  uint64_t h = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    h += mix64((static_cast<uint64_t>(i) << 16) ^ p[i] ^ salt);
  }
  for (int o = 16; o > 0; o >>= 1) h += __shfl_down_sync(0xffffffffu, h, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, static_cast<unsigned long long>(h));
}

void hash_into(const void* p, size_t bytes, uint64_t salt, unsigned long long* out, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(bytes / 2);
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 1024));
  hash_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint16_t*>(p), n, salt, out);
  ZT_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool lt_timed_choice() {
  const char* env = std::getenv("ZTRAIN_GEMM_ALGO");
  const std::string v = env == nullptr ? "" : env;
  if (v.empty() || v == "timed") return true;
  if (v == "heuristic") return false;
  ZT_USER_ERROR("ZTRAIN_GEMM_ALGO=", v, ": unknown choice of cuBLASLt algorithm; use timed or heuristic");
}

std::vector<cublasLtMatmulAlgo_t> lt_candidates(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                                cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                cublasLtMatrixLayout_t lc, uint64_t workspace_bytes, int align_a,
                                                int align_b, int align_cd, int max_count) {
  cublasLtMatmulPreference_t pref = nullptr;
  ZT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint32_t align[4] = {static_cast<uint32_t>(align_a), static_cast<uint32_t>(align_b),
                             static_cast<uint32_t>(align_cd), static_cast<uint32_t>(align_cd)};
  const cublasLtMatmulPreferenceAttributes_t which[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes, sizeof workspace_bytes);
  for (int i = 0; i < 4 && st == CUBLAS_STATUS_SUCCESS; ++i)
    st = cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[i], sizeof align[i]);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(max_count));
  int count = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle, op, la, lb, lc, lc, pref, max_count, results.data(), &count);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return {};
  ZT_CUBLAS_CHECK(st);
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < count; ++i) {
    if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS) algos.push_back(results[static_cast<size_t>(i)].algo);
  }
  return algos;
}

namespace {
std::mutex g_choices_mu;
std::vector<LtChoiceRecord>& g_choices() {
  static std::vector<LtChoiceRecord> v;
  return v;
}
}  // namespace

void lt_record(std::string what, const LtChoice& choice) {
  const std::lock_guard<std::mutex> lock(g_choices_mu);
  g_choices().push_back({std::move(what), choice});
}

std::vector<LtChoiceRecord> lt_choices_made() {
  const std::lock_guard<std::mutex> lock(g_choices_mu);
  return g_choices();
}

std::string LtChoice::str() const {
  if (untimed) return "the heuristic's first choice kept: no device memory for the comparison (or D over the 512 MiB kept aside)";
  char buf[160];
  std::snprintf(buf, sizeof buf, "candidate %zu of %d: %.1f us against the heuristic's %.1f (%d bit-identical, %d other bits, %d refused)",
                index, identical + differed + failed, chosen_us, first_us, identical, differed, failed);
  return buf;
}

namespace {
// The comparison's device word and timing events, released on every exit.
struct ChooseScratch {
  unsigned long long* hash_d = nullptr;
  void* d_saved = nullptr;  // beta != 0: the call's D
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  ~ChooseScratch() {
    if (t1) (void)cudaEventDestroy(t1);
    if (t0) (void)cudaEventDestroy(t0);
    if (d_saved) (void)cudaFree(d_saved);
    if (hash_d) (void)cudaFree(hash_d);
  }
};
}  // namespace

LtChoice lt_choose(const LtCall& c, const std::vector<cublasLtMatmulAlgo_t>& candidates, float beta,
                   cudaStream_t stream) {
  LtChoice choice;
  if (candidates.empty()) return choice;
  ChooseScratch s;
  auto no_memory = [&]() {
    (void)cudaGetLastError();  // out of memory is not sticky: clear it and keep the first choice
    choice.untimed = true;
    return choice;
  };
  if (beta != 0.0f && c.d_bytes > kLtKeepAsideBytes) return no_memory();
  if (cudaMalloc(&s.hash_d, sizeof(unsigned long long)) != cudaSuccess) {
    s.hash_d = nullptr;
    return no_memory();
  }
  if (beta != 0.0f) {  // D is an input too: every run starts from the call's D, which the end puts back
    if (cudaMalloc(&s.d_saved, c.d_bytes) != cudaSuccess) {
      s.d_saved = nullptr;
      return no_memory();
    }
    ZT_CUDA_CHECK(cudaMemcpyAsync(s.d_saved, c.d, c.d_bytes, cudaMemcpyDeviceToDevice, stream));
  }
  auto restore = [&]() {
    if (s.d_saved != nullptr) ZT_CUDA_CHECK(cudaMemcpyAsync(c.d, s.d_saved, c.d_bytes, cudaMemcpyDeviceToDevice, stream));
  };
  ZT_CUDA_CHECK(cudaEventCreate(&s.t0));
  ZT_CUDA_CHECK(cudaEventCreate(&s.t1));
  const float alpha = 1.0f;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(c.handle, c.op, &alpha, c.a, c.la, c.b, c.lb, &beta, c.d, c.ld, c.d, c.ld, &algo,
                          c.workspace, c.workspace_bytes, stream);
  };
  auto hash = [&]() {
    ZT_CUDA_CHECK(cudaMemsetAsync(s.hash_d, 0, sizeof(unsigned long long), stream));
    hash_into(c.d, c.d_bytes, 0, s.hash_d, stream);
    if (c.aux_out != nullptr) hash_into(c.aux_out, c.aux_bytes, 0x5bd1e995ull, s.hash_d, stream);
    unsigned long long h = 0;
    ZT_CUDA_CHECK(cudaMemcpyAsync(&h, s.hash_d, sizeof h, cudaMemcpyDeviceToHost, stream));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return h;
  };
  auto time_us = [&](const cublasLtMatmulAlgo_t& algo) {
    ZT_CUDA_CHECK(cudaEventRecord(s.t0, stream));
    for (int r = 0; r < kLtTimedRuns; ++r) ZT_CUBLAS_CHECK(run(algo));
    ZT_CUDA_CHECK(cudaEventRecord(s.t1, stream));
    ZT_CUDA_CHECK(cudaEventSynchronize(s.t1));
    float ms = 0.0f;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, s.t0, s.t1));
    return 1000.0f * ms / kLtTimedRuns;
  };
  ZT_CUBLAS_CHECK(run(candidates[0]));
  const unsigned long long reference = hash();
  restore();
  choice.identical = 1;
  choice.first_us = time_us(candidates[0]);
  choice.chosen_us = choice.first_us;
  for (size_t i = 1; i < candidates.size(); ++i) {
    restore();
    if (run(candidates[i]) != CUBLAS_STATUS_SUCCESS) {
      ++choice.failed;
      (void)cudaGetLastError();
      continue;
    }
    if (hash() != reference) {
      ++choice.differed;
      continue;
    }
    ++choice.identical;
    const float us = time_us(candidates[i]);
    if (us < choice.chosen_us) {
      choice.chosen_us = us;
      choice.index = i;
    }
  }
  restore();
  ZT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return choice;
}

LtAlgo::LtAlgo(std::vector<cublasLtMatmulAlgo_t> candidates, bool timed, std::string what)
    : candidates_(std::move(candidates)), chosen_(!timed || candidates_.size() <= 1), what_(std::move(what)) {}

void LtAlgo::run(const LtCall& c, float beta, cudaStream_t stream) {
  ZT_CHECK(found(), "cuBLASLt: ", what_, " has no algorithm");
  if (!chosen_) {
    const LtChoice choice = lt_choose(c, candidates_, beta, stream);
    in_use_ = choice.index;
    chosen_ = true;
    lt_record(what_, choice);
  }
  const float alpha = 1.0f;
  ZT_CUBLAS_CHECK(cublasLtMatmul(c.handle, c.op, &alpha, c.a, c.la, c.b, c.lb, &beta, c.d, c.ld, c.d, c.ld,
                                 &candidates_[in_use_], c.workspace, c.workspace_bytes, stream));
}

}  // namespace zt::cuda
