// The Llama units. A block, pre-RMSNorm:
//   q, k, v = ln1 Wq^T, ln1 Wk^T, ln1 Wv^T,  ln1 = rmsnorm(x);  q, k rotated
//   res = x + o_proj(attn(q, k, v))          (grouped-query, causal)
//   out = res + down(silu(gate(ln2)) * up(ln2)),  ln2 = rmsnorm(res)
// Initialisation as transformers' LlamaPreTrainedModel: every linear and the
// embedding N(0, 0.02) (initializer_range), RMSNorm weights 1.
#include "modules/llama.hpp"

#include <initializer_list>
#include <string>

#include "modules/gpt_init.hpp"
#include "modules/head_loss.hpp"
#include "modules/kernels.hpp"

namespace zt {
namespace {

enum BlockParam { kLn1W, kQW, kKW, kVW, kOW, kLn2W, kGateW, kUpW, kDownW, kNumBlockParams };

// What the block's forward keeps for backward (llama_desc.cpp counts it):
// SiLU(gate) * up is recomputed in backward from gate and up.
enum BlockStash {
  kLn1, kRstd1,     // (B, T, C), (B*T)
  kQ, kK, kV,       // (B, T, C), (B, T, KV) x2: q and k after rotation
  kAtty, kLse,      // (B, T, C), (B, NH, T)
  kRes,             // (B, T, C) x + attention branch
  kLn2, kRstd2,     // (B, T, C), (B*T)
  kGate, kUp,       // (B, T, F) x2
  kNumBlockStash
};

enum HeadStash { kLnf, kLnfRstd, kLse2, kLosses, kHeadStashSize };

// [Note: the norm writes the products' operand] (modules/kernels.hpp).
// Whether `op` (a UnitContext's dout_operand) is `t` as products whose other
// operands have the dtypes `partners` read it.
bool norm_made_operand(const Tensor& op, const Tensor& t, std::initializer_list<DType> partners) {
  return op.defined() && op.dtype != t.dtype && shared_partner(t, partners) == op.dtype;
}

// Where the backward's last norm (input x) writes din's operand for the unit
// before, marked written; undefined where the runner offers no space or
// the backend's norm cannot write that dtype.
Tensor din_operand_space(Kernels& k, const UnitContext& ctx, const Tensor& x) {
  if (ctx.din_operand == nullptr || !k.norm_bwd_writes_operand(x, ctx.din_operand->space.dtype)) return Tensor();
  ctx.din_operand->written = true;
  return ctx.din_operand->space;
}

}  // namespace

std::vector<std::unique_ptr<Unit>> llama_units(const ModelDesc& desc) {
  ZT_CHECK(desc.arch() == "llama", "llama_units of a ", desc.arch(), " description");
  std::vector<std::unique_ptr<Unit>> units;
  for (const UnitDesc& u : desc.units) {
    switch (u.kind) {
      case UnitKind::embedding: units.push_back(std::make_unique<LlamaEmbeddingUnit>(desc.shape, u)); break;
      case UnitKind::block: units.push_back(std::make_unique<LlamaBlockUnit>(desc.shape, u)); break;
      case UnitKind::head: units.push_back(std::make_unique<LlamaHeadUnit>(desc.shape, u)); break;
    }
  }
  return units;
}

// ---- embedding --------------------------------------------------------------

LlamaEmbeddingUnit::LlamaEmbeddingUnit(const ModelShape& s, UnitDesc desc)
    : DescribedUnit(s, std::move(desc)), C_(s.d_model) {
  ZT_CHECK(this->desc().kind == UnitKind::embedding && this->desc().tensors.size() == 1, "unit ",
           this->desc().name, " is not a Llama embedding");
}

void LlamaEmbeddingUnit::init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                                    int unit_index) const {
  ZT_CHECK(param == 0, "llama embedding has 1 parameter, asked for ", param);
  gpt_init::normal(out, begin, count, gpt_init::kWeightStd, seed, unit_index, param);
}

void LlamaEmbeddingUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
                                 const Tensor& out, Stash&) const {
  ZT_CHECK(params.size() == 1, "llama embedding expects 1 parameter view, got ", params.size());
  ctx.kernels->embedding_fwd(out, in, params[0], Tensor(), ctx.doc_start);  // no position table
}

void LlamaEmbeddingUnit::backward(const UnitContext& ctx, const std::vector<Tensor>&,
                                  const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                                  const Tensor&, Stash&) const {
  ZT_CHECK(grads.size() == 1, "llama embedding expects 1 gradient view, got ", grads.size());
  ctx.kernels->embedding_bwd(grads[0], Tensor(), dout, in, ctx.doc_start);
}

// ---- block --------------------------------------------------------------------

