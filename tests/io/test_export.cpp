// zckpt export (Hugging Face GPT-2 safetensors / HDF5) and zckpt reshard on a
// fake tiny GPT checkpoint written with the io API; the zckpt binary's path
// is ZCKPT_BIN. Also write_safetensors / read_safetensors_header directly.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "temp_dir.hpp"

using zt::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr int64_t L = 2, NH = 2, C = 8, T = 16, V = 32;
const std::vector<std::string> kStates = {"master", "exp_avg", "exp_avg_sq"};

int64_t unit_numel(int u) {
  if (u == 0) return V * C + T * C;
  if (u == L + 1) return 2 * C;
  return 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
}
std::string unit_name(int u) { return u == 0 ? "embedding" : u == L + 1 ? "head" : "h." + std::to_string(u - 1); }

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Element i of `unit`'s state s; unit 0 master starts with bf16 rounding cases.
float value(int s, int unit, int64_t i) {
  if (s == 0 && unit == 0 && i < 4) {
    const uint32_t cases[4] = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0xBF807FFFu};
    return from_bits(cases[i]);
  }
  uint64_t h = (static_cast<uint64_t>(s) << 48) ^ (static_cast<uint64_t>(unit) << 32) ^ static_cast<uint64_t>(i);
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  return from_bits(0x3C000000u + static_cast<uint32_t>(h % 0x04000000u)) * ((h >> 40) & 1 ? -1.0f : 1.0f);
}

// The manifest's config.model of the checkpoints below (no arch: written
// before the key existed, which means gpt2).
nlohmann::json gpt_model() {
  return {{"n_layer", L}, {"n_head", NH}, {"d_model", C}, {"seq_len", T}, {"vocab_size", V}};
}

// A committed dp-way (ZeRO 1) checkpoint at DIR/step_7.
void write_gpt_checkpoint(const std::string& dir, int dp, int pp = 1, const nlohmann::json& model = gpt_model()) {
  const std::string tmp = zt::checkpoint_tmp_dir(dir, 7);
  fs::create_directories(tmp);
  std::map<std::string, std::string> sha;
  for (int r = 0; r < dp; ++r) {
    std::vector<std::vector<float>> keep;
    std::vector<zt::ShardData> shards;
    keep.reserve(64);
    for (int s = 0; s < 3; ++s)
      for (int u = 0; u < L + 2; ++u) {
        const int64_t n = unit_numel(u), S = (n + dp - 1) / dp;
        keep.emplace_back();
        for (int64_t i = r * S; i < (r + 1) * S; ++i) keep.back().push_back(i < n ? value(s, u, i) : 0.0f);
        shards.push_back({kStates[s], {u, unit_name(u), n, r * S, S}, keep.back().data()});
      }
    sha[zt::rank_file_name(r)] = zt::write_shard_file(tmp + "/" + zt::rank_file_name(r), shards);
  }
  nlohmann::json manifest = {
      {"config", {{"model", model}}},
      {"topology", {{"world", dp * pp}, {"pp", pp}, {"num_chunks", 1}, {"dp", dp}, {"zero_stage", 1}}},
      {"applied_steps", 7}};
  zt::commit_checkpoint(dir, 7, manifest, sha, 0);
}

struct Result {
  int code;
  std::string out;
};
Result zckpt(const TempDir& dir, const std::string& args) {
  const std::string cmd = std::string(ZCKPT_BIN) + " " + args + " >" + (dir / "out") + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, zt::test::read_bytes(dir / "out")};
}

// HF names and shapes in export order.
std::vector<std::pair<std::string, std::vector<int64_t>>> hf_tensors() {
  std::vector<std::pair<std::string, std::vector<int64_t>>> t = {{"wte.weight", {V, C}}, {"wpe.weight", {T, C}}};
  for (int i = 0; i < L; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    t.insert(t.end(), {{h + "ln_1.weight", {C}},
                       {h + "ln_1.bias", {C}},
                       {h + "attn.c_attn.weight", {C, 3 * C}},
                       {h + "attn.c_attn.bias", {3 * C}},
                       {h + "attn.c_proj.weight", {C, C}},
                       {h + "attn.c_proj.bias", {C}},
                       {h + "ln_2.weight", {C}},
                       {h + "ln_2.bias", {C}},
                       {h + "mlp.c_fc.weight", {C, 4 * C}},
                       {h + "mlp.c_fc.bias", {4 * C}},
                       {h + "mlp.c_proj.weight", {4 * C, C}},
                       {h + "mlp.c_proj.bias", {C}}});
  }
  t.insert(t.end(), {{"ln_f.weight", {C}}, {"ln_f.bias", {C}}});
  return t;
}

