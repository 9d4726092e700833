#include "modules/model_desc.hpp"

#include "core/error.hpp"
#include "modules/gpt.hpp"
#include "modules/llama_desc.hpp"

namespace zt {

void ModelShape::validate() const {
  auto need = [&](bool ok, const char* what, int64_t v) {
    if (!ok) ZT_USER_ERROR("model shape ", name, " (", arch, "): ", what, ", got ", v);
  };
  need(n_layer >= 1, "n_layer must be >= 1", n_layer);
  need(n_head >= 1 && d_model >= 1 && d_model % n_head == 0, "d_model must be a positive multiple of n_head",
       d_model);
  need(n_kv_head >= 1 && n_head % n_kv_head == 0, "n_kv_head must divide n_head", n_kv_head);
  need(ffn_hidden >= 1, "ffn_hidden must be >= 1", ffn_hidden);
  need(vocab >= 1, "vocab must be >= 1", vocab);
  need(seq_len >= 1, "seq_len must be >= 1", seq_len);
}

TokenBytes operator+(const TokenBytes& a, const TokenBytes& b) { return {a.act + b.act, a.f32 + b.f32}; }

Shape TensorDesc::hf_shape() const {
  if (hf_layout == HfLayout::as_is) return shape;
  ZT_CHECK(shape.rank() == 2, "tensor ", name, ": a transposed layout needs a 2-D shape, got ", shape.str());
  return Shape{shape[1], shape[0]};
}

const char* unit_kind_name(UnitKind kind) {
  switch (kind) {
    case UnitKind::embedding: return "embedding";
    case UnitKind::block: return "block";
    case UnitKind::head: return "head";
  }
  return "?";
}

int64_t UnitDesc::numel() const {
  int64_t n = 0;
  for (const TensorDesc& t : tensors) n += t.shape.numel();
  return n;
}

std::vector<ParamSpec> UnitDesc::params() const {
  std::vector<ParamSpec> out;
  out.reserve(tensors.size());
  for (const TensorDesc& t : tensors) out.push_back({t.name, t.shape, t.weight_decay, t.grad_overwritten});
  return out;
}

int64_t ModelDesc::num_params() const {
  int64_t n = 0;
  for (const UnitDesc& u : units) n += u.numel();
  return n;
}

std::vector<int64_t> ModelDesc::unit_numels() const {
  std::vector<int64_t> out;
  for (const UnitDesc& u : units) out.push_back(u.numel());
  return out;
}

std::vector<std::vector<int>> ModelDesc::unit_ties() const {
  std::vector<std::vector<int>> out;
  for (const UnitDesc& u : units) {
    out.emplace_back();
    for (const TiedParam& t : u.tied) out.back().push_back(t.unit);
  }
  return out;
}

namespace {

// "gpt2-124m"; "gpt2 tiny" for a preset that does not name its architecture;
// "gpt2 (custom sizes)" without a preset.
std::string report_name(const ModelConfig& cfg) {
  if (cfg.preset.empty()) return cfg.arch + " (custom sizes)";
  if (cfg.preset.rfind(cfg.arch, 0) == 0) return cfg.preset;
  return cfg.arch + " " + cfg.preset;
}

}  // namespace

ModelDesc describe_model(const ModelConfig& cfg) {
  if (cfg.arch == "gpt2")
    return describe_gpt2(
        gpt2_shape(GptConfig{cfg.n_layer, cfg.n_head, cfg.d_model, cfg.seq_len, cfg.vocab_size}, report_name(cfg)));
  if (cfg.arch == "llama") {
    ModelShape s = llama_shape(report_name(cfg), cfg.n_layer, cfg.d_model, cfg.n_head, cfg.num_key_value_heads,
                               cfg.intermediate_size, cfg.vocab_size, cfg.seq_len);
    s.rms_norm_eps = cfg.rms_norm_eps;
    s.tie_word_embeddings = cfg.tie_word_embeddings;
    s.rope.theta = cfg.rope_theta;
    const RopeScalingConfig& rs = cfg.rope_scaling;
    s.rope.llama3 = rs.llama3;
    s.rope.factor = rs.factor;
    s.rope.low_freq_factor = rs.low_freq_factor;
    s.rope.high_freq_factor = rs.high_freq_factor;
    s.rope.original_max_position_embeddings = rs.original_max_position_embeddings;
    return describe_llama(s);
  }
  std::string known;
  for (const std::string& a : model_architectures()) known += (known.empty() ? "\"" : ", \"") + a + "\"";
  ZT_USER_ERROR("model.arch: unknown architecture \"", cfg.arch, "\"; known architectures: ", known);
}

std::string recompute_description(bool checkpointing, int layers) {
  if (!checkpointing) return "off";
  if (layers < 0) return "on";
  return "on for the first " + std::to_string(layers) + " blocks of each chunk";
}

std::vector<bool> recomputed_units(const std::vector<bool>& checkpointable,
                                   const std::vector<std::vector<int>>& chunks, bool checkpointing, int layers) {
  std::vector<bool> out(checkpointable.size(), false);
  if (!checkpointing) return out;
  for (const std::vector<int>& chunk : chunks) {
    int left = layers;
    for (int u : chunk) {
      ZT_CHECK(u >= 0 && static_cast<size_t>(u) < checkpointable.size(), "unit ", u, " outside the model's ",
               checkpointable.size());
      if (!checkpointable[static_cast<size_t>(u)] || left == 0) continue;
      out[static_cast<size_t>(u)] = true;
      if (left > 0) --left;
    }
  }
  return out;
}

}  // namespace zt
