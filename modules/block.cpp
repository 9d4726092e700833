// BlockUnit: one GPT-2 transformer block, pre-LayerNorm:
//   res = x + c_proj(attn(c_attn(ln_1(x))))
//   out = res + mlp.c_proj(gelu(mlp.c_fc(ln_2(res))))
#include <cmath>
#include <string>

#include "modules/gpt.hpp"
#include "modules/gpt_init.hpp"
#include "modules/kernels.hpp"

namespace zt {
namespace {

// Parameter order (also the order of the flat unit buffer).
enum BlockParam {
  kLn1W, kLn1B, kAttnW, kAttnB, kAttnProjW, kAttnProjB,
  kLn2W, kLn2B, kFcW, kFcB, kFcProjW, kFcProjB, kNumBlockParams
};

// What forward keeps for backward. The GELU output is kept beside its
// input: on the GPU the product before it writes both in its epilogue
// ([Note: GELU in the epilogue] in modules/cuda/matmul.cuh), so a recompute
// in the backward would be a pass of its own (4C more bytes a token in the
// storage dtype, about a third of the block's stash).
enum BlockStash {
  kLn1, kMean1, kRstd1,  // (B, T, C), (B*T), (B*T)
  kQkv,                  // (B, T, 3C)
  kAtty, kLse,           // (B, T, C), (B, NH, T)
  kRes,                  // (B, T, C) x + attention branch
  kLn2, kMean2, kRstd2,  // (B, T, C), (B*T), (B*T)
  kFch,                  // (B, T, 4C) pre-GELU
  kFcg,                  // (B, T, 4C) GELU output
  kNumBlockStash
};

}  // namespace

UnitDesc BlockUnit::describe(const ModelShape& s, int layer) {
  const int64_t C = s.d_model;
  UnitDesc d;
  d.name = "h." + std::to_string(layer);
  d.kind = UnitKind::block;
  d.checkpointable = true;
  // In BlockParam order. HF's Conv1D keeps the linear weights (in, out).
  const std::string hf = d.name + ".";
  const HfLayout conv1d = HfLayout::transposed;
  d.tensors = {
      {"ln_1.weight", Shape{C}, false, hf + "ln_1.weight"},
      {"ln_1.bias", Shape{C}, false, hf + "ln_1.bias"},
      {"attn.c_attn.weight", Shape{3 * C, C}, true, hf + "attn.c_attn.weight", conv1d, true},
      {"attn.c_attn.bias", Shape{3 * C}, false, hf + "attn.c_attn.bias"},
      {"attn.c_proj.weight", Shape{C, C}, true, hf + "attn.c_proj.weight", conv1d, true},
      {"attn.c_proj.bias", Shape{C}, false, hf + "attn.c_proj.bias"},
      {"ln_2.weight", Shape{C}, false, hf + "ln_2.weight"},
      {"ln_2.bias", Shape{C}, false, hf + "ln_2.bias"},
      {"mlp.c_fc.weight", Shape{4 * C, C}, true, hf + "mlp.c_fc.weight", conv1d, true},
      {"mlp.c_fc.bias", Shape{4 * C}, false, hf + "mlp.c_fc.bias"},
      {"mlp.c_proj.weight", Shape{C, 4 * C}, true, hf + "mlp.c_proj.weight", conv1d, true},
      {"mlp.c_proj.bias", Shape{C}, false, hf + "mlp.c_proj.bias"},
  };
  // BlockStash per token: ln1, atty, res, ln2 C each, qkv 3C, fch and fcg
  // 4C each (15C); fp32: two LayerNorms' mean and rstd, the attention's
  // log-sum-exp per head. Backward temporaries: the 16-bit operands (the
  // widest, GELU's gradient, 4C), and in fp32 GELU's gradient 4C where it is
  // not in the product's epilogue, dln C and dqkv 3C.
  d.act.output = {C, 0};
  d.act.stash = {15 * C, 4 + s.n_head};
  d.act.stash_from_products = {4 * C, 0};  // fcg, written by the first MLP product's epilogue on the GPU
  d.act.backward = {4 * C, 8 * C};
  return d;
}

BlockUnit::BlockUnit(const ModelShape& s, UnitDesc desc)
    : DescribedUnit(s, std::move(desc)),
      C_(s.d_model),
      n_head_(static_cast<int>(s.n_head)),
      n_layer_(static_cast<int>(s.n_layer)) {
  ZT_CHECK(this->desc().kind == UnitKind::block &&
               this->desc().tensors.size() == static_cast<size_t>(kNumBlockParams),
           "unit ", this->desc().name, " is not a GPT-2 block");
}

void BlockUnit::init_param(int param, int64_t begin, int64_t count, float* out, uint64_t seed,
                           int unit_index) const {
  switch (param) {
    case kLn1W:
    case kLn2W: gpt_init::constant(out, count, 1.0f); return;
    case kLn1B: case kLn2B: case kAttnB: case kAttnProjB: case kFcB: case kFcProjB:
      gpt_init::constant(out, count, 0.0f);
      return;
    case kAttnW:
    case kFcW: gpt_init::normal(out, begin, count, gpt_init::kWeightStd, seed, unit_index, param); return;
    case kAttnProjW:
    case kFcProjW: {
      // GPT-2 scales the projections into the residual stream by 1/sqrt(2 L):
      // each block adds two of them.
      const double std = gpt_init::kWeightStd / std::sqrt(2.0 * n_layer_);
      gpt_init::normal(out, begin, count, std, seed, unit_index, param);
      return;
    }
    default: ZT_THROW("block has ", kNumBlockParams, " parameters, asked for ", param);
  }
}

void BlockUnit::forward(const UnitContext& ctx, const std::vector<Tensor>& p, const Tensor& in,
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
  s[kMean1] = saved.alloc(md, Shape{N});
  s[kRstd1] = saved.alloc(md, Shape{N});
  // res = x + atty W^T + b: the projection accumulates onto a copy of x, so
  // 16-bit storage rounds once rather than twice; the norm writes the copy
  // ([Note: residual stream] in kernels.hpp).
  s[kRes] = saved.alloc(act, Shape{B, T, C});
  k.layernorm_fwd(s[kLn1], s[kMean1], s[kRstd1], in, p[kLn1W], p[kLn1B], s[kRes]);
  s[kQkv] = saved.alloc(act, Shape{B, T, 3 * C});
  k.matmul(ws, s[kQkv], s[kLn1], false, p[kAttnW], true, false, p[kAttnB]);  // (B, T, 3C)
  s[kAtty] = saved.alloc(act, Shape{B, T, C});
  s[kLse] = saved.alloc(md, Shape{B, n_head_, T});
  k.attention_fwd(ws, s[kAtty], s[kLse], s[kQkv], n_head_, ctx.doc_start);
  k.matmul(ws, s[kRes], s[kAtty], false, p[kAttnProjW], true, true, p[kAttnProjB]);

  // MLP branch.
  s[kLn2] = saved.alloc(act, Shape{B, T, C});
  s[kMean2] = saved.alloc(md, Shape{N});
  s[kRstd2] = saved.alloc(md, Shape{N});
  k.layernorm_fwd(s[kLn2], s[kMean2], s[kRstd2], s[kRes], p[kLn2W], p[kLn2B], out);  // out = res, then += mlp
  s[kFch] = saved.alloc(act, Shape{B, T, 4 * C});
  s[kFcg] = saved.alloc(act, Shape{B, T, 4 * C});
  k.matmul_bias_gelu(ws, s[kFcg], s[kFch], s[kLn2], p[kFcW], true, p[kFcB]);  // (B, T, 4C) each
  k.matmul(ws, out, s[kFcg], false, p[kFcProjW], true, true, p[kFcProjB]);  // out = res + mlp
}

void BlockUnit::backward(const UnitContext& ctx, const std::vector<Tensor>& p,
                         const std::vector<Tensor>& g, const Tensor& in, const Tensor& dout,
                         const Tensor& din, Stash& stash) const {
  ZT_CHECK(g.size() == kNumBlockParams && stash.t.size() == kNumBlockStash, name(),
           " backward: bad gradients or stash");
  const int64_t B = ctx.B, T = ctx.T, C = C_;
  const DType act = ctx.act_dtype, md = math_dtype(act);
  Kernels& k = *ctx.kernels;
  Arena& ws = *ctx.scratch;
  const std::vector<Tensor>& s = stash.t;
  // The four weight gradients are written whole by one product each: added
  // into, or written at the step's first backward ([Note: gradients written,
  // not zeroed]).
  const bool acc = !ctx.grads_fresh;

  // din collects the residual path's gradient and both branches': the MLP
  // norm's backward writes din = dout + its input gradient.

  // MLP branch: out = res + fcg Wp^T + bp, fcg = gelu(fch), fch = ln2 Wfc^T + bfc.
  const Tensor& fcg = s[kFcg];
  // One (B, T, C) math-dtype buffer holds, in turn, the gradients of ln_2's
  // output, of the attention's output and of ln_1's output, each in the
  // dtype its consumer takes ([Note: norms' dout in 16 bits], [Note:
  // attention's dout in 16 bits] in modules/kernels.hpp).
  const Tensor grad_buf = ws.alloc(md, Shape{B, T, C});
  auto grad_view = [&](DType dt) { return Tensor(grad_buf.data, dt, grad_buf.shape, grad_buf.device); };
  const Tensor dln = grad_view(k.norm_bwd_dout_dtype(s[kRes], md));
  // Each f32 gradient below feeds its bias gradient and two products, which
  // read it converted once: one pass over it (bias_grad_and_operand, the
  // operand in a scope of ws that ends after the products).
  {
    ArenaScope scope(ws);
    const Tensor dout_m =
        k.bias_grad_and_operand(ws, g[kFcProjB], dout, shared_partner(dout, {fcg.dtype, p[kFcProjW].dtype}));
    k.matmul(ws, g[kFcProjW], dout_m, true, fcg, false, acc);  // (C, 4C) += dout^T fcg
    // d fch = (dout Wp) * gelu'(fch), its bias gradient and its operand: the
    // product and GELU's backward in one call where the backend fuses them.
    const Tensor dfc_m = k.matmul_gelu_bwd_bias_grad_and_operand(
        ws, g[kFcB], md, dout_m, p[kFcProjW], false, s[kFch], shared_partner(dout, {s[kLn2].dtype, p[kFcW].dtype}));
    k.matmul(ws, g[kFcW], dfc_m, true, s[kLn2], false, acc);  // (4C, C) += dfch^T ln2
    k.matmul(ws, dln, dfc_m, false, p[kFcW], false, false);    // (B, T, C) = dfch Wfc
  }
  k.layernorm_bwd(din, false, g[kLn2W], g[kLn2B], dln, s[kRes], p[kLn2W], s[kMean2], s[kRstd2], dout);

  // din now holds d res. Attention branch: res = x + atty Wp^T + bp.
  const Tensor datty = grad_view(k.attention_bwd_dout_dtype(s[kQkv], ctx.doc_start, md));
  {
    ArenaScope scope(ws);
    const Tensor dres_m =
        k.bias_grad_and_operand(ws, g[kAttnProjB], din, shared_partner(din, {s[kAtty].dtype, p[kAttnProjW].dtype}));
    k.matmul(ws, g[kAttnProjW], dres_m, true, s[kAtty], false, acc);  // (C, C) += dres^T atty
    k.matmul(ws, datty, dres_m, false, p[kAttnProjW], false, false);
  }
  const Tensor dqkv = ws.alloc(md, Shape{B, T, 3 * C});
  const Tensor dln1 = grad_view(k.norm_bwd_dout_dtype(in, md));
  {
    ArenaScope scope(ws);
    // Attention's gradient, its bias gradient and its operand: cuDNN's 16-bit
    // gradients serve as the operand directly where the backend has them.
    const Tensor dqkv_m = k.attention_bwd_bias_grad_and_operand(
        ws, g[kAttnB], dqkv, datty, s[kQkv], s[kAtty], s[kLse], n_head_, ctx.doc_start,
        shared_partner(dqkv, {s[kLn1].dtype, p[kAttnW].dtype}));
    k.matmul(ws, g[kAttnW], dqkv_m, true, s[kLn1], false, acc);  // (3C, C) += dqkv^T ln1
    k.matmul(ws, dln1, dqkv_m, false, p[kAttnW], false, false);   // (B, T, C) = dqkv Wattn
  }
  k.layernorm_bwd(din, true, g[kLn1W], g[kLn1B], dln1, in, p[kLn1W], s[kMean1], s[kRstd1]);
}

}  // namespace zt
