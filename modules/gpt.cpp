// GPT-2: configuration, description, units, parameter counts, and the
// embedding and head units (the block is in block.cpp).
#include "modules/gpt.hpp"

#include "modules/gpt_init.hpp"
#include "modules/head_loss.hpp"
#include "modules/kernels.hpp"

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

ModelShape gpt2_shape(const GptConfig& cfg, std::string name) {
  ModelShape s;
  s.arch = "gpt2";
  s.name = std::move(name);
  s.n_layer = cfg.n_layer;
  s.d_model = cfg.d_model;
  s.n_head = s.n_kv_head = cfg.n_head;
  s.ffn_hidden = 4 * s.d_model;
  s.vocab = cfg.vocab_size;
  s.seq_len = cfg.seq_len;
  return s;
}

ModelDesc describe_gpt2(const ModelShape& s) {
  s.validate();
  ZT_CHECK(s.arch == "gpt2" && s.ffn_hidden == 4 * s.d_model && s.n_kv_head == s.n_head, "model shape ", s.name,
           " is not a GPT-2 (arch ", s.arch, ", ffn_hidden ", s.ffn_hidden, ", n_kv_head ", s.n_kv_head, ")");
  ModelDesc d;
  d.shape = s;
  d.units.push_back(EmbeddingUnit::describe(s));
  for (int l = 0; l < s.n_layer; ++l) d.units.push_back(BlockUnit::describe(s, l));
  d.units.push_back(HeadUnit::describe(s));
  // gpt_flops_per_token's estimate: wpe is a lookup and does no matrix work.
  const double n = static_cast<double>(d.num_params()) - static_cast<double>(s.seq_len * s.d_model);
  d.flops_per_token = 6.0 * n + 12.0 * static_cast<double>(s.n_layer * s.d_model * s.seq_len);
  return d;
}

std::vector<std::unique_ptr<Unit>> gpt2_units(const ModelDesc& desc) {
  ZT_CHECK(desc.arch() == "gpt2", "gpt2_units of a ", desc.arch(), " description");
  std::vector<std::unique_ptr<Unit>> units;
  for (const UnitDesc& u : desc.units) {
    switch (u.kind) {
      case UnitKind::embedding: units.push_back(std::make_unique<EmbeddingUnit>(desc.shape, u)); break;
      case UnitKind::block: units.push_back(std::make_unique<BlockUnit>(desc.shape, u)); break;
      case UnitKind::head: units.push_back(std::make_unique<HeadUnit>(desc.shape, u)); break;
    }
  }
  return units;
}

std::vector<std::unique_ptr<Unit>> build_gpt(const GptConfig& cfg) {
  cfg.validate();
  return gpt2_units(describe_gpt2(gpt2_shape(cfg)));
}

int64_t count_params(const std::vector<const Unit*>& units) {
  int64_t n = 0;
  for (const Unit* u : units) {
    for (const ParamSpec& p : u->params()) n += p.shape.numel();
  }
  return n;
}

double gpt_flops_per_token(const GptConfig& cfg) {
  cfg.validate();
  return describe_gpt2(gpt2_shape(cfg)).flops_per_token;
}

// ---- EmbeddingUnit ------------------------------------------------------------

UnitDesc EmbeddingUnit::describe(const ModelShape& s) {
  const int64_t V = s.vocab, T = s.seq_len, C = s.d_model;
  UnitDesc d;
  d.name = "embedding";
  d.kind = UnitKind::embedding;
  d.tensors = {{"wte.weight", Shape{V, C}, true, "wte.weight"}, {"wpe.weight", Shape{T, C}, true, "wpe.weight"}};
  d.act.output = {C, 0};  // (B, T, C)
  return d;
}

EmbeddingUnit::EmbeddingUnit(const ModelShape& s, UnitDesc desc)
    : DescribedUnit(s, std::move(desc)), C_(s.d_model), T_max_(s.seq_len) {
  ZT_CHECK(this->desc().kind == UnitKind::embedding && this->desc().tensors.size() == 2, "unit ",
           this->desc().name, " is not a GPT-2 embedding");
}

void EmbeddingUnit::init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                               int unit_index) const {
  ZT_CHECK(param == 0 || param == 1, "embedding has 2 parameters, asked for ", param);
  const double std = param == 0 ? gpt_init::kWeightStd : gpt_init::kPositionStd;
  gpt_init::normal(out, begin, count, std, seed, unit_index, param);
}

void EmbeddingUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
                            const Tensor& out, Stash&) const {
  ZT_CHECK(params.size() == 2, "embedding expects 2 parameter views, got ", params.size());
  ZT_CHECK(ctx.T <= T_max_, "sequence length ", ctx.T, " exceeds the model's ", T_max_);
  ctx.kernels->embedding_fwd(out, in, params[0], params[1], ctx.doc_start);  // (B, T, C)
}

void EmbeddingUnit::backward(const UnitContext& ctx, const std::vector<Tensor>&,
                             const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                             const Tensor&, Stash&) const {
  ZT_CHECK(grads.size() == 2, "embedding expects 2 gradient views, got ", grads.size());
  ctx.kernels->embedding_bwd(grads[0], grads[1], dout, in, ctx.doc_start);
}

// ---- HeadUnit -----------------------------------------------------------------

namespace {
enum HeadStash { kLnf, kLnfMean, kLnfRstd, kLse, kLosses, kHeadStashSize };
}

UnitDesc HeadUnit::describe(const ModelShape& s) {
  const int64_t C = s.d_model;
  UnitDesc d;
  d.name = "head";
  d.kind = UnitKind::head;
  d.tensors = {{"ln_f.weight", Shape{C}, false, "ln_f.weight"}, {"ln_f.bias", Shape{C}, false, "ln_f.bias"}};
  d.tied = {TiedParam{0, 0}};
  // Kept: the per-token loss; ln_f's output, mean and rstd, and the
  // log-sum-exp of the logits (HeadStash). Backward: dlnf (B, T, C) and one
  // chunk of logits rows at a time (the (B, T, V) logits never exist).
  d.act.output = {0, 1};
  d.act.stash = {C, 3};
  d.act.backward = {0, C};
  d.act.logits_width = s.vocab;
  return d;
}

HeadUnit::HeadUnit(const ModelShape& s, UnitDesc desc) : DescribedUnit(s, std::move(desc)), C_(s.d_model) {
  ZT_CHECK(this->desc().kind == UnitKind::head && this->desc().tensors.size() == 2 && this->desc().tied.size() == 1,
           "unit ", this->desc().name, " is not a GPT-2 head");
}

void HeadUnit::init_param(int param, int64_t, int64_t count, float* out, uint64_t, int) const {
  ZT_CHECK(param == 0 || param == 1, "head has 2 own parameters, asked for ", param);
  gpt_init::constant(out, count, param == 0 ? 1.0f : 0.0f);
}

void HeadUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
                       const Tensor& out, Stash& stash) const {
  ZT_CHECK(params.size() == 3, "head expects ln_f.weight, ln_f.bias and the tied wte, got ", params.size());
  ZT_CHECK(ctx.targets.numel() == ctx.B * ctx.T, "head needs targets (B, T)");
  const int64_t N = ctx.B * ctx.T, C = C_;
  const DType md = math_dtype(ctx.act_dtype);
  Arena& saved = *ctx.saved;
  stash.t.resize(kHeadStashSize);
  stash.t[kLnf] = saved.alloc(ctx.act_dtype, Shape{ctx.B, ctx.T, C});
  stash.t[kLnfMean] = saved.alloc(md, Shape{N});
  stash.t[kLnfRstd] = saved.alloc(md, Shape{N});
  ctx.kernels->layernorm_fwd(stash.t[kLnf], stash.t[kLnfMean], stash.t[kLnfRstd], in, params[0], params[1]);
  // out (B, T) per-token loss, now or in the backward; logits exist only
  // chunk by chunk.
  head_loss_fwd(ctx, out, stash.t[kLnf], params[2], stash.t[kLse], stash.t[kLosses]);
}

void HeadUnit::backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                        const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                        const Tensor& din, Stash& stash) const {
  ZT_CHECK(grads.size() == 3 && stash.t.size() == kHeadStashSize, "head backward: bad grads or stash");
  Kernels& k = *ctx.kernels;
  const Tensor dlnf = ctx.scratch->alloc(math_dtype(ctx.act_dtype), Shape{ctx.B, ctx.T, C_});
  // dlnf (B, T, C) written; the tied wte's gradient (V, C) accumulates.
  head_loss_bwd(ctx, dlnf, grads[2], dout, stash.t[kLnf], params[2], stash.t[kLse], stash.t[kLosses]);
  k.layernorm_bwd(din, false, grads[0], grads[1], dlnf, in, params[0], stash.t[kLnfMean], stash.t[kLnfRstd]);
}

}  // namespace zt