LlamaBlockUnit::LlamaBlockUnit(const ModelShape& s, UnitDesc desc)
    : DescribedUnit(s, std::move(desc)),
      C_(s.d_model),
      KV_(s.kv_width()),
      F_(s.ffn_hidden),
      n_head_(static_cast<int>(s.n_head)),
      n_kv_head_(static_cast<int>(s.n_kv_head)),
      eps_(s.rms_norm_eps),
      rope_(s.rope) {
  ZT_CHECK(this->desc().kind == UnitKind::block &&
               this->desc().tensors.size() == static_cast<size_t>(kNumBlockParams),
           "unit ", this->desc().name, " is not a Llama block");
  ZT_CHECK(rope_.head_dim == s.head_dim(), "unit ", this->desc().name, ": rope head_dim ", rope_.head_dim,
           " is not the head size ", s.head_dim());
}

void LlamaBlockUnit::init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                                int unit_index) const {
  ZT_CHECK(param >= 0 && param < kNumBlockParams, "llama block has ", kNumBlockParams, " parameters, asked for ",
           param);
  if (param == kLn1W || param == kLn2W) {
    gpt_init::constant(out, count, 1.0f);
    return;
  }
  gpt_init::normal(out, begin, count, gpt_init::kWeightStd, seed, unit_index, param);
}

void LlamaBlockUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& p, const Tensor& in,
                             const Tensor& out, Stash& stash) const {
  ZT_CHECK(p.size() == kNumBlockParams, name(), " expects ", kNumBlockParams, " parameter views, got ", p.size());
  const int64_t B = ctx.B, T = ctx.T, C = C_, N = B * T;
  const DType act = ctx.act_dtype, md = math_dtype(act);
  Kernels& k = *ctx.kernels;
  Arena& saved = *ctx.saved;
  Arena& ws = *ctx.scratch;
  std::vector<Tensor>& s = stash.t;
  s.resize(kNumBlockStash);

  // Attention branch.
  s[kLn1] = saved.alloc(act, Shape{B, T, C});
  s[kRstd1] = saved.alloc(md, Shape{N});
  // res = x + atty Wo^T, accumulated onto a copy of x that the norm writes
  // (one rounding, as GPT-2's block; [Note: residual stream] in kernels.hpp).
  s[kRes] = saved.alloc(act, Shape{B, T, C});
  k.rmsnorm_fwd(s[kLn1], s[kRstd1], in, p[kLn1W], eps_, s[kRes]);
  s[kQ] = saved.alloc(act, Shape{B, T, C});
  s[kK] = saved.alloc(act, Shape{B, T, KV_});
  s[kV] = saved.alloc(act, Shape{B, T, KV_});
  k.matmul(ws, s[kQ], s[kLn1], false, p[kQW], true, false);
  k.matmul(ws, s[kK], s[kLn1], false, p[kKW], true, false);
  k.matmul(ws, s[kV], s[kLn1], false, p[kVW], true, false);
  k.rope_fwd(s[kQ], s[kK], rope_, ctx.doc_start);
  s[kAtty] = saved.alloc(act, Shape{B, T, C});
  s[kLse] = saved.alloc(md, Shape{B, n_head_, T});
  k.gqa_attention_fwd(ws, s[kAtty], s[kLse], s[kQ], s[kK], s[kV], n_head_, n_kv_head_, ctx.doc_start);
  k.matmul(ws, s[kRes], s[kAtty], false, p[kOW], true, true);

  // MLP branch.
  s[kLn2] = saved.alloc(act, Shape{B, T, C});
  s[kRstd2] = saved.alloc(md, Shape{N});
  k.rmsnorm_fwd(s[kLn2], s[kRstd2], s[kRes], p[kLn2W], eps_, out);  // out = res, then += mlp
  s[kGate] = saved.alloc(act, Shape{B, T, F_});
  s[kUp] = saved.alloc(act, Shape{B, T, F_});
  k.matmul(ws, s[kGate], s[kLn2], false, p[kGateW], true, false);
  k.matmul(ws, s[kUp], s[kLn2], false, p[kUpW], true, false);
  const Tensor h = ws.alloc(act, Shape{B, T, F_});
  k.swiglu_fwd(h, s[kGate], s[kUp]);
  k.matmul(ws, out, h, false, p[kDownW], true, true);  // out = res + mlp
}

