// zckpt export: the fp32 master weights of a GPT-2 or Llama checkpoint as a
// Hugging Face GPT2LMHeadModel / LlamaForCausalLM (model.safetensors or
// model.h5 + config.json + generation_config.json, and the run's tokenizer);
// the names and layouts come from the checkpoint's model description
// (zckpt_model.hpp), the config.json from hf_config below.
//
// [Note: export for pipeline] transformers.pipeline("text-generation") needs
// a tokenizer and the BOS/EOS ids. They come from, in order: the tokenizer the
// run names (data.tokenizer: a tokenizer.json is copied as tokenizer.json
// with a tokenizer_config.json for PreTrainedTokenizerFast, a SentencePiece
// .model as tokenizer.model for LlamaTokenizer; BOS/EOS are the tokenizer's
// own, tokenizer.hpp); else the Hugging Face model the weights came from
// (`zckpt import`'s manifest, or model.init_from, followed through
// checkpoints), whose tokenizer files are copied and whose config.json gives
// the ids; else nothing: the byte tokenizer of the built-in corpus and of
// `zdata text` has no Hugging Face form, and the export says so rather than
// writing an empty tokenizer that AutoTokenizer would load silently.
#include <hdf5.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/safetensors.hpp"
#include "io/tokenizer.hpp"
#include "zckpt_commands.hpp"
#include "zckpt_model.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace zckpt {
namespace {

constexpr double kLayerNormEps = 1e-5;  // modules/cpu_kernels_norm.cpp and the CUDA LayerNorm

// Hugging Face's config.json of a Llama: the older rope form (rope_theta +
// rope_scaling), which transformers 4 and 5 both read.
nlohmann::json hf_llama_config(const zt::ModelDesc& md, const std::string& dtype) {
  const zt::ModelShape& s = md.shape;
  nlohmann::json scaling;  // null: default
  if (s.rope.llama3)
    scaling = {{"rope_type", "llama3"},
               {"factor", s.rope.factor},
               {"low_freq_factor", s.rope.low_freq_factor},
               {"high_freq_factor", s.rope.high_freq_factor},
               {"original_max_position_embeddings", static_cast<int64_t>(s.rope.original_max_position_embeddings)}};
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", s.vocab},
          {"hidden_size", s.d_model},
          {"intermediate_size", s.ffn_hidden},
          {"num_hidden_layers", s.n_layer},
          {"num_attention_heads", s.n_head},
          {"num_key_value_heads", s.n_kv_head},
          {"head_dim", s.head_dim()},
          {"hidden_act", "silu"},
          {"max_position_embeddings", s.seq_len},
          {"rms_norm_eps", s.rms_norm_eps},
          {"rope_theta", s.rope.theta},
          {"rope_scaling", scaling},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"mlp_bias", false},
          {"pretraining_tp", 1},
          {"initializer_range", 0.02},
          {"tie_word_embeddings", s.tie_word_embeddings},
          {"use_cache", true},
          {"torch_dtype", dtype == "bf16" ? "bfloat16" : "float32"}};
}

// Hugging Face's config.json of the model.
nlohmann::json hf_config(const zt::ModelDesc& md, const std::string& dtype) {
  if (md.arch() == "llama") return hf_llama_config(md, dtype);
  ZT_CHECK(md.arch() == "gpt2", "no Hugging Face config for architecture ", md.arch());
  const zt::ModelShape& s = md.shape;
  return {{"model_type", "gpt2"},        {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", s.vocab},       {"n_positions", s.seq_len},
          {"n_ctx", s.seq_len},          {"n_embd", s.d_model},
          {"n_layer", s.n_layer},        {"n_head", s.n_head},
          {"n_inner", nullptr},          {"activation_function", "gelu_new"},
          {"layer_norm_epsilon", kLayerNormEps}, {"resid_pdrop", 0.0},
          {"embd_pdrop", 0.0},           {"attn_pdrop", 0.0},
          {"initializer_range", 0.02},   {"tie_word_embeddings", true},
          {"scale_attn_weights", true},  {"use_cache", true},
          {"torch_dtype", dtype == "bf16" ? "bfloat16" : "float32"}};
}

// The tensor's dimensions as Hugging Face stores it.
std::vector<int64_t> hf_dims(const zt::TensorDesc& t) {
  const zt::Shape s = t.hf_shape();
  std::vector<int64_t> dims;
  for (int i = 0; i < s.rank(); ++i) dims.push_back(s[i]);
  return dims;
}

// A tensor's values in HF layout as bytes of the export dtype.
std::vector<uint8_t> hf_bytes(const zt::TensorDesc& t, const float* src, bool bf16) {
  std::vector<float> v(src, src + t.shape.numel());
  if (t.hf_layout == zt::HfLayout::transposed) {
    const int64_t R = t.shape[0], Cc = t.shape[1];
    for (int64_t r = 0; r < R; ++r)
      for (int64_t c = 0; c < Cc; ++c) v[c * R + r] = src[r * Cc + c];
  }
  std::vector<uint8_t> out;
  if (bf16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t b = zt::f32_to_bf16(v[i]).bits;
      out[2 * i] = static_cast<uint8_t>(b & 0xFF);
      out[2 * i + 1] = static_cast<uint8_t>(b >> 8);
    }
  } else {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());  // x86/ARM: little-endian
  }
  return out;
}

