// Reading Hugging Face models: the safetensors reader (values of every dtype,
// slices, and each malformed input named by file and tensor), config.json as
// a model section (both rope forms; every unsupported field named), and the
// tensor mapping of train/init_from.hpp on synthetic directories made from
// the model description (GPT-2's Conv1D transposition, Llama's q/k rows kept
// in Hugging Face's order, missing / extra / misshapen tensors).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/hf_config.hpp"
#include "io/safetensors.hpp"
#include "modules/model_desc.hpp"
#include "temp_dir.hpp"
#include "train/init_from.hpp"

using zt::test::TempDir;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Runs fn, which must throw zt::UserError; returns its message.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const zt::UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError thrown";
  return "";
}

// A safetensors file from a raw header text and data bytes.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header;
  out << std::string(data_bytes, '\0');
}

void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }

TEST(SafeTensorsReader, ReadsEveryDtypeAndSlices) {
  TempDir dir;
  const std::vector<float> a = {1.0f, -2.5f, 3.25f, 1e-3f, 7.0f, -0.0f};
  std::vector<uint8_t> bf(4), hf(4);
  const uint16_t b0 = zt::f32_to_bf16(1.5f).bits, b1 = zt::f32_to_bf16(-3.0f).bits;
  std::memcpy(bf.data(), &b0, 2);
  std::memcpy(bf.data() + 2, &b1, 2);
  const uint16_t h0 = 0x3E00, h1 = 0xC100;  // f16 1.5, -2.5
  std::memcpy(hf.data(), &h0, 2);
  std::memcpy(hf.data() + 2, &h1, 2);
  zt::write_safetensors(dir / "m.safetensors",
                        {{"a", "F32", {2, 3}, f32_bytes(a)}, {"b", "BF16", {2}, bf}, {"h", "F16", {2}, hf}}, {});
  zt::SafeTensorsFile f(dir / "m.safetensors");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "h"}));
  std::vector<float> out(3);
  f.read_f32("a", 2, 5, out.data());
  EXPECT_EQ(out, (std::vector<float>{3.25f, 1e-3f, 7.0f}));
  f.read_f32("b", 0, 2, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -3.0f);
  f.read_f32("h", 0, 2, out.data());
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.5f);
  EXPECT_EQ(f.entry("a").shape, (std::vector<int64_t>{2, 3}));
}

TEST(SafeTensorsReader, BadFilesAreNamed) {
  TempDir dir;
  const std::string p = dir / "bad.safetensors";
  write_raw(p, "{not json", 0);
  EXPECT_NE(error_of([&] { zt::SafeTensorsFile f(p); }).find("bad.safetensors: bad safetensors header: not JSON"),
            std::string::npos);
  {  // a header length past the end of the file
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    const uint64_t n = 4096;
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << "{}";
  }
  EXPECT_NE(error_of([&] { zt::SafeTensorsFile f(p); }).find("runs past the end"), std::string::npos);
  write_raw(p, R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", 16);
  std::string e = error_of([&] { zt::SafeTensorsFile f(p); });
  EXPECT_NE(e.find("bad.safetensors: tensor 'w': unsupported dtype 'F64'"), std::string::npos) << e;
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8);
  e = error_of([&] { zt::SafeTensorsFile f(p); });
  EXPECT_NE(e.find("tensor 'w': data_offsets [0, 16] out of range: the file has 8 data bytes"), std::string::npos) << e;
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})", 16);
  e = error_of([&] { zt::SafeTensorsFile f(p); });
  EXPECT_NE(e.find("tensor 'w': data_offsets [0, 16] hold 16 bytes, its shape [3] and dtype F32 need 12"),
            std::string::npos)
      << e;
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [3]}})", 0);
  EXPECT_NE(error_of([&] { zt::SafeTensorsFile f(p); }).find("tensor 'w': bad safetensors header entry"),
            std::string::npos);
  // A shape whose element count overflows: the product wrapped (int64, and
  // the byte count in uint64) and could match the few bytes present, and
  // reads then ran past the mapping (found by tests/fuzz/fuzz_safetensors).
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", 0);
  e = error_of([&] { zt::SafeTensorsFile f(p); });
  EXPECT_NE(e.find("tensor 'w': shape [4611686018427387904, 4] of F32 needs more bytes than the file's 0 data bytes"),
            std::string::npos)
      << e;
  write_raw(p, R"({"w": {"dtype": "BF16", "shape": [9223372036854775807, 2], "data_offsets": [0, 4]}})", 4);
  e = error_of([&] { zt::SafeTensorsFile f(p); });
  EXPECT_NE(e.find("needs more bytes than the file's 4 data bytes"), std::string::npos) << e;
  write_raw(p, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 4);
  zt::SafeTensorsFile ok(p);
  EXPECT_NE(error_of([&] { ok.entry("v"); }).find("bad.safetensors: no tensor 'v'"), std::string::npos);
}