void LlamaBlockUnit::backward(const UnitContext& ctx, const std::vector<Tensor>& p, const std::vector<Tensor>& g,
                              const Tensor& in, const Tensor& dout, const Tensor& din, Stash& stash) const {
  ZT_CHECK(g.size() == kNumBlockParams && stash.t.size() == kNumBlockStash, name(),
           " backward: bad gradients or stash");
  const int64_t B = ctx.B, T = ctx.T, C = C_;
  const DType act = ctx.act_dtype, md = math_dtype(act);
  Kernels& k = *ctx.kernels;
  Arena& ws = *ctx.scratch;
  const std::vector<Tensor>& s = stash.t;
  // Each weight gradient is written whole by one product: added into, or
  // written at the step's first backward ([Note: gradients written, not
  // zeroed]).
  const bool acc = !ctx.grads_fresh;

  // din collects the residual path's gradient and both branches': the MLP
  // norm's backward writes din = dout + its input gradient.

  // MLP branch: out = res + h Wd^T, h = silu(gate) * up.
  const Tensor h = ws.alloc(act, Shape{B, T, F_});
  k.swiglu_fwd(h, s[kGate], s[kUp]);
  // With 16-bit activations dgate and dup are rounded to the storage dtype
  // once, by swiglu_bwd: the four products below read them in that dtype
  // anyway, and would each round an fp32 copy ([Note: matmul precision] in
  // modules/cuda/matmul.cuh) — at F 8192 that was 1.6 GB of traffic a layer.
  const DType gd = act == md ? md : act;
  const Tensor dh = ws.alloc(md, Shape{B, T, F_});
  {
    // dout, like din and dq, dk, dv below, feeds two products, which read it
    // converted once (shared_matmul_operand, in a scope of ws), or as the
    // next block's norm wrote it ([Note: the norm writes the products'
    // operand] in modules/kernels.hpp).
    ArenaScope scope(ws);
    const Tensor dout_m = norm_made_operand(ctx.dout_operand, dout, {h.dtype, p[kDownW].dtype})
                              ? ctx.dout_operand
                              : shared_matmul_operand(k, ws, dout, {h.dtype, p[kDownW].dtype});
    k.matmul(ws, g[kDownW], dout_m, true, h, false, acc);    // (C, F) += dout^T h
    k.matmul(ws, dh, dout_m, false, p[kDownW], false, false);  // dh = dout Wd
  }
  const Tensor dgate = act == md ? dh : ws.alloc(gd, Shape{B, T, F_});
  const Tensor dup = ws.alloc(gd, Shape{B, T, F_});
  k.swiglu_bwd(dgate, dup, dh, s[kGate], s[kUp]);  // in place of dh in the math dtype
  k.matmul(ws, g[kGateW], dgate, true, s[kLn2], false, acc);
  k.matmul(ws, g[kUpW], dup, true, s[kLn2], false, acc);
  // One (B, T, C) math-dtype buffer holds, in turn, the gradients of
  // post_attention_layernorm's output, of the attention's output and of
  // input_layernorm's output, each in the dtype its consumer takes ([Note:
  // norms' dout in 16 bits], [Note: attention's dout in 16 bits] in
  // modules/kernels.hpp); the products that sum into them add in that dtype.
  const Tensor grad_buf = ws.alloc(md, Shape{B, T, C});
  auto grad_view = [&](DType dt) { return Tensor(grad_buf.data, dt, grad_buf.shape, grad_buf.device); };
  const Tensor dln = grad_view(k.norm_bwd_dout_dtype(s[kRes], md));
  k.matmul(ws, dln, dgate, false, p[kGateW], false, false);
  k.matmul(ws, dln, dup, false, p[kUpW], false, true);
  // d res, and its operand for the two products below where the norm writes
  // it (an (B, T, C) buffer of ws in act dtype, after dh's).
  const DType res_partner = shared_partner(din, {s[kAtty].dtype, p[kOW].dtype});
  const Tensor dres_op = res_partner != din.dtype && k.norm_bwd_writes_operand(s[kRes], res_partner)
                             ? ws.alloc(res_partner, Shape{B, T, C})
                             : Tensor();
  k.rmsnorm_bwd(din, false, g[kLn2W], dln, s[kRes], p[kLn2W], s[kRstd2], dout, dres_op);

  // din now holds d res. Attention branch: res = x + atty Wo^T.
  const Tensor datty = grad_view(k.attention_bwd_dout_dtype(s[kQ], ctx.doc_start, md));
  {
    ArenaScope scope(ws);
    const Tensor dres_m = dres_op.defined() ? dres_op : shared_matmul_operand(k, ws, din, {s[kAtty].dtype, p[kOW].dtype});
    k.matmul(ws, g[kOW], dres_m, true, s[kAtty], false, acc);
    k.matmul(ws, datty, dres_m, false, p[kOW], false, false);
  }
  // [Note: attention's gradients in 16 bits]: where the backend makes them in
  // q's 16-bit dtype and the q, k and v products take them in that dtype,
  // they stay in it (the products' operands, with the bits of rounding the
  // f32 gradients once).
  DType gq = k.gqa_grad_dtype(s[kQ], ctx.doc_start, md);
  for (DType partner : {s[kLn1].dtype, p[kQW].dtype, p[kKW].dtype, p[kVW].dtype})
    if (partner != gq) gq = md;
  const Tensor dq = ws.alloc(gq, Shape{B, T, C});
  const Tensor dk = ws.alloc(gq, Shape{B, T, KV_});
  const Tensor dv = ws.alloc(gq, Shape{B, T, KV_});
  k.gqa_attention_bwd(ws, dq, dk, dv, datty, s[kQ], s[kK], s[kV], s[kAtty], s[kLse], n_head_, n_kv_head_, ctx.doc_start);
  k.rope_bwd(dq, dk, rope_, ctx.doc_start);  // gradients of the unrotated projections
  const Tensor dln1 = grad_view(k.norm_bwd_dout_dtype(in, md));
  {
    ArenaScope scope(ws);
    const Tensor dq_m = shared_matmul_operand(k, ws, dq, {s[kLn1].dtype, p[kQW].dtype});
    const Tensor dk_m = shared_matmul_operand(k, ws, dk, {s[kLn1].dtype, p[kKW].dtype});
    const Tensor dv_m = shared_matmul_operand(k, ws, dv, {s[kLn1].dtype, p[kVW].dtype});
    k.matmul(ws, g[kQW], dq_m, true, s[kLn1], false, acc);
    k.matmul(ws, g[kKW], dk_m, true, s[kLn1], false, acc);
    k.matmul(ws, g[kVW], dv_m, true, s[kLn1], false, acc);
    k.matmul(ws, dln1, dq_m, false, p[kQW], false, false);
    k.matmul(ws, dln1, dk_m, false, p[kKW], false, true);
    k.matmul(ws, dln1, dv_m, false, p[kVW], false, true);
  }
  k.rmsnorm_bwd(din, true, g[kLn1W], dln1, in, p[kLn1W], s[kRstd1], Tensor(), din_operand_space(k, ctx, in));
}

