// Choosing a cuBLASLt algorithm by running the candidates.
//
// [Note: timed algorithm choice] cuBLASLt's heuristic ranks its algorithms
// with a model of the GPU; it runs none of them, and its first choice is not
// always the fastest for a shape and its epilogue. So a product's plan keeps
// the heuristic's candidates (up to kLtCandidates), and at the product's
// first call each candidate runs on that call's own operands (with beta != 0
// the output D is an input too: it is kept aside and put back before each
// run and at the end): those whose output differs in any bit from the
// first choice's (compared through a 64-bit hash of every byte written, the
// epilogue's aux output included) are left out, the others are timed
// (kLtTimedRuns runs each after the run that is hashed) and the fastest is
// kept for the rest of the run. Since only bit-identical candidates compete,
// the choice never changes a result, and a run's numbers do not depend on
// which one won: what differs between candidates that are kept is the tiling,
// not the order of the sums (split-K and stream-K reductions give other
// bits and are left out). The choice waits for the GPU, which a first step
// may do (docs/perf.md, "Host round trips in the step"). The device memory
// it takes (8 bytes, and D's size for beta != 0, at most kLtKeepAsideBytes)
// is allocated and freed around it, outside ztrain's allocator; where it is
// not to be had, the heuristic's choice is kept.
//
// ZTRAIN_GEMM_ALGO: unset, empty or "timed" is the above; "heuristic" keeps
// the heuristic's first choice; anything else is refused by name.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zt::cuda {

constexpr int kLtCandidates = 12;
constexpr int kLtTimedRuns = 5;

// Whether products choose their algorithm by timing (ZTRAIN_GEMM_ALGO).
bool lt_timed_choice();

// The heuristic's candidates for a product, best first, under a preference
// of at most `workspace_bytes` of workspace and the operands' alignments in
// bytes (align_cd for C and D, C being D). Empty where there is none (count
// 0, or CUBLAS_STATUS_NOT_SUPPORTED from the preference or the heuristic);
// other failures throw.
std::vector<cublasLtMatmulAlgo_t> lt_candidates(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                                cublasLtMatrixLayout_t la, cublasLtMatrixLayout_t lb,
                                                cublasLtMatrixLayout_t lc, uint64_t workspace_bytes, int align_a,
                                                int align_b, int align_cd, int max_count = kLtCandidates);

// One product as cublasLtMatmul takes it, with beta = 0 and D in place of C,
// and the bytes it writes: D's span and, for an epilogue that writes one, the
// aux output's.
struct LtCall {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  size_t d_bytes = 0;
  const void* aux_out = nullptr;
  size_t aux_bytes = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// The part of an LtCall every call of a product shares (each call sets the
// operand pointers, and the aux output where its epilogue writes one).
inline LtCall lt_shared_call(cublasLtHandle_t handle, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t la,
                             cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t ld, size_t d_bytes, void* workspace,
                             size_t workspace_bytes) {
  LtCall c;
  c.handle = handle;
  c.op = op;
  c.la = la;
  c.lb = lb;
  c.ld = ld;
  c.d_bytes = d_bytes;
  c.workspace = workspace;
  c.workspace_bytes = workspace_bytes;
  return c;
}

// What a choice found, for the log.
struct LtChoice {
  size_t index = 0;         // into the candidates
  int identical = 0;        // candidates that gave the first choice's bits (itself included)
  int differed = 0;         // candidates left out for other bits
  int failed = 0;           // candidates cuBLASLt refused to run
  float first_us = 0.0f;    // the heuristic's first choice, per run
  float chosen_us = 0.0f;   // the one kept
  bool untimed = false;     // no device memory for the comparison: the first choice kept
  std::string str() const;
};

// Runs the candidates of `call` on `stream` as [Note: timed algorithm choice]
// says and returns the chosen one; waits for the stream. D and the aux output
// hold some candidate's result afterwards: the caller then runs the product
// with the chosen algorithm. With beta != 0, D is an input as well: it is
// kept aside first (d_bytes of device memory for the choice's duration, at
// most kLtKeepAsideBytes) and put back before each run and at the end. Where
// that or the 8 bytes the comparison needs cannot be allocated (a full
// device), the heuristic's first choice is kept (`untimed`).
constexpr size_t kLtKeepAsideBytes = size_t{512} << 20;
LtChoice lt_choose(const LtCall& call, const std::vector<cublasLtMatmulAlgo_t>& candidates, float beta,
                   cudaStream_t stream);

// A product's algorithm: the heuristic's candidates and the one in use. With
// the timed choice on and more than one candidate, `run`'s first call
// chooses (lt_choose, with that call's beta) and records the choice under
// `what`; every call then runs the product with the algorithm in use. Both cuda::Matmul
// and the classifier hold their products' algorithms in one.
class LtAlgo {
 public:
  LtAlgo() = default;
  LtAlgo(std::vector<cublasLtMatmulAlgo_t> candidates, bool timed, std::string what);
  bool found() const { return !candidates_.empty(); }
  // D = A . B (+ beta D) on `call`'s operands, C being D; throws if !found().
  void run(const LtCall& call, float beta, cudaStream_t stream);

 private:
  std::vector<cublasLtMatmulAlgo_t> candidates_;
  size_t in_use_ = 0;
  bool chosen_ = true;
  std::string what_;
};

// Every choice made in this process, in order, for `--profile`'s report;
// lt_record adds one.
struct LtChoiceRecord {
  std::string what;
  LtChoice choice;
};
void lt_record(std::string what, const LtChoice& choice);
std::vector<LtChoiceRecord> lt_choices_made();

// Column-major (rows, cols; ld) span in bytes of an element of `bytes` bytes.
inline size_t lt_span_bytes(int64_t rows, int64_t cols, int64_t ld, size_t bytes) {
  return cols <= 0 || rows <= 0 ? 0 : static_cast<size_t>(ld * (cols - 1) + rows) * bytes;
}

}  // namespace zt::cuda