TEST(SafeTensorsReader, ShardedIndex) {
  TempDir dir;
  zt::write_safetensors(dir / "s1.safetensors", {{"a", "F32", {1}, f32_bytes({1.0f})}}, {});
  zt::write_safetensors(dir / "s2.safetensors", {{"b", "F32", {1}, f32_bytes({2.0f})}}, {});
  write_json(dir / "model.safetensors.index.json", {{"weight_map", {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}}}});
  zt::SafeTensorsDir d(dir.path());
  float v = 0;
  d.file_of("b").read_f32("b", 0, 1, &v);
  EXPECT_EQ(v, 2.0f);
  std::string e = error_of([&] { d.file_of("c"); });
  EXPECT_NE(e.find("model.safetensors.index.json: missing tensor 'c'"), std::string::npos) << e;
  write_json(dir / "model.safetensors.index.json", {{"weight_map", {{"a", "s2.safetensors"}}}});
  e = error_of([&] { zt::SafeTensorsDir bad(dir.path()); });
  EXPECT_NE(e.find("weight_map puts tensor 'a' in s2.safetensors, which has no such tensor"), std::string::npos) << e;
  write_json(dir / "model.safetensors.index.json", {{"weight_map", {{"a", "s3.safetensors"}}}});
  e = error_of([&] { zt::SafeTensorsDir bad(dir.path()); });
  EXPECT_NE(e.find("cannot open " + dir / "s3.safetensors"), std::string::npos) << e;
  fs::remove(dir / "model.safetensors.index.json");
  e = error_of([&] { zt::SafeTensorsDir bad(dir.path()); });
  EXPECT_NE(e.find("no model.safetensors or model.safetensors.index.json"), std::string::npos) << e;
}

json llama_hf() {
  return {{"model_type", "llama"},       {"hidden_size", 64},          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},    {"num_key_value_heads", 2},   {"intermediate_size", 96},
          {"max_position_embeddings", 64}, {"vocab_size", 128},        {"rms_norm_eps", 1e-5},
          {"hidden_act", "silu"},        {"attention_bias", false},    {"mlp_bias", false},
          {"tie_word_embeddings", false}, {"rope_theta", 5000.0},
          {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}}}};
}

