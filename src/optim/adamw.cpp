#include "optim/adamw.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.hpp"

#if defined(__x86_64__)
#define ZT_ADAMW_X86 1
#include <immintrin.h>
#endif
#include <omp.h>

// 0 writes the working copy with ordinary stores ([Note: streaming the
// working copy]), for measuring the difference.
#ifndef ZT_ADAMW_STREAM_COPY
#define ZT_ADAMW_STREAM_COPY 1
#endif

namespace zt {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr int64_t kParallelMin = int64_t{1} << 15;

// [Note: AdamW ISA dispatch] The loop below is compiled three times from one
// body: for the x86-64 baseline (SSE2), with the GCC/Clang target attribute
// for AVX2, and for AVX-512 (F+BW+VL: BW gives 512-bit vectors to the 16-bit
// working copy; without it GCC halves the vector width of the whole loop).
// The attribute changes only which instructions the vectoriser may use; the
// build's -ffp-contract=off still forbids contraction (the AVX-512 target
// could encode FMA), and the IEEE ops (add, mul, div, sqrt: all correctly
// rounded, no flush-to-zero) give the same bits in every vector width as in
// the scalar adamw_element. (A NaN result is a NaN everywhere, but which
// NaN's payload it carries depends on the operand order the compiler picks
// for each add or multiply; the GPU returns its canonical NaN anyway.) The
// division and the square root cannot become reciprocal multiplies without
// changing bits, so they bound the arithmetic: about 1-1.5 G elements/s per
// core in any vector width, above a core's share of memory bandwidth on
// servers (apps/zbench_host.cpp measures both). The f16 rounding is written
// here without branches (f32_to_f16_rne) so that it vectorises too; both
// roundings were checked against core/dtype.cpp for all 2^32 inputs on every
// ISA. The CPU's best ISA is picked at run time
// (__builtin_cpu_supports, which also checks that the OS saves the vector
// state); ZT_ADAMW_ISA or adamw_set_cpu_isa picks another for tests and
// benchmarks. A target attribute, not a translation unit per -m flag: inline
// functions of the headers (adamw_element, f32_to_bf16, std::) are then never
// emitted with AVX-512 instructions as the one out-of-line copy the linker
// keeps for every caller.
#if defined(ZT_ADAMW_X86)
#define ZT_ADAMW_TARGET_AVX2 __attribute__((target("avx2")))
#define ZT_ADAMW_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
#endif

enum Isa : int { kIsaBase = 0, kIsaAvx2 = 1, kIsaAvx512 = 2, kIsaCount = 3 };

#if defined(ZT_ADAMW_X86)
constexpr const char* kIsaNames[kIsaCount] = {"sse2", "avx2", "avx512f"};
#else
constexpr const char* kIsaNames[kIsaCount] = {"generic", "avx2", "avx512f"};
#endif

bool cpu_supports(int isa) {
  switch (isa) {
    case kIsaBase:
      return true;
#if defined(ZT_ADAMW_X86)
    case kIsaAvx2:
      return __builtin_cpu_supports("avx2");
    case kIsaAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#endif
    default:
      return false;
  }
}

int best_isa() {
  for (int isa = kIsaCount - 1; isa > kIsaBase; --isa) {
    if (cpu_supports(isa)) return isa;
  }
  return kIsaBase;
}

std::string supported_list() {
  std::string out;
  for (int isa = kIsaCount - 1; isa >= kIsaBase; --isa) {
    if (!cpu_supports(isa)) continue;
    if (!out.empty()) out += ", ";
    out += kIsaNames[isa];
  }
  return out;
}

// The ISA named `name` ("auto": the best one), or a UserError naming `what`
// (the variable or the call it came from).
int isa_from_name(const std::string& name, const char* what) {
  if (name == "auto") return best_isa();
  for (int isa = kIsaBase; isa < kIsaCount; ++isa) {
    if (name != kIsaNames[isa]) continue;
    if (!cpu_supports(isa)) {
      ZT_USER_ERROR(what, "=", name, ": this CPU lacks ", name,
                    isa == kIsaAvx512 ? " (the AVX-512 AdamW needs avx512f, avx512bw and avx512vl)" : "",
                    "; it supports ", supported_list());
    }
    return isa;
  }
  ZT_USER_ERROR(what, "=", name, ": unknown ISA; use one of avx512f, avx2, ", kIsaNames[kIsaBase],
                " or auto (this CPU supports ", supported_list(), ")");
}

// ZT_ADAMW_ISA if set and not empty, else the best ISA of this CPU.
int isa_from_env() {
  const char* env = std::getenv("ZT_ADAMW_ISA");
  if (env == nullptr || *env == '\0') return best_isa();
  return isa_from_name(env, "ZT_ADAMW_ISA");
}

// -1 until the first update (or adamw_set_cpu_isa) resolves it.
std::atomic<int> g_isa{-1};

int current_isa() {
  int isa = g_isa.load(std::memory_order_acquire);
  if (isa < 0) {
    isa = isa_from_env();
    g_isa.store(isa, std::memory_order_release);
  }
  return isa;
}

// fp32 -> f16, round to nearest even: the bits of f32_to_f16 (core/dtype.cpp)
// for every input, written without branches or variable shifts so that the
// AdamW loop still vectorises (a call to the out-of-line f32_to_f16 would keep
// the whole loop scalar). NaN becomes the quiet NaN 0x7e00 with the sign, as
// there. A half subnormal (|x| < 2^-14) is rounded by the FPU: |x| + 0.5f has
// its last bit at 2^-24, the half's subnormal step, and rounds to nearest
// even; the sum is a normal float, so even a flush-to-zero mode would not
// change it.
inline f16 f32_to_f16_rne(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  float af;
  std::memcpy(&af, &a, 4);
  const float sub_f = af + 0.5f;
  uint32_t sub_u;
  std::memcpy(&sub_u, &sub_f, 4);
  const uint32_t sub = sub_u - 0x3f000000u;  // in units of 2^-24; 0x400 if it rounds up to 2^-14
  // Normal half: rebias the exponent (127 -> 15) and round off 13 bits; a
  // carry out of the mantissa rounds into the exponent, up to infinity.
  const uint32_t norm = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // The choice by masks: GCC leaves the ternary form as control flow for the
  // SSE2 and AVX2 targets, which stops the whole loop vectorising. a is below
  // 2^31, so the signed compares are exact.
  const int32_t ai = static_cast<int32_t>(a);
  const uint32_t is_sub = 0u - static_cast<uint32_t>(ai < 0x38800000);  // below 2^-14: subnormal or zero
  const uint32_t is_big = 0u - static_cast<uint32_t>(ai >= 0x47800000);  // 2^16 and up: infinity or NaN
  const uint32_t is_nan = 0u - static_cast<uint32_t>(ai > 0x7f800000);
  const uint32_t inf_nan = 0x7c00u | (is_nan & 0x0200u);
  uint32_t h = (sub & is_sub) | (norm & ~is_sub);
  h = (inf_nan & is_big) | (h & ~is_big);
  return f16{static_cast<uint16_t>(h | sign)};
}

template <typename Copy>
inline Copy round_copy(float p) {
  if constexpr (std::is_same_v<Copy, f16>) {
    return f32_to_f16_rne(p);
  } else {
    return from_f32<Copy>(p);  // bf16: f32_to_bf16, inline and branch-free after if-conversion
  }
}

// The part of [begin, end) that this thread updates: OpenMP's static
// schedule (contiguous parts in thread order, sizes differing by at most one,
// the larger first), as libgomp cuts `omp for schedule(static)`, so that a
// caller that first-touches its buffers with that schedule finds each part on
// the thread's NUMA node. Outside a parallel region: all of it.
inline void thread_part(int64_t begin, int64_t end, int64_t* lo, int64_t* hi) {
  const int64_t threads = omp_get_num_threads();
  const int64_t id = omp_get_thread_num();
  const int64_t n = end - begin;
  const int64_t q = n / threads;
  const int64_t r = n % threads;
  *lo = begin + id * q + std::min(id, r);
  *hi = *lo + q + (id < r ? 1 : 0);
}

// A gradient element as fp32: bf16 widens exactly (its bits are the upper
// half of a float's), so an update from bf16 gradients has the bits of one
// from the same values in fp32.
inline float grad_f32(float g) { return g; }
inline float grad_f32(bf16 g) {
  const uint32_t u = static_cast<uint32_t>(g.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// n elements, one vectorised pass. Copy is void for "no working copy"; Grad
// is float or bf16 (offload.grad_dtype).
template <bool kLerpFromStart, typename Copy, typename Grad>
__attribute__((always_inline)) inline void update_elements(float* param, const Grad* grad, float* m,
                                                            float* v, Copy* param_copy, int64_t n,
                                                            const AdamWScalars& s, float decay_factor) {
  if constexpr (std::is_void_v<Copy>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      adamw_element<kLerpFromStart>(param[i], m[i], v[i], grad_f32(grad[i]), decay_factor, s);
    }
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float p = adamw_element<kLerpFromStart>(param[i], m[i], v[i], grad_f32(grad[i]), decay_factor, s);
      param_copy[i] = round_copy<Copy>(p);
    }
  }
}

// [Note: streaming the working copy] p, m and v are read before they are
// written, so their stores hit lines already in the cache; the working copy
// is only written, and an ordinary store first reads each of its lines from
// memory (write-allocate): 2 more bytes per parameter. A thread with a large
// part therefore writes the copy in blocks: the vector loop rounds a block
// into an L1-resident buffer, and non-temporal stores move it to memory
// without reading the destination. Same values, same bits; only the route.
// Measured on a 16-core Xeon host, 400M parameters: +4% parameters/s with a
// bf16 copy (3.90 against 3.74 G/s). Streaming p, m and v would not help:
// their lines are in the cache already, read for the update.
constexpr int64_t kStreamBlock = 1024;        // elements per block (2 KiB of copy)
constexpr int64_t kStreamMin = int64_t{1} << 15;  // elements per thread; fewer: ordinary stores

#if defined(ZT_ADAMW_X86) && ZT_ADAMW_STREAM_COPY
// Non-temporal copy of `lines` 64-byte lines, both pointers 64-byte aligned.
void stream_lines_sse2(void* dst, const void* src, int64_t lines) {
  auto* d = static_cast<__m128i*>(dst);
  const auto* s = static_cast<const __m128i*>(src);
  for (int64_t i = 0; i < 4 * lines; ++i) _mm_stream_si128(d + i, _mm_load_si128(s + i));
}
ZT_ADAMW_TARGET_AVX2 void stream_lines_avx2(void* dst, const void* src, int64_t lines) {
  auto* d = static_cast<__m256i*>(dst);
  const auto* s = static_cast<const __m256i*>(src);
  for (int64_t i = 0; i < 2 * lines; ++i) _mm256_stream_si256(d + i, _mm256_load_si256(s + i));
}
ZT_ADAMW_TARGET_AVX512 void stream_lines_avx512(void* dst, const void* src, int64_t lines) {
  auto* d = static_cast<__m512i*>(dst);
  const auto* s = static_cast<const __m512i*>(src);
  for (int64_t i = 0; i < lines; ++i) _mm512_stream_si512(d + i, _mm512_load_si512(s + i));
}
#endif

// Elements [begin, end), shared among the threads of the enclosing parallel
// region (or run by one thread when there is none) without a barrier.
// Always inlined into the per-ISA functions below, which vectorise it.
template <int kIsa, bool kLerpFromStart, typename Copy, typename Grad>
__attribute__((always_inline)) inline void adamw_loop_body(float* param, const void* grad_in, float* m,
                                                            float* v, int64_t begin, int64_t end,
                                                            const AdamWScalars& scalars, bool decay,
                                                            void* copy) {
  const Grad* const grad = static_cast<const Grad*>(grad_in);
  // A local copy: no store in the loop can alias it, so its fields stay in
  // registers.
  const AdamWScalars s = scalars;
  const float decay_factor = decay ? s.decay_factor : 1.0f;
  int64_t lo = 0;
  int64_t hi = 0;
  thread_part(begin, end, &lo, &hi);
  Copy* const param_copy = static_cast<Copy*>(copy);
  auto run = [&](int64_t from, int64_t to, Copy* dst) {
    update_elements<kLerpFromStart, Copy, Grad>(param + from, grad + from, m + from, v + from, dst, to - from, s,
                                          decay_factor);
  };
#if defined(ZT_ADAMW_X86) && ZT_ADAMW_STREAM_COPY
  if constexpr (!std::is_void_v<Copy>) {
    if (hi - lo >= kStreamMin) {
      // Up to the first 64-byte boundary of the copy, ordinary stores.
      const auto addr = reinterpret_cast<uintptr_t>(param_copy + lo);
      int64_t i = lo + static_cast<int64_t>((64 - addr % 64) % 64 / sizeof(Copy));
      run(lo, i, param_copy + lo);
      alignas(64) Copy block[kStreamBlock];
      constexpr int64_t kLines = kStreamBlock * static_cast<int64_t>(sizeof(Copy)) / 64;
      for (; i + kStreamBlock <= hi; i += kStreamBlock) {
        run(i, i + kStreamBlock, block);
        if constexpr (kIsa == kIsaAvx512) {
          stream_lines_avx512(param_copy + i, block, kLines);
        } else if constexpr (kIsa == kIsaAvx2) {
          stream_lines_avx2(param_copy + i, block, kLines);
        } else {
          stream_lines_sse2(param_copy + i, block, kLines);
        }
      }
      run(i, hi, param_copy + i);
      _mm_sfence();  // order the streamed stores before whatever follows the update
      return;
    }
  }
#endif
  if constexpr (std::is_void_v<Copy>) {
    run(lo, hi, nullptr);
  } else {
    run(lo, hi, param_copy + lo);
  }
}

using LoopFn = void (*)(float*, const void*, float*, float*, int64_t, int64_t, const AdamWScalars&,
                        bool, void*);

template <bool kLerpFromStart, typename Copy, typename Grad>
void loop_base(float* param, const void* grad, float* m, float* v, int64_t begin, int64_t end,
               const AdamWScalars& s, bool decay, void* copy) {
  adamw_loop_body<kIsaBase, kLerpFromStart, Copy, Grad>(param, grad, m, v, begin, end, s, decay, copy);
}

#if defined(ZT_ADAMW_X86)
template <bool kLerpFromStart, typename Copy, typename Grad>
ZT_ADAMW_TARGET_AVX2 void loop_avx2(float* param, const void* grad, float* m, float* v,
                                    int64_t begin, int64_t end, const AdamWScalars& s, bool decay,
                                    void* copy) {
  adamw_loop_body<kIsaAvx2, kLerpFromStart, Copy, Grad>(param, grad, m, v, begin, end, s, decay, copy);
}

template <bool kLerpFromStart, typename Copy, typename Grad>
ZT_ADAMW_TARGET_AVX512 void loop_avx512(float* param, const void* grad, float* m, float* v,
                                        int64_t begin, int64_t end, const AdamWScalars& s,
                                        bool decay, void* copy) {
  adamw_loop_body<kIsaAvx512, kLerpFromStart, Copy, Grad>(param, grad, m, v, begin, end, s, decay, copy);
}
#endif

// The working copy's type as an index: 0 none, 1 bf16, 2 f16.
template <typename Copy>
constexpr int copy_index() {
  if constexpr (std::is_same_v<Copy, bf16>) {
    return 1;
  } else if constexpr (std::is_same_v<Copy, f16>) {
    return 2;
  } else {
    return 0;
  }
}

// kLoops[isa][lerp_from_start][grad is bf16][copy_index]
#define ZT_ADAMW_LOOPS_G(fn, lerp, G) \
  { fn<lerp, void, G>, fn<lerp, bf16, G>, fn<lerp, f16, G> }
#define ZT_ADAMW_LOOPS(fn)                                                                    \
  {                                                                                           \
    {ZT_ADAMW_LOOPS_G(fn, false, float), ZT_ADAMW_LOOPS_G(fn, false, bf16)}, {                \
      ZT_ADAMW_LOOPS_G(fn, true, float), ZT_ADAMW_LOOPS_G(fn, true, bf16)                     \
    }                                                                                         \
  }
constexpr LoopFn kLoops[kIsaCount][2][2][3] = {
    ZT_ADAMW_LOOPS(loop_base),
#if defined(ZT_ADAMW_X86)
    ZT_ADAMW_LOOPS(loop_avx2),
    ZT_ADAMW_LOOPS(loop_avx512),
#else
    ZT_ADAMW_LOOPS(loop_base),
    ZT_ADAMW_LOOPS(loop_base),
#endif
};
#undef ZT_ADAMW_LOOPS
#undef ZT_ADAMW_LOOPS_G

template <typename Copy, typename Grad = float>
LoopFn pick_loop(const AdamWScalars& s) {
  return kLoops[current_isa()][s.lerp_from_start ? 1 : 0][std::is_same_v<Grad, bf16> ? 1 : 0][copy_index<Copy>()];
}

template <typename Copy>
void update_one(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                Copy* param_copy) {
  ZT_CHECK(n >= 0, "negative length ", n);
  const AdamWScalars s = adamw_scalars(hp, step, grad_scale);
  const LoopFn loop = pick_loop<Copy>(s);
#pragma omp parallel if (n >= kParallelMin)
  loop(param, grad, m, v, 0, n, s, decay, param_copy);
}

template <typename Copy, typename Grad>
void update_ranges(float* param, const Grad* grad, float* m, float* v, int64_t n,
                   const std::vector<DecayRange>& ranges, const AdamWParams& hp, int64_t step,
                   float grad_scale, Copy* param_copy) {
  int64_t expect = 0;
  for (const DecayRange& r : ranges) {
    ZT_CHECK(r.begin == expect && r.end > r.begin, "decay ranges must tile the shard [0, ", n,
             "): range [", r.begin, ", ", r.end, ") where ", expect, " was expected");
    expect = r.end;
  }
  ZT_CHECK(expect == n, "decay ranges cover [0, ", expect, ") of a shard of ", n, " elements");
  const AdamWScalars s = adamw_scalars(hp, step, grad_scale);
  const LoopFn loop = pick_loop<Copy, Grad>(s);
  // One team for all ranges; `nowait` lets threads move to the next range
  // without a barrier, which is safe because the ranges are disjoint.
#pragma omp parallel if (n >= kParallelMin)
  for (const DecayRange& r : ranges) {
    loop(param, grad, m, v, r.begin, r.end, s, r.decay, param_copy);
  }
}

}  // namespace

