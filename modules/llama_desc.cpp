#include "modules/llama_desc.hpp"

#include <string>
#include <utility>

#include "core/error.hpp"

namespace zt {

ModelShape llama_shape(std::string name, int64_t n_layer, int64_t d_model, int64_t n_head, int64_t n_kv_head,
                       int64_t ffn_hidden, int64_t vocab, int64_t seq_len) {
  ModelShape s;
  s.arch = "llama";
  s.name = std::move(name);
  s.n_layer = n_layer;
  s.d_model = d_model;
  s.n_head = n_head;
  s.n_kv_head = n_kv_head;
  s.ffn_hidden = ffn_hidden;
  s.vocab = vocab;
  s.seq_len = seq_len;
  s.rms_norm_eps = 1e-5;
  s.rope.head_dim = n_head > 0 ? d_model / n_head : 0;
  s.rope.theta = 10000.0;
  return s;
}

ModelShape llama2_70b_shape() { return llama_shape("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096); }

namespace {

UnitDesc llama_embedding(const ModelShape& s) {
  UnitDesc d;
  d.name = "embedding";
  d.kind = UnitKind::embedding;
  d.tensors = {{"embed_tokens.weight", Shape{s.vocab, s.d_model}, true, "model.embed_tokens.weight"}};
  d.act.output = {s.d_model, 0};
  return d;
}

// The conventions of the GPT-2 block (block.cpp) applied to RMSNorm, GQA and
// SwiGLU: the stash keeps both norms' outputs, q, k and v, the attention
// output, the residual, gate and up (SiLU(gate) * up is recomputed in
// backward, as GELU is); fp32: one rstd per RMSNorm and the log-sum-exp per
// head. Backward temporaries: the recomputed SiLU(gate) * up F, and in fp32
// the gradients of gate and up, of a norm input and of q, k, v.
UnitDesc llama_block(const ModelShape& s, int layer) {
  const int64_t C = s.d_model, F = s.ffn_hidden, KV = s.kv_width();
  UnitDesc d;
  d.name = "h." + std::to_string(layer);
  d.kind = UnitKind::block;
  d.checkpointable = true;
  const std::string hf = "model.layers." + std::to_string(layer) + ".";
  // The 2-D weights' gradients are each written by one product
  // ([Note: gradients written, not zeroed] in zero/zero_engine.hpp).
  auto t = [&](const char* name, Shape shape) {
    return TensorDesc{name, shape, shape.rank() == 2, hf + name, HfLayout::as_is, shape.rank() == 2};
  };
  d.tensors = {t("input_layernorm.weight", Shape{C}),
               t("self_attn.q_proj.weight", Shape{C, C}),
               t("self_attn.k_proj.weight", Shape{KV, C}),
               t("self_attn.v_proj.weight", Shape{KV, C}),
               t("self_attn.o_proj.weight", Shape{C, C}),
               t("post_attention_layernorm.weight", Shape{C}),
               t("mlp.gate_proj.weight", Shape{F, C}),
               t("mlp.up_proj.weight", Shape{F, C}),
               t("mlp.down_proj.weight", Shape{C, F})};
  d.act.output = {C, 0};
  d.act.stash = {4 * C + s.qkv_width() + 2 * F, 2 + s.n_head};
  d.act.backward = {F, 2 * F + C + s.qkv_width()};
  return d;
}

// Untied: lm_head.weight is the head's own; tied (tie_word_embeddings): the
// LM head reads the embedding's table, as GPT-2's does.
UnitDesc llama_head(const ModelShape& s) {
  const int64_t C = s.d_model;
  UnitDesc d;
  d.name = "head";
  d.kind = UnitKind::head;
  d.tensors = {{"norm.weight", Shape{C}, false, "model.norm.weight"}};
  if (s.tie_word_embeddings)
    d.tied = {TiedParam{0, 0}};
  else
    d.tensors.push_back({"lm_head.weight", Shape{s.vocab, C}, true, "lm_head.weight"});
  // As GPT-2's head (gpt.cpp) with one rstd instead of mean and rstd.
  d.act.output = {0, 1};
  d.act.stash = {C, 2};
  d.act.backward = {0, C};
  d.act.logits_width = s.vocab;
  return d;
}

}  // namespace

ModelDesc describe_llama(const ModelShape& s) {
  s.validate();
  ZT_CHECK(s.arch == "llama", "describe_llama of a ", s.arch, " shape");
  if (s.head_dim() % 2 != 0)
    ZT_USER_ERROR("model shape ", s.name, " (llama): the head size d_model / n_head = ", s.head_dim(),
                  " must be even for rotary embeddings");
  ZT_CHECK(s.rope.head_dim == s.head_dim(), "model shape ", s.name, ": rope.head_dim ", s.rope.head_dim,
           " is not the head size ", s.head_dim());
  ModelDesc d;
  d.shape = s;
  d.units.push_back(llama_embedding(s));
  for (int l = 0; l < s.n_layer; ++l) d.units.push_back(llama_block(s, l));
  d.units.push_back(llama_head(s));
  // As GPT-2's estimate (gpt.hpp): an untied embedding table is a lookup
  // only; a tied one is also the LM head's matrix.
  const double n = static_cast<double>(d.num_params()) -
                   (s.tie_word_embeddings ? 0.0 : static_cast<double>(s.vocab * s.d_model));
  d.flops_per_token = 6.0 * n + 12.0 * static_cast<double>(s.n_layer * s.d_model * s.seq_len);
  return d;
}

}  // namespace zt
