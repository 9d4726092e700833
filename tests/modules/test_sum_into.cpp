// CpuKernels::sum_into against the host loop it replaces in the trainer,
// and add_sum_squares against CpuKernels::add then sum_squares ([Note: host
// sums of squares] in modules/cpu_kernels.hpp),
// `for (float v : losses) acc += v;`, bit for bit: the loss bits of a run are
// compared exactly with a golden file, so the CPU must add in index order,
// one element at a time, straight into acc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <omp.h>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "modules/cpu_kernels.hpp"

namespace zt {
namespace {

// Per-token losses spread over many binades, so that the order of the
// additions changes the rounded sum.
std::vector<float> losses(int64_t n, uint64_t seed) {
  CounterRng rng{rng_key(seed)};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double magnitude = std::exp2(40.0 * rng.uniform(4 * i) - 20.0);  // normal() below uses 4i+2, 4i+3
    x[static_cast<size_t>(i)] = static_cast<float>(rng.normal(2 * i + 1) * magnitude);
  }
  return x;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(SumInto, MatchesTheSequentialHostLoopBitForBit) {
  CpuKernels k;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}, int64_t{1} << 20}) {
    for (double start : {0.0, 12345.678, -3.5e-7}) {
      std::vector<float> x = losses(n, static_cast<uint64_t>(n) + 11);
      double acc = start;
      k.sum_into(Tensor(x.data(), DType::f32, Shape{n}), Tensor(&acc, DType::f64, Shape{1}));
      double ref = start;
      for (float v : x) ref += v;
      EXPECT_TRUE(same_bits(acc, ref)) << "n " << n << " start " << start << ": " << acc << " vs " << ref;
    }
  }
}

TEST(SumInto, TheTestDataIsOrderSensitive) {
  // Guards the test above: on its data a reversed or pairwise order gives
  // other bits, so an implementation that reorders would be caught.
  const std::vector<float> x = losses(65537, 65537 + 11);
  double forward = 0, backward = 0;
  for (float v : x) forward += v;
  for (auto it = x.rbegin(); it != x.rend(); ++it) backward += *it;
  EXPECT_FALSE(same_bits(forward, backward));
}

TEST(SumInto, AccumulatesOverCallsAsTheHostLoopDoes) {
  // Micro-batches of (B, T) losses added into one accumulator.
  CpuKernels k;
  const int64_t B = 4, T = 33;
  double acc = 0, ref = 0;
  for (uint64_t micro_batch = 0; micro_batch < 5; ++micro_batch) {
    std::vector<float> x = losses(B * T, 100 + micro_batch);
    k.sum_into(Tensor(x.data(), DType::f32, Shape{B, T}), Tensor(&acc, DType::f64, Shape{1}));
    for (float v : x) ref += v;
  }
  EXPECT_TRUE(same_bits(acc, ref)) << acc << " vs " << ref;
}

TEST(SumInto, AddsDoublesInOrder) {
  // f64 input: also how a per-micro-batch sum is added into a step total.
  CpuKernels k;
  const std::vector<float> f = losses(999, 5);
  std::vector<double> x(f.begin(), f.end());
  for (size_t i = 0; i < x.size(); ++i) x[i] *= 1.0 + 1e-9 * static_cast<double>(i);  // not exact in f32
  double acc = 0.25, ref = 0.25;
  k.sum_into(Tensor(x.data(), DType::f64, Shape{3, 333}), Tensor(&acc, DType::f64, Shape{1}));
  for (double v : x) ref += v;
  EXPECT_TRUE(same_bits(acc, ref)) << acc << " vs " << ref;
}

TEST(SumInto, RejectsOtherDtypesAndShapes) {
  CpuKernels k;
  std::vector<float> x(8, 1.0f);
  double acc2[2] = {0, 0};
  float acc_f32 = 0;
  double acc = 0;
  EXPECT_THROW(k.sum_into(Tensor(x.data(), DType::f32, Shape{8}), Tensor(acc2, DType::f64, Shape{2})), Error);
  EXPECT_THROW(k.sum_into(Tensor(x.data(), DType::f32, Shape{8}), Tensor(&acc_f32, DType::f32, Shape{1})), Error);
  EXPECT_THROW(k.sum_into(Tensor(x.data(), DType::bf16, Shape{16}), Tensor(&acc, DType::f64, Shape{1})), Error);
  EXPECT_EQ(acc, 0.0);
}

// [Note: host sums of squares]: the add and the sum of squares in one pass
// give CpuKernels::add's values and CpuKernels::sum_squares's bits, also
// when a thread whose OpenMP team differs from the caller's computes them
// (a gradient landing's thread: zero/grad_landing.hpp).
TEST(AddSumSquares, HasTheBitsOfTheAddThenTheSumOfSquares) {
  CpuKernels k;
  const int threads = omp_get_max_threads();
  for (int main_threads : {threads, threads + 1}) {
    omp_set_num_threads(main_threads);  // the landing thread keeps the process's default team
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{40000}, (int64_t{1} << 20) + 3}) {
      const std::vector<float> a = losses(n, static_cast<uint64_t>(n) + 3), b = losses(n, static_cast<uint64_t>(n) + 4);
      std::vector<float> ref = a, got = a;
      k.add(Tensor(ref.data(), DType::f32, Shape{n}), Tensor(ref.data(), DType::f32, Shape{n}),
            Tensor(const_cast<float*>(b.data()), DType::f32, Shape{n}));
      double want = 0;
      k.sum_squares(Tensor(ref.data(), DType::f32, Shape{n}), Tensor(&want, DType::f64, Shape{1}));
      const int parts = sum_squares_parts(n);
      EXPECT_EQ(parts, n > (int64_t{1} << 15) ? main_threads : 1);
      double sum = -1;
      std::thread([&] { sum = add_sum_squares(got.data(), b.data(), n, parts); }).join();
      EXPECT_TRUE(same_bits(sum, want)) << "n " << n << " threads " << main_threads << ": " << sum << " vs " << want;
      EXPECT_TRUE(n == 0 || std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0) << "n " << n;  // memcmp takes no null
    }
  }
  omp_set_num_threads(threads);
}

TEST(AddSumSquares, TheTestDataSumsToOtherBitsInOtherParts) {
  // Guards the test above: on its data the parts change the bits, so a sum
  // cut otherwise than sum_squares cuts it would be caught.
  const int64_t n = (int64_t{1} << 20) + 3;
  const std::vector<float> a = losses(n, static_cast<uint64_t>(n) + 3), b = losses(n, static_cast<uint64_t>(n) + 4);
  std::vector<float> x = a, y = a;
  const double three = add_sum_squares(x.data(), b.data(), n, 3), four = add_sum_squares(y.data(), b.data(), n, 4);
  EXPECT_FALSE(same_bits(three, four)) << three;
}

}  // namespace
}  // namespace zt
