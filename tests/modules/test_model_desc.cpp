// The model description (modules/model_desc.hpp): GPT-2's is the model that
// build_model builds, with the Hugging Face names and Conv1D layouts that
// transformers' GPT2LMHeadModel loads; describe_model follows model.arch;
// Llama's presets have the published parameter counts and build.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/config.hpp"
#include "core/error.hpp"
#include "modules/gpt.hpp"
#include "modules/llama_desc.hpp"
#include "modules/model.hpp"

namespace zt::test {
namespace {

ModelConfig gpt2_config(int n_layer) {
  ModelConfig c;
  c.preset = "";
  c.n_layer = n_layer;
  c.n_head = 4;
  c.d_model = 32;
  c.seq_len = 16;
  c.vocab_size = 50;
  return c;
}

std::string user_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UserError";
  return "";
}

TEST(ModelDesc, Gpt2IsWhatBuildModelBuilds) {
  const ModelDesc d = describe_model(gpt2_config(3));
  EXPECT_EQ(d.arch(), "gpt2");
  EXPECT_EQ(d.shape.name, "gpt2 (custom sizes)");
  const Model m = build_model(d);
  ASSERT_EQ(m.num_units(), 5);
  EXPECT_EQ(m.num_params(), count_params(m.units()));
  const std::vector<std::unique_ptr<Unit>> legacy = build_gpt(GptConfig{3, 4, 32, 16, 50});
  for (int u = 0; u < m.num_units(); ++u) {
    const UnitDesc& ud = d.units[static_cast<size_t>(u)];
    const Unit& unit = m.unit(u);
    EXPECT_EQ(unit.name(), ud.name);
    EXPECT_EQ(unit.checkpointable(), ud.checkpointable) << ud.name;
    EXPECT_EQ(unit.checkpointable(), ud.kind == UnitKind::block) << ud.name;
    const std::vector<ParamSpec> ps = unit.params(), old = legacy[static_cast<size_t>(u)]->params();
    ASSERT_EQ(ps.size(), ud.tensors.size()) << ud.name;
    ASSERT_EQ(old.size(), ud.tensors.size()) << ud.name;
    for (size_t p = 0; p < ps.size(); ++p) {
      EXPECT_EQ(ps[p].name, ud.tensors[p].name);
      EXPECT_EQ(ps[p].shape, ud.tensors[p].shape) << ps[p].name;
      EXPECT_EQ(ps[p].weight_decay, ud.tensors[p].weight_decay) << ps[p].name;
      EXPECT_EQ(old[p].name, ps[p].name);
    }
    ASSERT_EQ(unit.tied().size(), ud.tied.size());
  }
  EXPECT_EQ(d.units.back().tied[0].unit, 0);
  EXPECT_EQ(d.units.back().tied[0].param, 0);
  EXPECT_EQ(d.unit_ties(), (std::vector<std::vector<int>>{{}, {}, {}, {}, {0}}));
  EXPECT_EQ(d.unit_numels().front(), (50 + 16) * 32);
}

// Each unit's input and output follow from its kind (DescribedUnit): token
// ids into the embedding, (B, T, C) activations from one unit to the next,
// the per-token loss in the math dtype out of the head, for both
// architectures and every activation dtype.
void expect_units_chain(const ModelDesc& d) {
  const Model m = build_model(d);
  const int64_t B = 3, T = 5, C = d.shape.d_model;
  for (DType act : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    EXPECT_EQ(m.unit(0).input_shape(B, T), (Shape{B, T})) << d.arch();
    EXPECT_EQ(m.unit(0).input_dtype(act), DType::i32) << d.arch();
    for (int u = 0; u + 1 < m.num_units(); ++u) {
      const Unit& a = m.unit(u);
      const Unit& b = m.unit(u + 1);
      EXPECT_EQ(a.output_shape(B, T), (Shape{B, T, C})) << a.name();
      EXPECT_EQ(a.output_dtype(act), act) << a.name();
      EXPECT_EQ(b.input_shape(B, T), a.output_shape(B, T)) << b.name();
      EXPECT_EQ(b.input_dtype(act), a.output_dtype(act)) << b.name();
    }
    const Unit& head = m.unit(m.num_units() - 1);
    EXPECT_EQ(head.output_shape(B, T), (Shape{B, T})) << d.arch();
    EXPECT_EQ(head.output_dtype(act), act == DType::f64 ? DType::f64 : DType::f32) << d.arch();
  }
}

TEST(ModelDesc, UnitsChainFromTokensToLoss) {
  expect_units_chain(describe_model(gpt2_config(3)));
  expect_units_chain(describe_llama(llama_shape("llama chain", 2, 32, 4, 2, 24, 11, 5)));
}

// The names and layouts of a Hugging Face GPT-2 state dict: Conv1D weights
// (in, out), everything else as ztrain keeps it.
TEST(ModelDesc, Gpt2HuggingFaceNames) {
  const ModelDesc d = describe_gpt2(gpt2_shape(GptConfig{2, 4, 32, 16, 50}));
  std::vector<std::string> names;
  for (const UnitDesc& u : d.units)
    for (const TensorDesc& t : u.tensors) {
      names.push_back(t.hf_name);
      const bool conv1d = t.shape.rank() == 2 && u.kind == UnitKind::block;
      EXPECT_EQ(t.hf_layout, conv1d ? HfLayout::transposed : HfLayout::as_is) << t.hf_name;
      const Shape hf = conv1d ? Shape{t.shape[1], t.shape[0]} : t.shape;
      EXPECT_EQ(t.hf_shape(), hf) << t.hf_name;
    }
  ASSERT_EQ(names.size(), 2u + 2 * 12 + 2);
  EXPECT_EQ(names[0], "wte.weight");
  EXPECT_EQ(names[1], "wpe.weight");
  EXPECT_EQ(names[2 + 12 + 2], "h.1.attn.c_attn.weight");
  EXPECT_EQ(names[2 + 12 + 11], "h.1.mlp.c_proj.bias");
  EXPECT_EQ(names.back(), "ln_f.bias");
  EXPECT_EQ(d.units[2].tensors[10].hf_shape(), (Shape{128, 32}));  // mlp.c_proj.weight (C, 4C) -> (4C, C)
}

TEST(ModelDesc, ArchitecturesAndPresetNames) {
  ModelConfig c = gpt2_config(2);
  c.preset = "gpt2-124m";
  EXPECT_EQ(describe_model(c).shape.name, "gpt2-124m");
  c.preset = "tiny";
  EXPECT_EQ(describe_model(c).shape.name, "gpt2 tiny");
  c.arch = "mamba";
  EXPECT_EQ(user_error([&] { describe_model(c); }),
            "model.arch: unknown architecture \"mamba\"; known architectures: \"gpt2\", \"llama\"");
}

TEST(ModelDesc, LlamaIsDescribedAndBuilt) {
  const ModelDesc d = describe_llama(llama2_70b_shape());
  EXPECT_EQ(d.num_units(), 82);
  EXPECT_EQ(d.num_params(), 68976648192);
  const UnitDesc& block = d.units[5];
  EXPECT_EQ(block.name, "h.4");
  EXPECT_EQ(block.numel(), 855654400);
  EXPECT_EQ(block.tensors[2].hf_name, "model.layers.4.self_attn.k_proj.weight");
  EXPECT_EQ(block.tensors[2].shape, (Shape{1024, 8192}));  // 8 kv heads of 128
  EXPECT_TRUE(d.units.back().tied.empty()) << "Llama's lm_head is its own";
  EXPECT_EQ(d.units.back().tensors[1].hf_name, "lm_head.weight");
  const Model m = build_model(d);
  EXPECT_EQ(m.num_units(), 82);
  EXPECT_EQ(m.unit(81).params().size(), 2u);
}

ModelConfig preset(const std::string& name) {
  return parse_config(nlohmann::json{{"model", {{"preset", name}}}}, "test").model;
}

// The presets' parameter counts are the published checkpoints' (the sums of
// their safetensors shapes), and their rotary settings their config.json's.
TEST(ModelDesc, LlamaPresetsHavePublishedShapes) {
  EXPECT_EQ(describe_model(preset("llama2-7b")).num_params(), 6738415616);
  EXPECT_EQ(describe_model(preset("llama2-13b")).num_params(), 13015864320);
  EXPECT_EQ(describe_model(preset("llama2-70b")).num_params(), 68976648192);
  EXPECT_EQ(describe_model(preset("llama3-8b")).num_params(), 8030261248);
  EXPECT_EQ(describe_model(preset("llama3-70b")).num_params(), 70553706496);
  EXPECT_EQ(describe_model(preset("llama3.1-8b")).num_params(), 8030261248);
  EXPECT_EQ(describe_model(preset("llama3.2-1b")).num_params(), 1235814400);  // tied head
  const ModelDesc l3 = describe_model(preset("llama3-8b"));
  EXPECT_EQ(l3.shape.n_kv_head, 8);
  EXPECT_EQ(l3.shape.ffn_hidden, 14336);
  EXPECT_EQ(l3.shape.vocab, 128256);
  EXPECT_EQ(l3.shape.rope.theta, 500000.0);
  EXPECT_FALSE(l3.shape.rope.llama3);
  const ModelDesc l31 = describe_model(preset("llama3.1-70b"));
  EXPECT_TRUE(l31.shape.rope.llama3);
  EXPECT_EQ(l31.shape.rope.factor, 8.0);
  EXPECT_EQ(l31.shape.rope.low_freq_factor, 1.0);
  EXPECT_EQ(l31.shape.rope.high_freq_factor, 4.0);
  EXPECT_EQ(l31.shape.rope.original_max_position_embeddings, 8192.0);
  EXPECT_EQ(l31.shape.rope.head_dim, 128);
  const ModelDesc l2 = describe_model(preset("llama2-7b"));
  EXPECT_EQ(l2.shape.n_kv_head, 32);
  EXPECT_EQ(l2.shape.rope.theta, 10000.0);
  EXPECT_EQ(l2.shape.rms_norm_eps, 1e-5);
  EXPECT_EQ(l2.shape.name, "llama2-7b");
}

// A tied Llama has no lm_head tensor; its head reads the embedding's table.
TEST(ModelDesc, LlamaTiedHead) {
  nlohmann::json j = {{"model", {{"preset", "llama-tiny"}, {"tie_word_embeddings", true}}}};
  const ModelDesc tied = describe_model(parse_config(j, "test").model);
  j["model"]["tie_word_embeddings"] = false;
  const ModelDesc untied = describe_model(parse_config(j, "test").model);
  EXPECT_EQ(untied.num_params() - tied.num_params(), 256 * 64);
  ASSERT_EQ(tied.units.back().tied.size(), 1u);
  EXPECT_EQ(tied.units.back().tied[0].unit, 0);
  EXPECT_EQ(tied.units.back().tensors.size(), 1u);
  EXPECT_EQ(tied.unit_ties().back(), std::vector<int>{0});
}

}  // namespace
}  // namespace zt::test
