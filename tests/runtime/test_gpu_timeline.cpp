// The GPU timeline's summary ([Note: GPU timeline]): operations of concurrent
// streams merged, gaps classed by length, per-step figures.
#include <gtest/gtest.h>

#include "core/error.hpp"
#include "runtime/gpu_timeline.hpp"

namespace zt {
namespace {

using K = DeviceSpan::Kind;

TEST(GpuTimeline, MergesOverlapsAndClassesGaps) {
  // Unsorted on purpose. Busy, in microseconds: [0, 10] (two overlapping
  // kernels and a copy inside them), [11, 20], [30, 40], [1030, 1040],
  // [200040, 200050]. Gaps: 1 us (up to 2), 10 us (2-10: a bound belongs to
  // the class below it), 990 us and 199 ms (over 100).
  std::vector<DeviceSpan> s = {
      {11'000, 20'000, K::memset}, {0, 6'000, K::kernel},          {4'000, 10'000, K::kernel},
      {5'000, 7'000, K::copy},     {30'000, 40'000, K::kernel},    {1'030'000, 1'040'000, K::kernel},
      {200'040'000, 200'050'000, K::kernel},
  };
  const TimelineSummary t = summarize_timeline(s);
  EXPECT_EQ(t.kernels, 5);
  EXPECT_EQ(t.copies, 1);
  EXPECT_EQ(t.memsets, 1);
  EXPECT_EQ(t.kernel_ns, 6'000u + 6'000u + 10'000u + 10'000u + 10'000u);
  EXPECT_EQ(t.copy_ns, 2'000u);
  EXPECT_EQ(t.memset_ns, 9'000u);
  EXPECT_EQ(t.span_ns, 200'050'000u);
  EXPECT_EQ(t.busy_ns, 10'000u + 9'000u + 10'000u + 10'000u + 10'000u);
  EXPECT_EQ(t.idle_ns(), t.span_ns - t.busy_ns);
  EXPECT_EQ(t.gaps[0], 1);  // 1 us
  EXPECT_EQ(t.gap_ns[0], 1'000u);
  EXPECT_EQ(t.gaps[1], 1);  // 10 us
  EXPECT_EQ(t.gap_ns[1], 10'000u);
  EXPECT_EQ(t.gaps[2], 0);
  EXPECT_EQ(t.gaps[3], 2);  // 990 us and 199 ms
  EXPECT_EQ(t.gap_ns[3], 990'000u + 199'000'000u);
  uint64_t gaps = 0;
  for (uint64_t g : t.gap_ns) gaps += g;
  EXPECT_EQ(gaps, t.idle_ns());
}

TEST(GpuTimeline, DescribesPerStep) {
  // Gaps of 2 us and 50 us over two steps.
  const TimelineSummary t =
      summarize_timeline({{0, 4'000'000, K::kernel}, {4'002'000, 8'000'000, K::kernel}, {8'050'000, 9'000'000, K::copy}});
  const std::string d = describe_timeline(t, 2);
  const auto line = [&](const std::string& key) {
    const size_t at = d.find(key);
    return at == std::string::npos ? std::string() : d.substr(at, d.find('\n', at) - at);
  };
  EXPECT_NE(d.find("over 2 steps"), std::string::npos) << d;
  EXPECT_NE(d.find("4.500 ms from the first operation"), std::string::npos) << d;  // 9 ms / 2
  EXPECT_NE(d.find("0.026 ms idle; 1.0 kernels (3.999 ms), 0.5 copies (0.475 ms), 0.0 memsets (0.000 ms)"),
            std::string::npos)
      << d;
  EXPECT_NE(line("up to 2 us").find(" 0.5 a step,    0.001 ms"), std::string::npos) << d;
  EXPECT_NE(line("10-100 us").find(" 0.5 a step,    0.025 ms"), std::string::npos) << d;
  EXPECT_NE(line("over 100 us").find(" 0.0 a step,    0.000 ms"), std::string::npos) << d;
}

TEST(GpuTimeline, EmptyAndBroken) {
  const TimelineSummary e = summarize_timeline({});
  EXPECT_EQ(e.span_ns, 0u);
  EXPECT_EQ(e.kernels, 0);
  EXPECT_THROW(summarize_timeline({{10, 5, K::kernel}}), Error);
}

}  // namespace
}  // namespace zt