// One dataset per HF name; bf16 is stored as uint16 bit patterns with the
// attribute dtype = "bfloat16" (HDF5 has no bfloat16 type).
void write_h5_dataset(hid_t file, const std::string& path, const zt::TensorDesc& t,
                      const std::vector<uint8_t>& bytes, bool bf16) {
  const std::vector<int64_t> shape = hf_dims(t);
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  zt::h5::Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  ZT_H5_CHECK(space.valid(), "H5Screate_simple", " failed for ", path);
  const hid_t ftype = bf16 ? H5T_STD_U16LE : H5T_IEEE_F32LE;
  const hid_t mtype = bf16 ? H5T_NATIVE_UINT16 : H5T_NATIVE_FLOAT;
  zt::h5::Id ds(H5Dcreate2(file, t.hf_name.c_str(), ftype, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                H5Dclose);
  ZT_H5_CHECK(ds.valid(), "creating dataset " + t.hf_name, " failed for ", path);
  ZT_H5_CHECK(H5Dwrite(ds.get(), mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0,
              "writing dataset " + t.hf_name, " failed for ", path);
  const std::string dt = bf16 ? "bfloat16" : "float32";
  zt::h5::Id aspace(H5Screate(H5S_SCALAR), H5Sclose);
  zt::h5::Id atype(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(atype.get(), dt.size());
  zt::h5::Id attr(H5Acreate2(ds.get(), "dtype", atype.get(), aspace.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  ZT_H5_CHECK(attr.valid() && H5Awrite(attr.get(), atype.get(), dt.data()) >= 0, "writing attribute dtype",
              " failed for ", path);
}

// What the export says about tokens ([Note: export for pipeline]).
struct TokenInfo {
  nlohmann::json bos, eos;            // ids (an id or a list), null when unknown
  std::vector<std::string> copied;    // files written beside the weights
  std::string note;                   // printed: where they came from, or why there are none
};

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw zt::UserError("cannot read " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw zt::UserError(path + ": not JSON: " + e.what());
  }
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) throw zt::Error("cannot write " + path, __FILE__, __LINE__);
}

// The text of special token `id` of a tokenizer.json (its added_tokens).
nlohmann::json added_token_text(const nlohmann::json& tj, uint32_t id) {
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array())
    for (const auto& t : tj["added_tokens"])
      if (t.value("id", -1) == static_cast<int64_t>(id) && t.contains("content")) return t["content"];
  return nullptr;
}

// The tokenizer the run names (data.tokenizer), copied into out_dir.
TokenInfo run_tokenizer(const std::string& path, const std::string& out_dir, int64_t seq_len) {
  if (!fs::exists(path))
    throw zt::UserError("export: the run's data.tokenizer " + path + " no longer exists (it is copied into the export)");
  const std::unique_ptr<zt::Tokenizer> tok = zt::load_tokenizer(path);
  TokenInfo info;
  const std::optional<uint32_t> bos = tok->default_bos(), eos = tok->default_eos();
  if (bos) info.bos = *bos;
  if (eos) info.eos = *eos;
  if (!bos && eos) info.bos = *eos;  // GPT-2: <|endoftext|> is both
  nlohmann::json tc = {{"model_max_length", seq_len}, {"clean_up_tokenization_spaces", false}};
  if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    fs::copy_file(path, out_dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
    info.copied.push_back("tokenizer.json");
    const nlohmann::json tj = read_json_file(path);
    tc["tokenizer_class"] = "PreTrainedTokenizerFast";
    if (info.bos.is_number()) tc["bos_token"] = added_token_text(tj, info.bos.get<uint32_t>());
    if (info.eos.is_number()) tc["eos_token"] = added_token_text(tj, info.eos.get<uint32_t>());
  } else {
    fs::copy_file(path, out_dir + "/tokenizer.model", fs::copy_options::overwrite_existing);
    info.copied.push_back("tokenizer.model");
    tc["tokenizer_class"] = "LlamaTokenizer";
  }
  write_json_file(out_dir + "/tokenizer_config.json", tc);
  info.copied.push_back("tokenizer_config.json");
  info.note = "tokenizer: the run's data.tokenizer " + path + " (" + tok->kind() + ")";
  return info;
}

// The Hugging Face directory the weights came from: `zckpt import`'s
// manifest, or model.init_from followed through checkpoints; "" if none.
std::string hf_origin(const nlohmann::json& manifest, int depth = 0) {
  if (depth > 8) return "";
  if (manifest.contains("imported_from") && manifest["imported_from"].contains("hf_dir"))
    return manifest["imported_from"]["hf_dir"].get<std::string>();
  const nlohmann::json* m = manifest.contains("config") ? &manifest["config"] : nullptr;
  if (m == nullptr || !m->contains("model") || !(*m)["model"].contains("init_from")) return "";
  std::string from = (*m)["model"]["init_from"].get<std::string>();
  if (fs::exists(from + "/config.json") && !fs::exists(from + "/manifest.json")) return from;
  if (!fs::exists(from + "/manifest.json")) {
    const std::optional<std::string> latest = zt::read_latest_name(from);
    if (!latest) return "";
    from += "/" + *latest;
  }
  if (!fs::exists(from + "/manifest.json")) return "";
  return hf_origin(read_json_file(from + "/manifest.json"), depth + 1);
}

TokenInfo export_tokenizer(const nlohmann::json& manifest, const std::string& out_dir, int64_t seq_len) {
  const nlohmann::json& data = manifest.contains("config") ? manifest["config"].value("data", nlohmann::json::object())
                                                          : nlohmann::json::object();
  if (data.contains("tokenizer") && data["tokenizer"].is_string())
    return run_tokenizer(data["tokenizer"].get<std::string>(), out_dir, seq_len);
  TokenInfo info;
  const std::string hf = hf_origin(manifest);
  if (!hf.empty() && fs::exists(hf + "/config.json")) {
    const nlohmann::json c = read_json_file(hf + "/config.json");
    info.bos = c.value("bos_token_id", nlohmann::json());
    info.eos = c.value("eos_token_id", nlohmann::json());
    if (fs::exists(hf + "/generation_config.json")) {
      const nlohmann::json g = read_json_file(hf + "/generation_config.json");
      if (g.contains("bos_token_id")) info.bos = g["bos_token_id"];
      if (g.contains("eos_token_id")) info.eos = g["eos_token_id"];
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model"})
      if (fs::exists(hf + "/" + f)) {
        fs::copy_file(hf + "/" + f, out_dir + "/" + f, fs::copy_options::overwrite_existing);
        info.copied.push_back(f);
      }
    info.note = "tokenizer: " +
                (info.copied.empty() ? "none: the Hugging Face model the weights came from (" + hf +
                                           ") has no tokenizer files; BOS/EOS ids from its config"
                                     : "the files of the Hugging Face model the weights came from (" + hf + ")");
    return info;
  }
  info.note = "tokenizer: none written: the run names no data.tokenizer (its tokens are ztrain's byte tokenizer "
              "or were made elsewhere), and the byte tokenizer has no Hugging Face form; config.json has no "
              "BOS/EOS ids. Give transformers a tokenizer yourself (AutoTokenizer would find none here).";
  return info;
}

}  // namespace

int cmd_export(int argc, char** argv) {
  std::string step_dir, out_dir, format = "safetensors", dtype = "f32";
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help")("out", po::value<std::string>(&out_dir), "output directory")(
      "format", po::value<std::string>(&format), "safetensors (default) or hdf5")(
      "dtype", po::value<std::string>(&dtype), "f32 (default) or bf16 (round to nearest even)");
  po::variables_map vm;
  if (!parse_command(argc, argv, opts,
      "usage: zckpt export STEP_DIR --out DIR [--format safetensors|hdf5] [--dtype f32|bf16]\n\n"
      "Writes the master weights as a Hugging Face GPT2LMHeadModel or LlamaForCausalLM:\n"
      "DIR/model.safetensors (or DIR/model.h5), config.json, generation_config.json and\n"
      "the run's tokenizer (data.tokenizer, or the Hugging Face model the weights came from).\n\n",
      step_dir, vm))
    return 0;
  if (step_dir.empty()) throw UsageError("export: STEP_DIR is required");
  if (out_dir.empty()) throw UsageError("export: --out DIR is required");
  if (format != "safetensors" && format != "hdf5")
    throw UsageError("export: --format must be safetensors or hdf5, got '" + format + "'");
  if (dtype != "f32" && dtype != "bf16") throw UsageError("export: --dtype must be f32 or bf16, got '" + dtype + "'");
  const bool bf16 = dtype == "bf16";

  require_verified(step_dir);
  zt::CheckpointReader reader(step_dir);
  const std::vector<std::string> states = reader.states();
  if (std::find(states.begin(), states.end(), "master") == states.end())
    throw zt::UserError(step_dir + ": checkpoint has no master state");
  const zt::ModelDesc md = checkpoint_model(reader);
  fs::create_directories(out_dir);

  const std::string path = out_dir + (format == "safetensors" ? "/model.safetensors" : "/model.h5");
  std::vector<zt::SafeTensorsWriter::Spec> specs;
  for (const zt::UnitDesc& unit : md.units)
    for (const zt::TensorDesc& t : unit.tensors) specs.push_back({t.hf_name, bf16 ? "BF16" : "F32", hf_dims(t)});
  std::unique_ptr<zt::SafeTensorsWriter> st;
  zt::h5::Id file;
  zt::h5::Quiet quiet;
  if (format == "safetensors") {
    st = std::make_unique<zt::SafeTensorsWriter>(path, specs, nlohmann::json{{"format", "pt"}});
  } else {
    file = zt::h5::Id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    ZT_H5_CHECK(file.valid(), "H5Fcreate", " failed for ", path);
  }
  int64_t total = 0;
  for (size_t u = 0; u < md.units.size(); ++u) {  // one unit in memory at a time
    const int64_t n = reader.unit_numel(static_cast<int>(u));
    std::vector<float> buf(static_cast<size_t>(n));
    reader.read_range("master", static_cast<int>(u), 0, n, buf.data());
    int64_t off = 0;
    for (const zt::TensorDesc& t : md.units[u].tensors) {
      const std::vector<uint8_t> bytes = hf_bytes(t, buf.data() + off, bf16);
      if (st) {
        st->write(bytes.data(), bytes.size());
      } else {
        write_h5_dataset(file.get(), path, t, bytes, bf16);
      }
      off += t.shape.numel();
    }
    total += n;
  }
  if (st) st->finish();
  if (file.valid()) ZT_H5_CHECK(file.close(), "H5Fclose", " failed for ", path);

  const TokenInfo tok = export_tokenizer(reader.manifest(), out_dir, md.shape.seq_len);
  nlohmann::json config = hf_config(md, dtype);
  config["bos_token_id"] = tok.bos;
  config["eos_token_id"] = tok.eos;
  write_json_file(out_dir + "/config.json", config);
  nlohmann::json gen = {{"bos_token_id", tok.bos}, {"eos_token_id", tok.eos}};
  if (tok.eos.is_number()) gen["pad_token_id"] = tok.eos;  // what generate() would pick, without its warning
  write_json_file(out_dir + "/generation_config.json", gen);
  std::cout << "exported " << total << " parameters (" << md.arch() << ", " << specs.size() << " tensors, " << dtype
            << ") to " << path << ", " << out_dir << "/config.json and generation_config.json\n";
  std::cout << tok.note;
  for (size_t i = 0; i < tok.copied.size(); ++i) std::cout << (i ? ", " : "; wrote ") << tok.copied[i];
  std::cout << "\n";
  return 0;
}

}  // namespace zckpt
