#include "pipeline/partition.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace zt {

PartitionKind partition_kind_from_name(const std::string& name) {
  if (name == "uniform") return PartitionKind::uniform;
  if (name == "parameters") return PartitionKind::parameters;
  ZT_USER_ERROR("pipeline.partition: expected \"uniform\" or \"parameters\", found \"", name, "\"");
}

std::vector<UnitRange> partition_units(const std::vector<int64_t>& unit_params, int chunks, PartitionKind kind) {
  const int n = static_cast<int>(unit_params.size());
  const int blocks = n - 2;
  if (chunks < 1 || blocks < chunks)
    ZT_USER_ERROR("pipeline: ", blocks, " layers cannot fill ", chunks,
                  " chunks (pipeline.parallel_size x pipeline.num_chunks); use at most ", blocks, " chunks");
  // cut[k]: the first block of chunk k (block b is unit b+1).
  std::vector<int> cut(static_cast<size_t>(chunks) + 1, 0);
  cut[chunks] = blocks;
  if (kind == PartitionKind::uniform) {
    for (int k = 1; k < chunks; ++k) cut[k] = static_cast<int>(static_cast<int64_t>(k) * blocks / chunks);
  } else {
    // Greedy on prefix sums, with the embedding counted in chunk 0 and the
    // head in the last chunk; every chunk keeps at least one block.
    int64_t total = 0;
    for (int64_t p : unit_params) total += p;
    int64_t acc = unit_params[0];
    int b = 0;
    for (int k = 1; k < chunks; ++k) {
      const int64_t target = total * k / chunks;
      while (b < blocks - (chunks - k) && (b < cut[k - 1] + 1 || acc + unit_params[b + 1] / 2 <= target)) {
        acc += unit_params[b + 1];
        ++b;
      }
      cut[k] = b;
    }
  }
  std::vector<UnitRange> ranges;
  for (int k = 0; k < chunks; ++k) {
    UnitRange r{cut[k] + 1, cut[k + 1] + 1};
    if (k == 0) r.first = 0;
    if (k == chunks - 1) r.last = n;
    ZT_CHECK(r.last > r.first, "empty pipeline chunk ", k);
    ranges.push_back(r);
  }
  return ranges;
}

std::vector<int> StagePlan::units() const {
  std::vector<int> out;
  for (int u = 0; u < static_cast<int>(local.size()); ++u)
    if (local[static_cast<size_t>(u)]) out.push_back(u);
  return out;
}

StagePlan plan_stage(const std::vector<int64_t>& unit_params, const std::vector<std::vector<int>>& ties, int P,
                     int V, PartitionKind kind, int stage) {
  const int n = static_cast<int>(unit_params.size());
  ZT_CHECK(static_cast<int>(ties.size()) == n, "plan_stage: ties for ", ties.size(), " units, ", n, " units");
  ZT_CHECK(P >= 1 && V >= 1 && stage >= 0 && stage < P, "plan_stage: stage ", stage, " of P=", P, " V=", V);
  StagePlan plan;
  if (P == 1 && V == 1) {
    plan.chunks = {UnitRange{0, n}};
    plan.local.assign(static_cast<size_t>(n), true);
    return plan;
  }
  plan.chunks = partition_units(unit_params, P * V, kind);
  plan.local.assign(static_cast<size_t>(n), false);
  for (int c = 0; c < V; ++c) {
    const UnitRange r = plan.chunks[static_cast<size_t>(c * P + stage)];
    for (int u = r.first; u < r.last; ++u) plan.local[static_cast<size_t>(u)] = true;
  }
  for (int u = 0; u < n; ++u)
    for (int t : ties[static_cast<size_t>(u)])
      if (plan.local[static_cast<size_t>(u)] && !plan.local[static_cast<size_t>(t)]) {
        plan.local[static_cast<size_t>(t)] = true;
        plan.mirror = t;
      }
  return plan;
}

}  // namespace zt
