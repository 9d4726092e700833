// OwnedShard: the slice of one unit that this rank owns under ZeRO, with the
// optimizer state that goes with it. ZeRO makes the shards; the optimizer
// placement updates them (optimizer_placement.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "zero/flat_layout.hpp"

namespace zt {

struct OwnedShard {
  int unit = 0;
  int64_t begin = 0;  // unit-local element range
  int64_t end = 0;
  float* master = nullptr;  // fp32 master weights
  float* grad = nullptr;    // fp32 gradient, summed over the data-parallel group
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  std::vector<DecaySpan> spans;  // unit-local, covering [begin, end)
  int64_t numel() const { return end - begin; }
};

}  // namespace zt
