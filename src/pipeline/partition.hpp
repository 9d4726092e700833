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

}  // namespace zt