// Offsets of block params in the flat unit buffer.
constexpr int64_t kAttnW = 2 * C, kAttnB = kAttnW + 3 * C * C, kFcW = kAttnB + 3 * C + C * C + C + 2 * C;

}  // namespace

TEST(Safetensors, WriteAndReadHeader) {
  TempDir dir;
  std::vector<zt::SafeTensor> ts = {{"b", "F32", {2}, std::vector<uint8_t>(8, 1)},
                                    {"a", "BF16", {3, 1}, std::vector<uint8_t>(6, 2)}};
  zt::write_safetensors(dir / "x.safetensors", ts, {{"format", "pt"}});
  uint64_t n = 0;
  const nlohmann::json h = zt::read_safetensors_header(dir / "x.safetensors", &n);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(fs::file_size(dir / "x.safetensors"), 8 + n + 14);
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(h["a"]["data_offsets"], nlohmann::json({8, 14}));
  EXPECT_EQ(h["a"]["shape"], nlohmann::json({3, 1}));
  EXPECT_EQ(h["a"]["dtype"], "BF16");
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  ts[1].data.pop_back();
  EXPECT_THROW(zt::write_safetensors(dir / "y.safetensors", ts, {}), zt::UserError);
}

TEST(ZckptExport, SafetensorsF32AndBf16) {
  TempDir dir;
  write_gpt_checkpoint(dir.path(), 2);
  const std::string step = dir / "step_7";
  EXPECT_EQ(zckpt(dir, "export " + step).code, 2);  // --out missing
  Result r = zckpt(dir, "export " + step + " --out " + (dir / "hf"));
  ASSERT_EQ(r.code, 0) << r.out;

  uint64_t n = 0;
  const std::string path = dir / "hf/model.safetensors";
  const nlohmann::json h = zt::read_safetensors_header(path, &n);
  const auto expect = hf_tensors();
  EXPECT_EQ(h.size(), expect.size() + 1);
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  uint64_t off = 0;
  for (const auto& [name, shape] : expect) {
    ASSERT_TRUE(h.contains(name)) << name;
    EXPECT_EQ(h[name]["dtype"], "F32") << name;
    EXPECT_EQ(h[name]["shape"], nlohmann::json(shape)) << name;
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
    EXPECT_EQ(h[name]["data_offsets"], nlohmann::json({off, off + 4 * numel})) << name;
    off += 4 * numel;
  }
  const std::string bytes = zt::test::read_bytes(path);
  ASSERT_EQ(bytes.size(), 8 + n + off);
  auto f32_at = [&](const std::string& name, int64_t idx) {
    float f;
    std::memcpy(&f, bytes.data() + 8 + n + h[name]["data_offsets"][0].get<uint64_t>() + 4 * idx, 4);
    return f;
  };
  // Transposed Conv1D weights: HF (i, j) == ztrain (j, i); biases and wte as is.
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < 3 * C; ++j)
      ASSERT_EQ(to_bits(f32_at("h.1.attn.c_attn.weight", i * 3 * C + j)), to_bits(value(0, 2, kAttnW + j * C + i)));
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < 4 * C; ++j)
      ASSERT_EQ(to_bits(f32_at("h.0.mlp.c_fc.weight", i * 4 * C + j)), to_bits(value(0, 1, kFcW + j * C + i)));
  const int64_t fc_proj = kFcW + 4 * C * C + 4 * C;
  EXPECT_EQ(to_bits(f32_at("h.0.mlp.c_proj.weight", 5 * C + 3)), to_bits(value(0, 1, fc_proj + 3 * 4 * C + 5)));
  EXPECT_EQ(to_bits(f32_at("h.1.attn.c_attn.bias", 5)), to_bits(value(0, 2, kAttnB + 5)));
  EXPECT_EQ(to_bits(f32_at("wte.weight", 17)), to_bits(value(0, 0, 17)));
  EXPECT_EQ(to_bits(f32_at("wpe.weight", 3)), to_bits(value(0, 0, V * C + 3)));
  EXPECT_EQ(to_bits(f32_at("ln_f.bias", 2)), to_bits(value(0, L + 1, C + 2)));

  const nlohmann::json cfg = nlohmann::json::parse(zt::test::read_bytes(dir / "hf/config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
  EXPECT_EQ(cfg["n_layer"], L);
  EXPECT_EQ(cfg["n_head"], NH);
  EXPECT_EQ(cfg["n_embd"], C);
  EXPECT_EQ(cfg["n_positions"], T);
  EXPECT_EQ(cfg["vocab_size"], V);
  EXPECT_TRUE(cfg["n_inner"].is_null());
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_DOUBLE_EQ(cfg["layer_norm_epsilon"].get<double>(), 1e-5);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);

  // bf16: round to nearest even, same layout at half the bytes.
  r = zckpt(dir, "export " + step + " --out " + (dir / "bf") + " --dtype bf16");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string bpath = dir / "bf/model.safetensors";
  uint64_t bn = 0;
  const nlohmann::json bh = zt::read_safetensors_header(bpath, &bn);
  EXPECT_EQ(bh["wte.weight"]["dtype"], "BF16");
  EXPECT_EQ(bh["ln_f.bias"]["data_offsets"][1].get<uint64_t>(), off / 2);
  const std::string bbytes = zt::test::read_bytes(bpath);
  auto bf_at = [&](const std::string& name, int64_t idx) {
    const size_t at = 8 + bn + bh[name]["data_offsets"][0].get<uint64_t>() + 2 * idx;
    return static_cast<uint16_t>(static_cast<uint8_t>(bbytes[at]) | (static_cast<uint8_t>(bbytes[at + 1]) << 8));
  };
  EXPECT_EQ(bf_at("wte.weight", 0), 0x3F80);  // tie, even stays
  EXPECT_EQ(bf_at("wte.weight", 1), 0x3F82);  // tie, odd rounds up to even
  EXPECT_EQ(bf_at("wte.weight", 2), 0x3F81);  // above half rounds up
  EXPECT_EQ(bf_at("wte.weight", 3), 0xBF80);  // below half rounds down
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < 3 * C; ++j)
      ASSERT_EQ(bf_at("h.0.attn.c_attn.weight", i * 3 * C + j), zt::f32_to_bf16(value(0, 1, kAttnW + j * C + i)).bits);
}

