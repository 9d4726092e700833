#include "zero/zero_engine.hpp"

#include <algorithm>

namespace zt {

ZeroEngine::ZeroEngine(const std::vector<const Unit*>& units, const ZeroOptions& opts, Device& dev, Communicator& dp)
    : units_(units), layout_(units, opts.stage == 0 ? 1 : dp.size()), opts_(opts), dev_(dev), dp_(dp) {
  ZT_CHECK(opts.stage == 0, "ZeRO stage ", opts.stage, " is not implemented by this engine");
  ZT_CHECK(opts.reduce_bucket_size > 0, "reduce_bucket_size must be positive");
  const int64_t n = layout_.total_padded();
  working_ = Buffer(dev, opts.param_dtype, Shape{n}, MemTag::params);
  if (opts.param_dtype != DType::f32) master_ = Buffer(dev, DType::f32, Shape{n}, MemTag::optim);
  grads_ = Buffer(dev, DType::f32, Shape{n}, MemTag::grads);
  exp_avg_ = Buffer(dev, DType::f32, Shape{n}, MemTag::optim);
  exp_avg_sq_ = Buffer(dev, DType::f32, Shape{n}, MemTag::optim);
  for (Buffer* b : {&working_, &master_, &grads_, &exp_avg_, &exp_avg_sq_})
    if (!b->empty()) dev.memset_zero(b->data(), b->bytes());
  build_views(units);

  float* master = master_.empty() ? working_.as<float>() : master_.as<float>();
  for (int u = 0; u < layout_.num_units(); ++u) {
    const FlatUnit& fu = layout_.unit(u);
    OwnedShard s;
    s.unit = u;
    s.begin = 0;  // stage 0: the whole unit
    s.end = fu.padded;
    s.master = master + fu.offset;
    s.grad = grads_.as<float>() + fu.offset;
    s.exp_avg = exp_avg_.as<float>() + fu.offset;
    s.exp_avg_sq = exp_avg_sq_.as<float>() + fu.offset;
    s.spans = layout_.decay_spans(u, s.begin, s.end);
    owned_.push_back(std::move(s));
  }
}

void ZeroEngine::build_views(const std::vector<const Unit*>& units) {
  const size_t psize = dtype_size(opts_.param_dtype);
  auto param_view = [&](int u, int p) {
    const FlatUnit& fu = layout_.unit(u);
    const ParamSlot& slot = fu.params[p];
    return working_.view(opts_.param_dtype, slot.shape, static_cast<size_t>(fu.offset + slot.offset) * psize);
  };
  auto grad_view = [&](int u, int p) {
    const FlatUnit& fu = layout_.unit(u);
    const ParamSlot& slot = fu.params[p];
    return grads_.view(DType::f32, slot.shape, static_cast<size_t>(fu.offset + slot.offset) * 4);
  };
  views_.resize(units.size());
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    const int np = static_cast<int>(layout_.unit(u).params.size());
    for (int p = 0; p < np; ++p) {
      views_[u].params.push_back(param_view(u, p));
      views_[u].grads.push_back(grad_view(u, p));
    }
    for (const TiedParam& t : units[u]->tied()) {
      ZT_CHECK(t.unit >= 0 && t.unit < static_cast<int>(units.size()) && t.param >= 0 &&
                   t.param < static_cast<int>(layout_.unit(t.unit).params.size()),
               "unit ", u, " ties to a parameter that does not exist");
      views_[u].params.push_back(param_view(t.unit, t.param));
      views_[u].grads.push_back(grad_view(t.unit, t.param));
    }
  }
}

void ZeroEngine::init_params(uint64_t seed) {
  for (const OwnedShard& s : owned_) {
    std::fill(s.master, s.master + s.numel(), 0.0f);  // padding stays zero
    const FlatUnit& fu = layout_.unit(s.unit);
    for (int p = 0; p < static_cast<int>(fu.params.size()); ++p) {
      const ParamSlot& slot = fu.params[p];
      const int64_t b = std::max(s.begin, slot.offset);
      const int64_t e = std::min(s.end, slot.offset + slot.numel());
      if (b >= e) continue;
      units_[s.unit]->init_param(p, b - slot.offset, e - b, s.master + (b - s.begin), seed, s.unit);
    }
  }
  publish_params();
}

std::vector<Tensor> ZeroEngine::acquire(int unit, Phase) { return views_[unit].params; }
std::vector<Tensor> ZeroEngine::grads(int unit) { return views_[unit].grads; }

void ZeroEngine::zero_grads() { dev_.memset_zero(grads_.data(), grads_.bytes()); }

void ZeroEngine::reduce_gradients() {
  if (dp_.size() == 1) return;
  const int64_t n = layout_.total_padded();
  std::vector<CommRequest> pending;
  for (int64_t b = 0; b < n; b += opts_.reduce_bucket_size) {
    const int64_t len = std::min(opts_.reduce_bucket_size, n - b);
    pending.push_back(dp_.all_reduce(grads_.tensor().slice1d(b, len), ReduceOp::sum));
  }
  for (CommRequest& r : pending) wait(r);
}

double ZeroEngine::reduce_owned_sum(double local) {
  return opts_.stage == 0 ? local : all_reduce_scalar(dp_, local);
}

void ZeroEngine::publish_params() {
  if (master_.empty()) return;
  convert(master_.data(), DType::f32, working_.data(), opts_.param_dtype, static_cast<size_t>(layout_.total_padded()));
}

void ZeroEngine::copy_unit_params(int u, float* out) const {
  const FlatUnit& fu = layout_.unit(u);
  const float* master = master_.empty() ? working_.as<float>() : master_.as<float>();
  std::copy(master + fu.offset, master + fu.offset + fu.numel, out);
}

}  // namespace zt
