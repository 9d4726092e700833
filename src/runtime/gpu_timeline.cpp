#include "runtime/gpu_timeline.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.hpp"

namespace zt {

TimelineSummary summarize_timeline(std::vector<DeviceSpan> spans) {
  TimelineSummary s;
  if (spans.empty()) return s;
  std::sort(spans.begin(), spans.end(), [](const DeviceSpan& a, const DeviceSpan& b) { return a.start < b.start; });
  uint64_t cur_start = spans.front().start, cur_end = spans.front().end;
  auto close_gap = [&](uint64_t gap) {
    int c = 0;
    while (c < TimelineSummary::kClasses - 1 && gap > TimelineSummary::kBounds[c]) ++c;
    ++s.gaps[c];
    s.gap_ns[c] += gap;
  };
  for (const DeviceSpan& d : spans) {
    ZT_CHECK(d.end >= d.start, "GPU timeline: an operation ends (", d.end, ") before it starts (", d.start, ")");
    switch (d.kind) {
      case DeviceSpan::Kind::kernel:
        ++s.kernels;
        s.kernel_ns += d.end - d.start;
        break;
      case DeviceSpan::Kind::copy:
        ++s.copies;
        s.copy_ns += d.end - d.start;
        break;
      case DeviceSpan::Kind::memset:
        ++s.memsets;
        s.memset_ns += d.end - d.start;
        break;
    }
    if (d.start > cur_end) {  // a gap: the merged run so far is closed
      s.busy_ns += cur_end - cur_start;
      close_gap(d.start - cur_end);
      cur_start = d.start;
      cur_end = d.end;
    } else {
      cur_end = std::max(cur_end, d.end);
    }
  }
  s.busy_ns += cur_end - cur_start;
  s.span_ns = cur_end - spans.front().start;
  return s;
}

std::string describe_timeline(const TimelineSummary& s, int64_t steps) {
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  auto ms = [&](uint64_t ns) { return static_cast<double>(ns) * 1e-6 / n; };
  char line[512];
  std::ostringstream o;
  std::snprintf(line, sizeof line,
                "GPU timeline over %lld steps (ZTRAIN_GPU_TIMELINE), a step: %.3f ms from the first operation to "
                "the last, %.3f ms busy (%.1f%%), %.3f ms idle; %.1f kernels (%.3f ms), %.1f copies (%.3f ms), "
                "%.1f memsets (%.3f ms)\n",
                static_cast<long long>(steps), ms(s.span_ns), ms(s.busy_ns),
                s.span_ns ? 100.0 * static_cast<double>(s.busy_ns) / static_cast<double>(s.span_ns) : 0.0,
                ms(s.idle_ns()), static_cast<double>(s.kernels) / n, ms(s.kernel_ns),
                static_cast<double>(s.copies) / n, ms(s.copy_ns), static_cast<double>(s.memsets) / n,
                ms(s.memset_ns));
  o << line;
  const char* names[TimelineSummary::kClasses] = {"up to 2 us", "2-10 us", "10-100 us", "over 100 us"};
  for (int c = 0; c < TimelineSummary::kClasses; ++c) {
    std::snprintf(line, sizeof line, "  gaps %-11s %9.1f a step, %8.3f ms a step\n", names[c],
                  static_cast<double>(s.gaps[c]) / n, ms(s.gap_ns[c]));
    o << line;
  }
  return o.str();
}

}  // namespace zt
