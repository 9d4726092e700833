// zckpt export: the fp32 master weights of a GPT-2 checkpoint as a Hugging
// Face GPT2LMHeadModel (model.safetensors or model.h5 + config.json); the
// names and layouts come from the checkpoint's model description
// (zckpt_model.hpp), the config.json from hf_config below.
#include <hdf5.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/safetensors.hpp"
#include "zckpt_commands.hpp"
#include "zckpt_model.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace zckpt {
namespace {

constexpr double kLayerNormEps = 1e-5;  // modules/cpu_kernels_norm.cpp and the CUDA LayerNorm

// Hugging Face's config.json of the model. GPT-2 only: describe_model
// describes no other architecture from a config yet.
nlohmann::json hf_config(const zt::ModelDesc& md, const std::string& dtype) {
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
      "Writes the master weights as a Hugging Face GPT2LMHeadModel: DIR/model.safetensors\n"
      "(or DIR/model.h5) and DIR/config.json.\n\n",
      step_dir, vm))
    return 0;
  if (step_dir.empty()) throw UsageError("export: STEP_DIR is required");
  if (out_dir.empty()) throw UsageError("export: --out DIR is required");
  if (format != "safetensors" && format != "hdf5")
    throw UsageError("export: --format must be safetensors or hdf5, got '" + format + "'");
  if (dtype != "f32" && dtype != "bf16") throw UsageError("export: --dtype must be f32 or bf16, got '" + dtype + "'");
  const bool bf16 = dtype == "bf16";

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

  std::ofstream cfg(out_dir + "/config.json", std::ios::trunc);
  cfg << hf_config(md, dtype).dump(2) << "\n";
  cfg.close();
  if (!cfg) throw zt::Error("cannot write " + out_dir + "/config.json", __FILE__, __LINE__);
  std::cout << "exported " << total << " parameters (" << specs.size() << " tensors, " << dtype << ") to " << path
            << " and " << out_dir << "/config.json\n";
  return 0;
}

}  // namespace zckpt