json gpt2_hf() {
  return {{"model_type", "gpt2"}, {"n_embd", 32}, {"n_layer", 2},  {"n_head", 4},
          {"n_positions", 16},    {"vocab_size", 40}, {"n_inner", nullptr}, {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", 1e-5}};
}

TEST(HfConfig, BothRopeFormsDescribeTheSameModel) {
  const json old_form = zt::hf_model_section(llama_hf(), "config.json");
  json n = llama_hf();
  n.erase("rope_theta");
  n.erase("rope_scaling");
  n["rope_parameters"] = {{"rope_type", "llama3"},       {"rope_theta", 5000.0},     {"factor", 8.0},
                          {"low_freq_factor", 1.0},       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 16}};
  EXPECT_EQ(zt::hf_model_section(n, "config.json"), old_form);
  const zt::ModelConfig m = zt::parse_config(json{{"model", old_form}}, "x").model;
  EXPECT_EQ(m.arch, "llama");
  EXPECT_EQ(m.num_key_value_heads, 2);
  EXPECT_EQ(m.intermediate_size, 96);
  EXPECT_EQ(m.rope_theta, 5000.0);
  EXPECT_TRUE(m.rope_scaling.llama3);
  EXPECT_EQ(m.rope_scaling.original_max_position_embeddings, 16);
  EXPECT_FALSE(m.tie_word_embeddings);
  // Default rope, older "type" spelling: no scaling (not the llama preset's).
  json d = llama_hf();
  d["rope_scaling"] = {{"type", "default"}};
  EXPECT_FALSE(zt::parse_config(json{{"model", zt::hf_model_section(d, "c")}}, "x").model.rope_scaling.llama3);
  d.erase("rope_scaling");
  EXPECT_FALSE(zt::parse_config(json{{"model", zt::hf_model_section(d, "c")}}, "x").model.rope_scaling.llama3);
  const json g = zt::hf_model_section(gpt2_hf(), "config.json");
  EXPECT_EQ(g, (json{{"arch", "gpt2"}, {"n_layer", 2}, {"n_head", 4}, {"d_model", 32}, {"seq_len", 16}, {"vocab_size", 40}}));
}

TEST(HfConfig, UnsupportedFieldsAreNamed) {
  struct Case {
    json config;
    std::string expect;
  };
  std::vector<Case> cases;
  auto llama_with = [](const std::string& k, const json& v) {
    json j = llama_hf();
    j[k] = v;
    return j;
  };
  auto gpt2_with = [](const std::string& k, const json& v) {
    json j = gpt2_hf();
    j[k] = v;
    return j;
  };
  cases.push_back({llama_with("model_type", "mistral"), "model_type: 'mistral' is not supported"});
  cases.push_back({llama_with("attention_bias", true), "attention_bias: true is not supported"});
  cases.push_back({llama_with("mlp_bias", true), "mlp_bias: true is not supported"});
  cases.push_back({llama_with("hidden_act", "gelu"), "hidden_act: 'gelu' is not supported"});
  cases.push_back({llama_with("head_dim", 32), "head_dim: ztrain's Llama has head_dim = hidden_size / num_attention_heads = 16"});
  cases.push_back({llama_with("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}), "rope_scaling.rope_type: 'yarn' is not supported"});
  cases.push_back({llama_with("rope_parameters", {{"rope_type", "dynamic"}, {"rope_theta", 1e4}}),
                   "rope_parameters.rope_type: 'dynamic' is not supported"});
  cases.push_back({llama_with("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}),
                   "rope_scaling.low_freq_factor: llama3 rope scaling needs a positive number"});
  cases.push_back({llama_with("num_hidden_layers", "two"), "num_hidden_layers: expected a positive integer"});
  json missing = llama_hf();
  missing.erase("intermediate_size");
  cases.push_back({missing, "intermediate_size: missing"});
  json untyped = llama_hf();
  untyped.erase("model_type");
  cases.push_back({untyped, "model_type: missing"});
  cases.push_back({gpt2_with("n_inner", 100), "n_inner: ztrain's GPT-2 MLP is 4 * n_embd = 128 wide"});
  cases.push_back({gpt2_with("activation_function", "relu"), "activation_function: 'relu' is not supported"});
  cases.push_back({gpt2_with("layer_norm_epsilon", 1e-6), "layer_norm_epsilon: ztrain's LayerNorm uses 1e-5"});
  cases.push_back({gpt2_with("tie_word_embeddings", false), "tie_word_embeddings: false is not supported for gpt2"});
  // Sizes past int32 are refused before any arithmetic on them: 4 * n_embd
  // and head_dim * heads overflowed int64 (found by tests/fuzz/fuzz_hf_config).
  json huge_gpt2 = gpt2_with("n_embd", int64_t{1} << 62);
  huge_gpt2["n_inner"] = 5;
  cases.push_back({huge_gpt2, "n_embd: expected a positive integer up to 2147483647, found 4611686018427387904"});
  json huge_heads = llama_with("num_attention_heads", int64_t{1} << 62);
  huge_heads["head_dim"] = 16;
  cases.push_back({huge_heads, "num_attention_heads: expected a positive integer up to 2147483647"});
  for (const Case& c : cases) {
    const std::string e = error_of([&] { zt::hf_model_section(c.config, "dir/config.json"); });
    EXPECT_NE(e.find("dir/config.json: " + c.expect), std::string::npos) << e;
  }
}

// A Hugging Face directory for `hf` (a config.json), every tensor of its
// description with value = its flat index in the Hugging Face layout plus
// 1000 * the tensor's number; `edit` may change the tensor list first.
zt::ModelDesc make_hf_dir(const std::string& dir, const json& hf,
                          const std::function<void(std::vector<zt::SafeTensor>&)>& edit = {}) {
  fs::create_directories(dir);
  write_json(dir + "/config.json", hf);
  const zt::ModelDesc desc =
      zt::describe_model(zt::parse_config(json{{"model", zt::hf_model_section(hf, "c")}}, "x").model);
  std::vector<zt::SafeTensor> ts;
  int k = 0;
  for (const zt::UnitDesc& u : desc.units)
    for (const zt::TensorDesc& t : u.tensors) {
      const zt::Shape s = t.hf_shape();
      std::vector<int64_t> shape;
      for (int i = 0; i < s.rank(); ++i) shape.push_back(s[i]);
      std::vector<float> v(static_cast<size_t>(s.numel()));
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(1000 * k + static_cast<int64_t>(i));
      ts.push_back({t.hf_name, "F32", shape, f32_bytes(v)});
      ++k;
    }
  if (edit) edit(ts);
  zt::write_safetensors(dir + "/model.safetensors", ts, {{"format", "pt"}});
  return desc;
}

// Element (r, c) of tensor `name` of unit `unit`, read through the source.
float read_at(zt::WeightSource& src, const zt::ModelDesc& d, int unit, const std::string& name, int64_t r, int64_t c) {
  int64_t off = 0;
  for (const zt::TensorDesc& t : d.units[static_cast<size_t>(unit)].tensors) {
    if (t.name == name) {
      float v = 0;
      const int64_t i = off + r * (t.shape.rank() == 2 ? t.shape[1] : 1) + c;
      src.read(unit, i, i + 1, &v);
      return v;
    }
    off += t.shape.numel();
  }
  ADD_FAILURE() << "no tensor " << name;
  return 0;
}

TEST(HfMapping, Gpt2Conv1DIsTransposedAndBlocksAreContiguous) {
  TempDir dir;
  const zt::ModelDesc d = make_hf_dir(dir / "g", gpt2_hf());
  auto src = zt::open_weight_source(dir / "g", d);
  // Tensor numbers: wte 0, wpe 1, then block 0: ln_1.w 2, ln_1.b 3, c_attn.w 4.
  // ztrain's c_attn weight is (3C, C); Hugging Face's (C, 3C): (r, c) <- (c, r).
  const int64_t C = 32;
  EXPECT_EQ(read_at(*src, d, 1, "attn.c_attn.weight", 5, 7), 4000.0f + static_cast<float>(7 * 3 * C + 5));
  EXPECT_EQ(read_at(*src, d, 1, "ln_1.bias", 0, 9), 3009.0f);
  EXPECT_EQ(read_at(*src, d, 0, "wpe.weight", 2, 3), 1000.0f + static_cast<float>(2 * C + 3));
  // A whole unit, padding past its numel reads 0.
  std::vector<float> all(static_cast<size_t>(d.units[0].numel() + 3));
  src->read(0, 0, static_cast<int64_t>(all.size()), all.data());
  EXPECT_EQ(all[0], 0.0f);
  EXPECT_EQ(all[5], 5.0f);
  EXPECT_EQ(all.back(), 0.0f);
}

TEST(HfMapping, LlamaRowsStayInHuggingFaceOrder) {
  TempDir dir;
  const zt::ModelDesc d = make_hf_dir(dir / "l", llama_hf());
  auto src = zt::open_weight_source(dir / "l", d);
  // Tensors: embed 0; block 0: input_layernorm 1, q_proj 2, k_proj 3. ztrain's
  // RoPE is the rotate-half one (modules/rope.hpp): no q/k permutation.
  EXPECT_EQ(read_at(*src, d, 1, "self_attn.q_proj.weight", 9, 3), 2000.0f + 9 * 64 + 3);
  EXPECT_EQ(read_at(*src, d, 1, "self_attn.k_proj.weight", 31, 63), 3000.0f + 31 * 64 + 63);
}

TEST(HfMapping, MissingExtraAndMisshapenTensorsAreNamed) {
  TempDir dir;
  zt::ModelDesc d = make_hf_dir(dir / "a", llama_hf(), [](std::vector<zt::SafeTensor>& ts) {
    ts.erase(ts.begin() + 3);  // model.layers.0.self_attn.k_proj.weight
  });
  std::string e = error_of([&] { zt::open_weight_source(dir / "a", d); });
  EXPECT_NE(e.find("model.safetensors: missing tensor 'model.layers.0.self_attn.k_proj.weight'"), std::string::npos) << e;
  make_hf_dir(dir / "b", llama_hf(), [](std::vector<zt::SafeTensor>& ts) {
    ts[2].shape = {32, 128};  // q_proj, same bytes
  });
  e = error_of([&] { zt::open_weight_source(dir / "b", d); });
  EXPECT_NE(e.find("model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight' has shape [32, 128], the "
                   "llama model of " + dir / "b" + "/config.json needs [64, 64]"),
            std::string::npos)
      << e;
  make_hf_dir(dir / "c", llama_hf(), [](std::vector<zt::SafeTensor>& ts) {
    ts.push_back({"model.layers.0.self_attn.q_proj.bias", "F32", {64}, f32_bytes(std::vector<float>(64))});
  });
  e = error_of([&] { zt::open_weight_source(dir / "c", d); });
  EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.q_proj.bias' is not part of ztrain's llama model"),
            std::string::npos)
      << e;
  // The run's model is another one: the first differing tensor is named.
  json three = llama_hf();
  three["intermediate_size"] = 128;
  const zt::ModelDesc other =
      zt::describe_model(zt::parse_config(json{{"model", zt::hf_model_section(three, "c")}}, "x").model);
  e = error_of([&] { zt::open_weight_source(dir / "c", other); });
  EXPECT_NE(e.find("tensor model.layers.0.mlp.gate_proj.weight has shape [96, 64], this run's model (llama) needs "
                   "model.layers.0.mlp.gate_proj.weight of shape [128, 64]"),
            std::string::npos)
      << e;
  // GPT-2 saved through GPT2LMHeadModel: "transformer." names and the mask buffers.
  make_hf_dir(dir / "g", gpt2_hf(), [](std::vector<zt::SafeTensor>& ts) {
    for (zt::SafeTensor& t : ts) t.name = "transformer." + t.name;
    ts.push_back({"transformer.h.0.attn.bias", "F32", {1}, f32_bytes({1.0f})});
  });
  const zt::ModelDesc g =
      zt::describe_model(zt::parse_config(json{{"model", zt::hf_model_section(gpt2_hf(), "c")}}, "x").model);
  EXPECT_NO_THROW(zt::open_weight_source(dir / "g", g));
}

}  // namespace