// The model comes from the manifest's config.model: its architecture (gpt2
// when absent) and sizes, checked against the checkpoint's units.
TEST(ZckptExport, ModelFromTheManifest) {
  TempDir dir;
  nlohmann::json model = gpt_model();
  model["arch"] = "gpt2";
  write_gpt_checkpoint(dir / "arch", 1, 1, model);
  Result r = zckpt(dir, "export " + (dir / "arch/step_7") + " --out " + (dir / "hf"));
  EXPECT_EQ(r.code, 0) << r.out;

  model["arch"] = "llama";
  write_gpt_checkpoint(dir / "llama", 1, 1, model);
  r = zckpt(dir, "export " + (dir / "llama/step_7") + " --out " + (dir / "x"));
  EXPECT_EQ(r.code, 1) << r.out;
  // A llama manifest over GPT-2 units: the description's units disagree.
  EXPECT_NE(r.out.find("a llama with n_layer 2 has unit 0 (embedding) of"), std::string::npos) << r.out;

  model = gpt_model();
  model["n_layer"] = L + 1;
  write_gpt_checkpoint(dir / "layers", 1, 1, model);
  r = zckpt(dir, "logits " + (dir / "layers/step_7") + " --tokens 1,2 --out " + (dir / "l.npy"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("checkpoint has 4 units, a gpt2 with n_layer 3 has 5"), std::string::npos) << r.out;

  model = gpt_model();
  model["d_model"] = 2 * C;
  write_gpt_checkpoint(dir / "width", 1, 1, model);
  r = zckpt(dir, "export " + (dir / "width/step_7") + " --out " + (dir / "y"));
  EXPECT_EQ(r.code, 1) << r.out;
  const std::string expect = "checkpoint unit 0 (embedding) has " + std::to_string(unit_numel(0)) +
                             " elements, a gpt2 with n_layer 2 has unit 0 (embedding) of " +
                             std::to_string(2 * unit_numel(0));
  EXPECT_NE(r.out.find(expect), std::string::npos)
      << r.out;
}

TEST(ZckptExport, Hdf5) {
  TempDir dir;
  write_gpt_checkpoint(dir.path(), 1);
  Result r = zckpt(dir, "export " + (dir / "step_7") + " --out " + (dir / "h5") + " --format hdf5");
  ASSERT_EQ(r.code, 0) << r.out;
  const hid_t f = H5Fopen((dir / "h5/model.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  for (const auto& [name, shape] : hf_tensors()) {
    const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    ASSERT_GE(ds, 0) << name;
    const hid_t sp = H5Dget_space(ds);
    std::vector<hsize_t> dims(static_cast<size_t>(H5Sget_simple_extent_ndims(sp)));
    H5Sget_simple_extent_dims(sp, dims.data(), nullptr);
    EXPECT_EQ(std::vector<int64_t>(dims.begin(), dims.end()), shape) << name;
    if (name == "h.1.mlp.c_fc.weight") {
      std::vector<float> v(C * 4 * C);
      ASSERT_GE(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
      for (int64_t i = 0; i < C; ++i)
        for (int64_t j = 0; j < 4 * C; ++j) ASSERT_EQ(to_bits(v[i * 4 * C + j]), to_bits(value(0, 2, kFcW + j * C + i)));
    }
    H5Sclose(sp);
    H5Dclose(ds);
  }
  H5Fclose(f);
}

TEST(ZckptReshard, Dp3BitExact) {
  TempDir dir;
  write_gpt_checkpoint(dir / "src", 2);
  Result r = zckpt(dir, "reshard " + (dir / "src/step_7") + " --out " + (dir / "dst") + " --dp 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(zt::verify_checkpoint(dir / "dst/step_7").empty());
  EXPECT_EQ(zt::read_latest_name(dir / "dst").value_or(""), "step_7");
  zt::CheckpointReader src(dir / "src/step_7"), dst(dir / "dst/step_7");
  const nlohmann::json& m = dst.manifest();
  EXPECT_EQ(m["files"].size(), 3u);
  EXPECT_EQ(m["topology"]["dp"], 3);
  EXPECT_EQ(m["topology"]["world"], 3);
  EXPECT_EQ(m["topology"]["zero_stage"], 1);
  EXPECT_EQ(m["applied_steps"], 7);
  EXPECT_EQ(m["config"], src.manifest()["config"]);
  EXPECT_EQ(dst.states(), src.states());
  ASSERT_EQ(dst.units(), src.units());
  for (const std::string& s : src.states())
    for (int u : src.units()) {
      const int64_t n = src.unit_numel(u);
      EXPECT_EQ(dst.unit_numel(u), n);
      EXPECT_EQ(dst.unit_name(u), unit_name(u));
      std::vector<float> a(n), b(n);
      src.read_range(s, u, 0, n, a.data());
      dst.read_range(s, u, 0, n, b.data());
      ASSERT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << s << " unit " << u;
    }

  r = zckpt(dir, "reshard " + (dir / "src/step_7") + " --out " + (dir / "z0") + " --dp 4 --zero-stage 0");
  ASSERT_EQ(r.code, 0) << r.out;
  zt::CheckpointReader z0(dir / "z0/step_7");
  EXPECT_EQ(z0.manifest()["files"].size(), 1u);
  EXPECT_EQ(z0.manifest()["topology"]["zero_stage"], 0);
  std::vector<float> a(unit_numel(1)), b(unit_numel(1));
  src.read_range("exp_avg_sq", 1, 0, unit_numel(1), a.data());
  z0.read_range("exp_avg_sq", 1, 0, unit_numel(1), b.data());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);

  // Existing destination step and pipeline layouts are refused.
  EXPECT_EQ(zckpt(dir, "reshard " + (dir / "src/step_7") + " --out " + (dir / "dst") + " --dp 2").code, 1);
  write_gpt_checkpoint(dir / "pp", 1, /*pp=*/2);
  r = zckpt(dir, "reshard " + (dir / "pp/step_7") + " --out " + (dir / "pp_out") + " --dp 2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("ztrain --resume"), std::string::npos) << r.out;
  EXPECT_EQ(zckpt(dir, "reshard " + (dir / "src/step_7") + " --out " + (dir / "x")).code, 2);  // no --dp
}
