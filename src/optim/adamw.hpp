// AdamW on flat fp32 shards on the CPU: OpenMP threads (contiguous parts,
// the static schedule) and vector code for the ISA picked at run time
// (AVX-512, AVX2 or the SSE2 baseline; [Note: AdamW ISA dispatch] in
// adamw.cpp), all giving the bits of the scalar adamw_element.
//
// A rank holds, per unit, a contiguous range of the unit's flat parameter
// buffer with its fp32 master weights, Adam m and v, and the gradient of the
// same range (fp32, or bf16 on the host with offload.grad_dtype). These
// functions update such a range in place; they know nothing of how the range
// was cut (ZeRO stage, DP size): the caller says which sub-ranges take weight
// decay (DecayRange).
//
// The arithmetic is [Note: AdamW formula] in adamw_math.hpp, shared with the
// GPU's adamw_update_cuda (cuda/adamw.cuh), which gives the same bits.
//
// Every element is independent, so the result is bit-identical whatever the
// thread count and however the buffer is sharded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "optim/adamw_math.hpp"

namespace zt {

// Updates param, m, v (all length n) in place from grad. `step` >= 1 is the
// bias-correction step; `grad_scale` multiplies every gradient first (the
// clipping coefficient times 1/loss_scale); `decay` turns weight decay on for
// the whole range.
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay);

// Same update, and in the same pass writes the updated parameter rounded to
// nearest even into `param_copy` (the low-precision working copy): the bits
// of from_f32<bf16/f16> (core/dtype.hpp). A thread's large part of the copy
// is written with non-temporal stores (it bypasses the cache; fenced, so
// visible to other threads and to DMA once the call returns).
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  bf16* param_copy);
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  f16* param_copy);

// A sub-range [begin, end) of a shard, in shard-local element offsets, and
// whether weight decay applies to it.
struct DecayRange {
  int64_t begin;
  int64_t end;
  bool decay;
};

// Updates one flat shard of n elements whose decay is described by `ranges`.
// The ranges must tile [0, n) exactly: sorted, contiguous, non-empty (padding
// at the end of a unit is a range with decay=false). A gap or overlap is a
// bug in the caller's shard description, so it throws rather than guessing.
// One parallel region covers all ranges. `param_copy` may be null (no copy),
// or point to n elements of the working copy (the overload picks its type).
void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, bf16* param_copy = nullptr);
void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, f16* param_copy);
// The same from bf16 gradients (offload.grad_dtype "bf16"): each one widened
// to fp32 exactly, so the bits are those of the fp32 overloads given the
// gradients' fp32 values.
void adamw_update_ranges(float* param, const bf16* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, bf16* param_copy = nullptr);
void adamw_update_ranges(float* param, const bf16* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, f16* param_copy);

// The vector ISA the CPU AdamW runs with: "avx512f" (with avx512bw and
// avx512vl), "avx2" or "sse2" (the x86-64 baseline). By default the best the
// CPU supports; the environment variable ZT_ADAMW_ISA (avx512f, avx2, sse2 or
// auto), read at the first update, picks another. Every ISA gives the same
// bits. Throws UserError if ZT_ADAMW_ISA names an unknown ISA or one the CPU
// lacks.
const char* adamw_cpu_isa();

// The ISAs this CPU can run the AdamW with, best first (always ends in "sse2").
std::vector<std::string> adamw_cpu_isas();

// Picks the ISA for all later updates: a name as for ZT_ADAMW_ISA ("auto":
// the best), or "" to go back to the start-up choice (ZT_ADAMW_ISA, read
// again, else the best). Throws UserError for an unknown ISA or one the CPU
// lacks. For tests and benchmarks; not to be called while an update runs.
void adamw_set_cpu_isa(const std::string& isa);

}  // namespace zt
