// Layer partitioning: the model's units split into P*V contiguous chunks;
// stage p holds chunks p, p+P, p+2P, ... The embedding is in chunk 0 and the
// final norm, head and loss in the last chunk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zt {

struct UnitRange {
  int first = 0;  // units [first, last)
  int last = 0;
};

enum class PartitionKind { uniform, parameters };
PartitionKind partition_kind_from_name(const std::string& name);  // "uniform" | "parameters"

// unit_params[u]: parameters of unit u. Units 0 and n-1 (embedding, head)
// ride with the first and last blocks; blocks are split evenly by count
// (uniform) or so that the chunks' parameter counts are as even as possible
// (parameters). Throws UserError when there are fewer blocks than chunks.
std::vector<UnitRange> partition_units(const std::vector<int64_t>& unit_params, int chunks, PartitionKind kind);

// What one pipeline stage holds: the model's P*V chunks, the units of the
// stage's own chunks (global chunks stage, stage+P, ...), and a copy of any
// unit those units tie to that another stage owns (the tied embedding on the
// last stage: `mirror`). The trainer builds its engine from it and the
// memory estimator counts bytes from it, so both see the same stage.
struct StagePlan {
  std::vector<UnitRange> chunks;  // all P*V global chunks, in order
  std::vector<bool> local;        // per unit: held by this stage
  int mirror = -1;                // a unit held only as a tie copy, or -1
  std::vector<int> units() const; // the local units, in order
};

// unit_params[u]: parameters of unit u; ties[u]: the units whose parameters
// unit u reads (its own tied parameters' owners). P == 1 holds every unit.
StagePlan plan_stage(const std::vector<int64_t>& unit_params, const std::vector<std::vector<int>>& ties, int P,
                     int V, PartitionKind kind, int stage);

}  // namespace zt
