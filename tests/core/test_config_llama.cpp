// model.arch "llama": its keys, presets and defaults, the keys refused for
// another arch, rope_scaling's forms, and the resolved config (what
// checkpoint manifests keep) read back to the same model.
#include "config_test_util.hpp"

namespace zt::test {
namespace {

TEST(ConfigLlama, ArchWithoutPresetStartsFromLlamaTiny) {
  const ModelConfig m = parse(R"({"model": {"arch": "llama"}})").model;
  EXPECT_EQ(m.arch, "llama");
  EXPECT_EQ(m.preset, "llama-tiny");
  EXPECT_EQ(m.n_head, 4);
  EXPECT_EQ(m.num_key_value_heads, 2);
  EXPECT_EQ(m.intermediate_size, 176);
  EXPECT_TRUE(m.rope_scaling.llama3);
  EXPECT_FALSE(m.tie_word_embeddings);
  const ModelConfig c = parse(R"({"model": {"arch": "llama", "num_key_value_heads": 1}})").model;
  EXPECT_EQ(c.preset, "");  // custom sizes
  EXPECT_EQ(c.num_key_value_heads, 1);
}

TEST(ConfigLlama, PresetValues) {
  const ModelConfig m = parse(R"({"model": {"preset": "llama3.1-8b"}})").model;
  EXPECT_EQ(m.arch, "llama");
  EXPECT_EQ(m.n_layer, 32);
  EXPECT_EQ(m.d_model, 4096);
  EXPECT_EQ(m.n_head, 32);
  EXPECT_EQ(m.num_key_value_heads, 8);
  EXPECT_EQ(m.intermediate_size, 14336);
  EXPECT_EQ(m.vocab_size, 128256);
  EXPECT_EQ(m.rope_theta, 500000.0);
  EXPECT_EQ(m.rms_norm_eps, 1e-5);
  EXPECT_TRUE(m.rope_scaling.llama3);
  EXPECT_EQ(m.rope_scaling.factor, 8.0);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 8192);
  const ModelConfig g = parse(R"({"model": {"preset": "gpt2-124m"}})").model;
  EXPECT_EQ(g.arch, "gpt2");
  EXPECT_EQ(g.num_key_value_heads, 0);
}

TEST(ConfigLlama, KeysOfAnotherArchAreRefusedByName) {
  for (const char* key : {"intermediate_size", "num_key_value_heads", "rms_norm_eps", "rope_theta",
                          "tie_word_embeddings"}) {
    const std::string v = std::string(key) == "tie_word_embeddings" ? "true" : "2";
    EXPECT_EQ(parse_error(std::string(R"({"model": {")") + key + "\": " + v + "}}"),
              std::string("config.json: model.") + key +
                  ": applies to model.arch \"llama\" only; this model is a \"gpt2\"");
  }
  EXPECT_CONTAINS(parse_error(R"({"model": {"preset": "tiny", "rope_scaling": {"rope_type": "llama3"}}})"),
                  "model.rope_scaling: applies to model.arch \"llama\" only");
  EXPECT_EQ(parse_error(R"({"model": {"preset": "llama2-7b", "arch": "gpt2"}})"),
            "config.json: model.arch: \"gpt2\" contradicts preset \"llama2-7b\", a \"llama\"");
}

TEST(ConfigLlama, RopeScalingForms) {
  const char* base = R"({"model": {"preset": "llama-tiny", "rope_scaling": )";
  auto model = [&](const std::string& rs) { return parse(base + rs + "}}").model; };
  auto error = [&](const std::string& rs) { return parse_error(base + rs + "}}"); };
  // null keeps the preset's; "default" is none; the older "type" spelling.
  EXPECT_TRUE(model("null").rope_scaling.llama3);
  EXPECT_FALSE(model(R"({"rope_type": "default"})").rope_scaling.llama3);
  const ModelConfig t = model(
      R"({"type": "llama3", "factor": 2, "low_freq_factor": 1, "high_freq_factor": 3, "original_max_position_embeddings": 32})");
  EXPECT_TRUE(t.rope_scaling.llama3);
  EXPECT_EQ(t.rope_scaling.factor, 2.0);
  EXPECT_EQ(t.rope_scaling.high_freq_factor, 3.0);
  EXPECT_EQ(t.rope_scaling.original_max_position_embeddings, 32);
  EXPECT_EQ(error(R"({"rope_type": "yarn", "factor": 4})"),
            "config.json: model.rope_scaling.rope_type: rope scaling \"yarn\" is not supported; ztrain implements "
            "\"llama3\" (and \"default\": none)");
  EXPECT_EQ(error(R"({"type": "linear", "factor": 4})"),
            "config.json: model.rope_scaling.type: rope scaling \"linear\" is not supported; ztrain implements "
            "\"llama3\" (and \"default\": none)");
  EXPECT_EQ(error(R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4})"),
            "config.json: model.rope_scaling.original_max_position_embeddings: required for rope_type \"llama3\"");
  EXPECT_CONTAINS(error(R"({"rope_type": "default", "factor": 8})"),
                  "model.rope_scaling.factor: applies to rope_type \"llama3\" only");
  EXPECT_CONTAINS(
      error(R"({"rope_type": "llama3", "factor": 8, "low_freq_factor": 4, "high_freq_factor": 4, "original_max_position_embeddings": 10})"),
      "model.rope_scaling.high_freq_factor: must be greater than low_freq_factor");
  EXPECT_CONTAINS(error(R"({"rope_type": "llama3", "factr": 8})"), "model.rope_scaling.factr: unknown key");
  EXPECT_CONTAINS(error("4"), "model.rope_scaling: expected an object");
  EXPECT_CONTAINS(error(R"({"factor": 8})"), "model.rope_scaling.rope_type: required");
}

