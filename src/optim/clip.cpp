#include "optim/clip.hpp"

#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "optim/clip_math.hpp"

namespace zt {
namespace {

// Block of the deterministic sum: small enough to spread over threads, large
// enough that the vector of partials stays small (8 bytes per 16 KiB).
constexpr int64_t kSumBlock = 4096;
constexpr int64_t kParallelMin = int64_t{1} << 15;

double block_sum_squares(const float* g, int64_t n) {
  double s = 0.0;
  // The simd reduction order is fixed at compile time, so still deterministic.
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const double x = g[i];
    s += x * x;
  }
  return s;
}

}  // namespace

double sum_squares(const float* g, int64_t n) {
  ZT_CHECK(n >= 0, "negative length ", n);
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kSumBlock;
    const int64_t len = (begin + kSumBlock <= n) ? kSumBlock : n - begin;
    partial[static_cast<size_t>(b)] = block_sum_squares(g + begin, len);
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

float clip_coefficient(double global_norm, double max_norm) { return clip_coefficient_of(global_norm, max_norm); }

bool has_inf_or_nan(const float* x, int64_t n) {
  ZT_CHECK(n >= 0, "negative length ", n);
  unsigned found = 0;
#pragma omp parallel for simd schedule(static) reduction(| : found) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    found |= static_cast<unsigned>((u & 0x7f800000u) == 0x7f800000u);
  }
  return found != 0;
}

}  // namespace zt