const char* adamw_cpu_isa() { return kIsaNames[current_isa()]; }

std::vector<std::string> adamw_cpu_isas() {
  std::vector<std::string> out;
  for (int isa = kIsaCount - 1; isa >= kIsaBase; --isa) {
    if (cpu_supports(isa)) out.emplace_back(kIsaNames[isa]);
  }
  return out;
}

void adamw_set_cpu_isa(const std::string& isa) {
  g_isa.store(isa.empty() ? isa_from_env() : isa_from_name(isa, "adamw_set_cpu_isa"),
              std::memory_order_release);
}

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay) {
  update_one<void>(param, grad, m, v, n, hp, step, grad_scale, decay, nullptr);
}

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  bf16* param_copy) {
  if (param_copy == nullptr) return adamw_update(param, grad, m, v, n, hp, step, grad_scale, decay);
  update_one(param, grad, m, v, n, hp, step, grad_scale, decay, param_copy);
}

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n,
                  const AdamWParams& hp, int64_t step, float grad_scale, bool decay,
                  f16* param_copy) {
  if (param_copy == nullptr) return adamw_update(param, grad, m, v, n, hp, step, grad_scale, decay);
  update_one(param, grad, m, v, n, hp, step, grad_scale, decay, param_copy);
}

namespace {
template <typename Grad, typename Copy>
void ranges_with_copy(float* param, const Grad* grad, float* m, float* v, int64_t n,
                      const std::vector<DecayRange>& ranges, const AdamWParams& hp, int64_t step,
                      float grad_scale, Copy* param_copy) {
  if (param_copy == nullptr) {
    update_ranges<void>(param, grad, m, v, n, ranges, hp, step, grad_scale, nullptr);
  } else {
    update_ranges(param, grad, m, v, n, ranges, hp, step, grad_scale, param_copy);
  }
}
}  // namespace

void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, bf16* param_copy) {
  ranges_with_copy(param, grad, m, v, n, ranges, hp, step, grad_scale, param_copy);
}

void adamw_update_ranges(float* param, const float* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, f16* param_copy) {
  ranges_with_copy(param, grad, m, v, n, ranges, hp, step, grad_scale, param_copy);
}

void adamw_update_ranges(float* param, const bf16* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, bf16* param_copy) {
  ranges_with_copy(param, grad, m, v, n, ranges, hp, step, grad_scale, param_copy);
}

void adamw_update_ranges(float* param, const bf16* grad, float* m, float* v, int64_t n,
                         const std::vector<DecayRange>& ranges, const AdamWParams& hp,
                         int64_t step, float grad_scale, f16* param_copy) {
  ranges_with_copy(param, grad, m, v, n, ranges, hp, step, grad_scale, param_copy);
}

}  // namespace zt