TEST(ConfigLlama, ShapeChecks) {
  EXPECT_EQ(parse_error(R"({"model": {"arch": "llama", "num_key_value_heads": 3}})"),
            "config.json: model.num_key_value_heads: num_key_value_heads (3) must divide n_head (4)");
  EXPECT_CONTAINS(parse_error(R"({"model": {"arch": "llama", "n_head": 4, "d_model": 36}})"),
                  "model.d_model: the head size d_model / n_head (9) must be even for rotary embeddings");
  EXPECT_CONTAINS(parse_error(R"({"model": {"arch": "llama", "rms_norm_eps": 0}})"), "model.rms_norm_eps");
}

// resolved_json is what a checkpoint manifest keeps; reading it back gives
// the same model, whether the scaling is on, off against a preset that has
// it, or the head tied.
TEST(ConfigLlama, ResolvedConfigReadsBackTheSameModel) {
  for (const char* text :
       {R"({"model": {"preset": "llama-tiny"}})",
        R"({"model": {"preset": "llama-tiny", "rope_scaling": {"rope_type": "default"}, "tie_word_embeddings": true}})",
        R"({"model": {"preset": "llama3.1-70b", "rope_theta": 1000, "rms_norm_eps": 1e-6}})",
        R"({"model": {"arch": "llama", "n_layer": 3, "num_key_value_heads": 1, "intermediate_size": 40}})",
        R"({"model": {"preset": "gpt2-124m"}})"}) {
    SCOPED_TRACE(text);
    const Config a = parse(text);
    const nlohmann::json j = resolved_json(a);
    const ModelConfig b = parse_config(nlohmann::json{{"model", j["model"]}}, "manifest").model;
    const ModelConfig& m = a.model;
    EXPECT_EQ(b.arch, m.arch);
    EXPECT_EQ(b.preset, m.preset);
    EXPECT_EQ(b.n_layer, m.n_layer);
    EXPECT_EQ(b.intermediate_size, m.intermediate_size);
    EXPECT_EQ(b.num_key_value_heads, m.num_key_value_heads);
    EXPECT_EQ(b.rms_norm_eps, m.rms_norm_eps);
    EXPECT_EQ(b.rope_theta, m.rope_theta);
    EXPECT_EQ(b.rope_scaling.llama3, m.rope_scaling.llama3);
    EXPECT_EQ(b.rope_scaling.factor, m.rope_scaling.factor);
    EXPECT_EQ(b.rope_scaling.low_freq_factor, m.rope_scaling.low_freq_factor);
    EXPECT_EQ(b.rope_scaling.high_freq_factor, m.rope_scaling.high_freq_factor);
    EXPECT_EQ(b.rope_scaling.original_max_position_embeddings, m.rope_scaling.original_max_position_embeddings);
    EXPECT_EQ(b.tie_word_embeddings, m.tie_word_embeddings);
  }
}

}  // namespace
}  // namespace zt::test
