#include "zero/flat_layout.hpp"

#include <algorithm>

namespace zt {

FlatLayout::FlatLayout(const std::vector<const Unit*>& units, int dp_size) : dp_size_(dp_size) {
  ZT_CHECK(dp_size >= 1, "dp_size ", dp_size);
  int64_t offset = 0;
  for (const Unit* unit : units) {
    FlatUnit fu;
    fu.name = unit->name();
    for (const ParamSpec& p : unit->params()) {
      fu.params.push_back(ParamSlot{p.name, p.shape, p.weight_decay, p.grad_overwritten, fu.numel});
      fu.numel += p.shape.numel();
    }
    fu.padded = (fu.numel + dp_size - 1) / dp_size * dp_size;
    fu.shard = fu.padded / dp_size;
    fu.offset = offset;
    offset += fu.padded;
    total_numel_ += fu.numel;
    units_.push_back(std::move(fu));
  }
  total_padded_ = offset;
}

std::vector<DecaySpan> FlatLayout::decay_spans(int u, int64_t begin, int64_t end) const {
  std::vector<DecaySpan> spans;
  auto push = [&](int64_t b, int64_t e, bool decay) {
    b = std::max(b, begin);
    e = std::min(e, end);
    if (b >= e) return;
    if (!spans.empty() && spans.back().decay == decay && spans.back().end == b) {
      spans.back().end = e;
    } else {
      spans.push_back(DecaySpan{b, e, decay});
    }
  };
  const FlatUnit& fu = units_[u];
  for (const ParamSlot& p : fu.params) push(p.offset, p.offset + p.numel(), p.weight_decay);
  push(fu.numel, fu.padded, false);
  return spans;
}

}  // namespace zt
