#include "io/hf_config.hpp"

#include <cmath>
#include <fstream>
#include <limits>

#include "core/error.hpp"

namespace zt {
namespace {

// Reads the fields of one config.json object, each error naming the file and
// the field.
struct Fields {
  static constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
  const nlohmann::json& j;
  std::string path;

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    ZT_USER_ERROR(path, ": ", field, ": ", what);
  }
  bool has(const std::string& k) const { return j.contains(k) && !j[k].is_null(); }
  int64_t integer(const std::string& k) const {
    if (!has(k)) fail(k, "missing (needed to describe the model)");
    // ztrain's model sizes are ints; the bound also keeps the products
    // checked below (4 * n_embd, head_dim * heads) inside int64.
    if (!j[k].is_number_integer() || j[k].get<int64_t>() <= 0 || j[k].get<int64_t>() > kMaxSize)
      fail(k, "expected a positive integer up to " + std::to_string(kMaxSize) + ", found " + j[k].dump());
    return j[k].get<int64_t>();
  }
  int64_t integer(const std::string& k, int64_t dflt) const { return has(k) ? integer(k) : dflt; }
  double number(const std::string& k, double dflt) const {
    if (!has(k)) return dflt;
    if (!j[k].is_number()) fail(k, "expected a number, found " + j[k].dump());
    return j[k].get<double>();
  }
  bool boolean(const std::string& k, bool dflt) const {
    if (!has(k)) return dflt;
    if (!j[k].is_boolean()) fail(k, "expected true or false, found " + j[k].dump());
    return j[k].get<bool>();
  }
  std::string string(const std::string& k, const std::string& dflt) const {
    if (!has(k)) return dflt;
    if (!j[k].is_string()) fail(k, "expected a string, found " + j[k].dump());
    return j[k].get<std::string>();
  }
};

nlohmann::json gpt2_section(const Fields& f) {
  const int64_t C = f.integer("n_embd");
  if (f.has("n_inner") && f.integer("n_inner") != 4 * C)
    f.fail("n_inner", "ztrain's GPT-2 MLP is 4 * n_embd = " + std::to_string(4 * C) + " wide, found " +
                          f.j["n_inner"].dump());
  const std::string act = f.string("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    f.fail("activation_function", "'" + act + "' is not supported (ztrain's GPT-2 uses the tanh GELU, gelu_new)");
  const double eps = f.number("layer_norm_epsilon", 1e-5);
  if (std::abs(eps - 1e-5) > 1e-12)
    f.fail("layer_norm_epsilon", "ztrain's LayerNorm uses 1e-5, found " + f.j["layer_norm_epsilon"].dump());
  if (!f.boolean("tie_word_embeddings", true))
    f.fail("tie_word_embeddings", "false is not supported for gpt2 (ztrain's GPT-2 head is tied to wte)");
  if (!f.boolean("scale_attn_weights", true))
    f.fail("scale_attn_weights", "false is not supported (ztrain scales attention by 1/sqrt(head_dim))");
  if (f.boolean("scale_attn_by_inverse_layer_idx", false))
    f.fail("scale_attn_by_inverse_layer_idx", "true is not supported");
  if (f.boolean("add_cross_attention", false)) f.fail("add_cross_attention", "true is not supported");
  return {{"arch", "gpt2"},
          {"n_layer", f.integer("n_layer")},
          {"n_head", f.integer("n_head")},
          {"d_model", C},
          {"seq_len", f.integer("n_positions")},
          {"vocab_size", f.integer("vocab_size")}};
}

// The rotary frequencies of either form, as ztrain's keys: rope_theta and,
// for Llama 3's scaling, rope_scaling {rope_type "llama3", factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}.
void llama_rope(const Fields& f, nlohmann::json& out) {
  double theta = f.number("rope_theta", 10000.0);
  nlohmann::json scaling;  // null: default
  std::string field = "rope_scaling";
  if (f.has("rope_parameters")) {
    field = "rope_parameters";
    const nlohmann::json& p = f.j["rope_parameters"];
    if (!p.is_object()) f.fail(field, "expected an object, found " + p.dump());
    if (p.contains("rope_theta")) {
      if (!p["rope_theta"].is_number()) f.fail(field + ".rope_theta", "expected a number, found " + p["rope_theta"].dump());
      theta = p["rope_theta"].get<double>();
    }
    scaling = p;
  } else if (f.has("rope_scaling")) {
    scaling = f.j["rope_scaling"];
    if (!scaling.is_object()) f.fail(field, "expected an object, found " + scaling.dump());
  }
  if (!(theta > 0)) f.fail("rope_theta", "expected a positive number");
  out["rope_theta"] = theta;
  // Explicit "default": an absent key would keep the llama preset's scaling.
  out["rope_scaling"] = {{"rope_type", "default"}};
  if (scaling.is_null()) return;
  std::string type = "default";
  if (scaling.contains("rope_type")) type = scaling["rope_type"].is_string() ? scaling["rope_type"].get<std::string>() : "";
  else if (scaling.contains("type")) type = scaling["type"].is_string() ? scaling["type"].get<std::string>() : "";
  if (type == "default") return;
  if (type != "llama3")
    f.fail(field + ".rope_type", "'" + (type.empty() ? scaling.dump() : type) +
                                     "' is not supported (ztrain implements the default and llama3 rotary frequencies)");
  nlohmann::json s = {{"rope_type", "llama3"}};
  for (const char* k : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    if (!scaling.contains(k) || !scaling[k].is_number() || !(scaling[k].get<double>() > 0))
      f.fail(field + "." + k, "llama3 rope scaling needs a positive number, found " +
                                  (scaling.contains(k) ? scaling[k].dump() : std::string("nothing")));
    s[k] = scaling[k];
  }
  out["rope_scaling"] = s;
}

nlohmann::json llama_section(const Fields& f) {
  const int64_t C = f.integer("hidden_size"), H = f.integer("num_attention_heads");
  if (f.has("head_dim") && f.integer("head_dim") * H != C)
    f.fail("head_dim", "ztrain's Llama has head_dim = hidden_size / num_attention_heads = " +
                           std::to_string(C / H) + ", found " + f.j["head_dim"].dump());
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu") f.fail("hidden_act", "'" + act + "' is not supported (ztrain's Llama MLP is SwiGLU: silu)");
  if (f.boolean("attention_bias", false)) f.fail("attention_bias", "true is not supported (ztrain's Llama has no biases)");
  if (f.boolean("mlp_bias", false)) f.fail("mlp_bias", "true is not supported (ztrain's Llama has no biases)");
  nlohmann::json out = {{"arch", "llama"},
                        {"n_layer", f.integer("num_hidden_layers")},
                        {"n_head", H},
                        {"d_model", C},
                        {"seq_len", f.integer("max_position_embeddings")},
                        {"vocab_size", f.integer("vocab_size")},
                        {"intermediate_size", f.integer("intermediate_size")},
                        {"num_key_value_heads", f.integer("num_key_value_heads", H)},
                        {"rms_norm_eps", f.number("rms_norm_eps", 1e-6)},
                        {"tie_word_embeddings", f.boolean("tie_word_embeddings", false)}};
  llama_rope(f, out);
  return out;
}

}  // namespace

nlohmann::json hf_model_section(const nlohmann::json& hf, const std::string& path) {
  if (!hf.is_object()) ZT_USER_ERROR(path, ": expected a JSON object");
  const Fields f{hf, path};
  if (!f.has("model_type")) f.fail("model_type", "missing (expected \"gpt2\" or \"llama\")");
  const std::string type = f.string("model_type", "");
  if (type == "gpt2") return gpt2_section(f);
  if (type == "llama") return llama_section(f);
  f.fail("model_type", "'" + type + "' is not supported (ztrain imports \"gpt2\" and \"llama\")");
}

nlohmann::json read_hf_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) ZT_USER_ERROR("cannot read ", path, " (a Hugging Face model directory has a config.json)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    ZT_USER_ERROR(path, ": not JSON: ", e.what());
  }
}

}  // namespace zt
