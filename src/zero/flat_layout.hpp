// Units, flat buffers and shards (DESIGN.md). Each unit's parameters live in
// one flat buffer padded to a multiple of the data-parallel size; rank r owns
// the contiguous range [r*S, (r+1)*S) of every unit, whatever parameter
// boundaries it cuts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "modules/unit.hpp"

namespace zt {

struct ParamSlot {
  std::string name;
  Shape shape;
  bool weight_decay = false;
  bool grad_overwritten = false;  // ParamSpec::grad_overwritten
  int64_t offset = 0;  // elements from the start of the unit's flat buffer
  int64_t numel() const { return shape.numel(); }
};

struct FlatUnit {
  std::string name;
  std::vector<ParamSlot> params;
  int64_t numel = 0;   // sum of parameter sizes
  int64_t padded = 0;  // numel rounded up to a multiple of dp_size
  int64_t shard = 0;   // padded / dp_size: elements each rank owns
  int64_t offset = 0;  // elements from the start of the model-wide flat buffer
};

// A run of elements inside one unit with one weight-decay setting.
struct DecaySpan {
  int64_t begin = 0;  // unit-local element offsets
  int64_t end = 0;
  bool decay = false;
};

class FlatLayout {
 public:
  FlatLayout(const std::vector<const Unit*>& units, int dp_size);
  int num_units() const { return static_cast<int>(units_.size()); }
  int dp_size() const { return dp_size_; }
  const FlatUnit& unit(int u) const { return units_[u]; }
  int64_t total_numel() const { return total_numel_; }    // real parameters
  int64_t total_padded() const { return total_padded_; }  // with padding, all units
  // Unit-local [begin, end) owned by `rank`.
  int64_t shard_begin(int u, int rank) const { return units_[u].shard * rank; }
  int64_t shard_end(int u, int rank) const { return units_[u].shard * (rank + 1); }
  // The decay spans that cover unit-local [begin, end); padding counts as
  // no-decay (its gradient is always zero, so it never moves).
  std::vector<DecaySpan> decay_spans(int u, int64_t begin, int64_t end) const;

 private:
  std::vector<FlatUnit> units_;
  int dp_size_ = 1;
  int64_t total_numel_ = 0;
  int64_t total_padded_ = 0;
};

}  // namespace zt
