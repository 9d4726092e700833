// GPT-2: configuration, model assembly, parameter counts, and the embedding
// and head units (the block is in block.cpp).
#include "modules/gpt.hpp"

#include "modules/gpt_init.hpp"
#include "modules/kernels.hpp"
#include "modules/model.hpp"

namespace zt {

void GptConfig::validate() const {
  if (n_layer < 1) ZT_USER_ERROR("model.n_layer must be >= 1, got ", n_layer);
  if (n_head < 1) ZT_USER_ERROR("model.n_head must be >= 1, got ", n_head);
  if (d_model < 1 || d_model % n_head != 0) {
    ZT_USER_ERROR("model.d_model must be a positive multiple of n_head (", n_head, "), got ", d_model);
  }
  if (seq_len < 1) ZT_USER_ERROR("model.seq_len must be >= 1, got ", seq_len);
  if (vocab_size < 1) ZT_USER_ERROR("model.vocab_size must be >= 1, got ", vocab_size);
}

std::vector<std::unique_ptr<Unit>> build_gpt(const GptConfig& cfg) {
  cfg.validate();
  std::vector<std::unique_ptr<Unit>> units;
  units.push_back(std::make_unique<EmbeddingUnit>(cfg));
  for (int l = 0; l < cfg.n_layer; ++l) units.push_back(std::make_unique<BlockUnit>(cfg, l));
  units.push_back(std::make_unique<HeadUnit>(cfg));
  return units;
}

int64_t count_params(const std::vector<const Unit*>& units) {
  int64_t n = 0;
  for (const Unit* u : units) {
    for (const ParamSpec& p : u->params()) n += p.shape.numel();
  }
  return n;
}

double gpt_flops_per_token(const GptConfig& cfg) {
  const auto units = build_gpt(cfg);
  std::vector<const Unit*> views;
  for (const auto& u : units) views.push_back(u.get());
  const double n = static_cast<double>(count_params(views)) -
                   static_cast<double>(cfg.seq_len) * cfg.d_model;  // minus wpe
  return 6.0 * n + 12.0 * cfg.n_layer * static_cast<double>(cfg.d_model) * cfg.seq_len;
}

Model::Model(std::string name, std::vector<std::unique_ptr<Unit>> units, double flops_per_token)
    : name_(std::move(name)), units_(std::move(units)), flops_per_token_(flops_per_token) {
  for (const auto& u : units_) views_.push_back(u.get());
}

Model make_gpt_model(const GptConfig& cfg) {
  return Model("gpt2", build_gpt(cfg), gpt_flops_per_token(cfg));
}

// ---- EmbeddingUnit ------------------------------------------------------------

std::vector<ParamSpec> EmbeddingUnit::params() const {
  const int64_t V = cfg_.vocab_size, T = cfg_.seq_len, C = cfg_.d_model;
  return {{"wte.weight", Shape{V, C}, true}, {"wpe.weight", Shape{T, C}, true}};
}

Shape EmbeddingUnit::output_shape(int64_t B, int64_t T) const { return Shape{B, T, cfg_.d_model}; }

void EmbeddingUnit::init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                               int unit_index) const {
  ZT_CHECK(param == 0 || param == 1, "embedding has 2 parameters, asked for ", param);
  const double std = param == 0 ? gpt_init::kWeightStd : gpt_init::kPositionStd;
  gpt_init::normal(out, begin, count, std, seed, unit_index, param);
}

void EmbeddingUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
                            const Tensor& out, Stash&) const {
  ZT_CHECK(params.size() == 2, "embedding expects 2 parameter views, got ", params.size());
  ZT_CHECK(ctx.T <= cfg_.seq_len, "sequence length ", ctx.T, " exceeds the model's ", cfg_.seq_len);
  ctx.kernels->embedding_fwd(out, in, params[0], params[1]);  // (B, T, C)
}

void EmbeddingUnit::backward(const UnitContext& ctx, const std::vector<Tensor>&,
                             const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                             const Tensor&, Stash&) const {
  ZT_CHECK(grads.size() == 2, "embedding expects 2 gradient views, got ", grads.size());
  ctx.kernels->embedding_bwd(grads[0], grads[1], dout, in);
}

// ---- HeadUnit -----------------------------------------------------------------

namespace {
enum HeadStash { kLnf, kLnfMean, kLnfRstd, kLse, kHeadStashSize };
}

std::vector<ParamSpec> HeadUnit::params() const {
  const int64_t C = cfg_.d_model;
  return {{"ln_f.weight", Shape{C}, false}, {"ln_f.bias", Shape{C}, false}};
}

Shape HeadUnit::input_shape(int64_t B, int64_t T) const { return Shape{B, T, cfg_.d_model}; }

void HeadUnit::init_param(int param, int64_t, int64_t count, float* out, uint64_t, int) const {
  ZT_CHECK(param == 0 || param == 1, "head has 2 own parameters, asked for ", param);
  gpt_init::constant(out, count, param == 0 ? 1.0f : 0.0f);
}

void HeadUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
                       const Tensor& out, Stash& stash) const {
  ZT_CHECK(params.size() == 3, "head expects ln_f.weight, ln_f.bias and the tied wte, got ", params.size());
  ZT_CHECK(ctx.targets.numel() == ctx.B * ctx.T, "head needs targets (B, T)");
  const int64_t N = ctx.B * ctx.T, C = cfg_.d_model;
  const DType md = math_dtype(ctx.act_dtype);
  Arena& saved = *ctx.saved;
  stash.t.resize(kHeadStashSize);
  stash.t[kLnf] = saved.alloc(ctx.act_dtype, Shape{ctx.B, ctx.T, C});
  stash.t[kLnfMean] = saved.alloc(md, Shape{N});
  stash.t[kLnfRstd] = saved.alloc(md, Shape{N});
  stash.t[kLse] = saved.alloc(md, Shape{N});
  Kernels& k = *ctx.kernels;
  k.layernorm_fwd(stash.t[kLnf], stash.t[kLnfMean], stash.t[kLnfRstd], in, params[0], params[1]);
  // out (B, T) per-token loss; logits exist only chunk by chunk.
  k.classifier_fwd(*ctx.scratch, out, stash.t[kLse], stash.t[kLnf], params[2], ctx.targets);
}

void HeadUnit::backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                        const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                        const Tensor& din, Stash& stash) const {
  ZT_CHECK(grads.size() == 3 && stash.t.size() == kHeadStashSize, "head backward: bad grads or stash");
  Kernels& k = *ctx.kernels;
  const Tensor dlnf = ctx.scratch->alloc(math_dtype(ctx.act_dtype), Shape{ctx.B, ctx.T, cfg_.d_model});
  // dlnf (B, T, C) written; the tied wte's gradient (V, C) accumulates.
  k.classifier_bwd(*ctx.scratch, dlnf, grads[2], dout, stash.t[kLnf], params[2], ctx.targets, stash.t[kLse]);
  k.layernorm_bwd(din, false, grads[0], grads[1], dlnf, in, params[0], stash.t[kLnfMean], stash.t[kLnfRstd]);
}

}  // namespace zt