// ---- head ---------------------------------------------------------------------

LlamaHeadUnit::LlamaHeadUnit(const ModelShape& s, UnitDesc desc)
    : DescribedUnit(s, std::move(desc)), C_(s.d_model), eps_(s.rms_norm_eps) {
  const UnitDesc& d = this->desc();
  ZT_CHECK(d.kind == UnitKind::head && d.tensors.size() + d.tied.size() == 2, "unit ", d.name,
           " is not a Llama head");
}

void LlamaHeadUnit::init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                               int unit_index) const {
  ZT_CHECK(param >= 0 && param < static_cast<int>(desc().tensors.size()), "llama head has ",
           desc().tensors.size(), " own parameters, asked for ", param);
  if (param == 0)
    gpt_init::constant(out, count, 1.0f);  // norm.weight
  else
    gpt_init::normal(out, begin, count, gpt_init::kWeightStd, seed, unit_index, param);  // lm_head.weight
}

// params: norm.weight, then lm_head (own, or the tied embedding table).
void LlamaHeadUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& params, const Tensor& in,
                            const Tensor& out, Stash& stash) const {
  ZT_CHECK(params.size() == 2, "llama head expects norm.weight and the LM head matrix, got ", params.size());
  ZT_CHECK(ctx.targets.numel() == ctx.B * ctx.T, "head needs targets (B, T)");
  const int64_t N = ctx.B * ctx.T;
  const DType md = math_dtype(ctx.act_dtype);
  Arena& saved = *ctx.saved;
  stash.t.resize(kHeadStashSize);
  stash.t[kLnf] = saved.alloc(ctx.act_dtype, Shape{ctx.B, ctx.T, C_});
  stash.t[kLnfRstd] = saved.alloc(md, Shape{N});
  ctx.kernels->rmsnorm_fwd(stash.t[kLnf], stash.t[kLnfRstd], in, params[0], eps_);
  head_loss_fwd(ctx, out, stash.t[kLnf], params[1], stash.t[kLse2], stash.t[kLosses]);
}

void LlamaHeadUnit::backward(const UnitContext& ctx, const std::vector<Tensor>& params,
                             const std::vector<Tensor>& grads, const Tensor& in, const Tensor& dout,
                             const Tensor& din, Stash& stash) const {
  ZT_CHECK(grads.size() == 2 && stash.t.size() == kHeadStashSize, "llama head backward: bad grads or stash");
  Kernels& k = *ctx.kernels;
  const Tensor dlnf = ctx.scratch->alloc(math_dtype(ctx.act_dtype), Shape{ctx.B, ctx.T, C_});
  head_loss_bwd(ctx, dlnf, grads[1], dout, stash.t[kLnf], params[1], stash.t[kLse2], stash.t[kLosses]);
  k.rmsnorm_bwd(din, false, grads[0], dlnf, in, params[0], stash.t[kLnfRstd], Tensor(), din_operand_space(k, ctx, in));
}

}  // namespace zt
