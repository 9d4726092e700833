// zckpt logits: runs a GPT-2 or Llama checkpoint's fp32 master weights forward on
// given token sequences on the CPU and writes the logits as a NumPy .npy file
// (float32, shape (B, T, V)), so that another implementation (Hugging Face
// transformers loading `zckpt export`) can be compared with ztrain's own.
//
// The blocks run through the trainer's UnitRunner and CpuKernels; the logits
// are the final norm of x times the vocabulary table (wte, lm_head)
// transposed, computed here because the training head
// fuses them with the loss and never holds them. As a check on that second
// path, the mean next-token loss is computed from the written logits and from
// the training head and both are printed.
#include <boost/program_options.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "modules/cpu_kernels.hpp"
#include "modules/model.hpp"
#include "modules/runner.hpp"
#include "runtime/device.hpp"
#include "zckpt_commands.hpp"
#include "zckpt_model.hpp"

namespace po = boost::program_options;

namespace zckpt {
namespace {

// Sequences from text: one per line (or per ';' in --tokens), ids separated
// by commas or white space; all of one length.
std::vector<std::vector<int32_t>> parse_sequences(const std::string& text, const std::string& where, int64_t V,
                                                  int64_t T_max) {
  std::vector<std::vector<int32_t>> seqs;
  std::string line;
  std::istringstream lines(text);
  int line_no = 0;
  while (std::getline(lines, line, '\n')) {
    std::istringstream parts(line);
    std::string part;
    while (std::getline(parts, part, ';')) {
      ++line_no;
      for (char& ch : part)
        if (ch == ',') ch = ' ';
      std::istringstream ids(part);
      std::vector<int32_t> seq;
      std::string tok;
      while (ids >> tok) {
        char* end = nullptr;
        const long long v = std::strtoll(tok.c_str(), &end, 10);
        if (end == tok.c_str() || *end != '\0')
          throw UsageError(where + ": sequence " + std::to_string(line_no) + ": '" + tok + "' is not a token id");
        if (v < 0 || v >= V)
          throw UsageError(where + ": sequence " + std::to_string(line_no) + ": token " + tok +
                           " outside the vocabulary [0, " + std::to_string(V) + ")");
        seq.push_back(static_cast<int32_t>(v));
      }
      if (seq.empty()) continue;
      if (static_cast<int64_t>(seq.size()) > T_max)
        throw UsageError(where + ": sequence " + std::to_string(line_no) + " has " + std::to_string(seq.size()) +
                         " tokens, the model's seq_len is " + std::to_string(T_max));
      if (!seqs.empty() && seq.size() != seqs[0].size())
        throw UsageError(where + ": sequence " + std::to_string(line_no) + " has " + std::to_string(seq.size()) +
                         " tokens, the first has " + std::to_string(seqs[0].size()) + " (all must be equal)");
      seqs.push_back(std::move(seq));
    }
  }
  if (seqs.empty()) throw UsageError(where + ": no token sequence given");
  return seqs;
}

// NumPy format 1.0: magic, header length, a dict padded with spaces to a
// multiple of 64 bytes and ended by '\n', then the raw little-endian data.
void write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  size_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
    n *= static_cast<size_t>(shape[i]);
  }
  dict += "), }";
  const size_t prefix = 10;  // magic (6) + version (2) + header length (2)
  size_t total = prefix + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw zt::UserError("cannot open " + path + " for writing: " + std::strerror(errno));
  const uint16_t hlen = static_cast<uint16_t>(dict.size());
  const char head[8] = {'\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0};
  out.write(head, 8);
  const char len[2] = {static_cast<char>(hlen & 0xFF), static_cast<char>(hlen >> 8)};
  out.write(len, 2);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(n * sizeof(float)));
  out.close();
  if (!out) throw zt::UserError("writing " + path + " failed: " + std::strerror(errno));
}

// A NumPy .npy file of float32 ('<f4', C order): its shape and values.
std::vector<float> read_npy(const std::string& path, std::vector<int64_t>* shape) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw zt::UserError("cannot read " + path + ": " + std::strerror(errno));
  char head[10];
  if (!in.read(head, 10) || std::memcmp(head, "\x93NUMPY", 6) != 0)
    throw zt::UserError(path + ": not a NumPy .npy file");
  size_t hlen = static_cast<uint8_t>(head[8]) | (static_cast<size_t>(static_cast<uint8_t>(head[9])) << 8);
  if (head[6] != 1) {  // versions 2 and 3: a 4-byte header length
    char more[2];
    if (!in.read(more, 2)) throw zt::UserError(path + ": truncated header");
    hlen |= (static_cast<size_t>(static_cast<uint8_t>(more[0])) << 16) |
            (static_cast<size_t>(static_cast<uint8_t>(more[1])) << 24);
  }
  std::string dict(hlen, '\0');
  if (!in.read(dict.data(), static_cast<std::streamsize>(hlen))) throw zt::UserError(path + ": truncated header");
  if (dict.find("'descr': '<f4'") == std::string::npos || dict.find("'fortran_order': False") == std::string::npos)
    throw zt::UserError(path + ": expected little-endian float32 in C order, header " + dict);
  const size_t open = dict.find("'shape': ("), close = dict.find(')', open);
  if (open == std::string::npos || close == std::string::npos) throw zt::UserError(path + ": no shape in " + dict);
  std::istringstream dims(dict.substr(open + 10, close - open - 10));
  std::string d;
  size_t n = 1;
  shape->clear();
  while (std::getline(dims, d, ','))
    if (d.find_first_not_of(' ') != std::string::npos) {
      shape->push_back(std::stoll(d));
      n *= static_cast<size_t>(shape->back());
    }
  std::vector<float> v(n);
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float))))
    throw zt::UserError(path + ": shorter than its shape");
  return v;
}

// Every unit's master weights, whole, in host memory.
class FullWeights final : public zt::ParamProvider {
 public:
  FullWeights(const zt::Model& model, std::vector<zt::Buffer>& units) : model_(model), units_(units) {}
  std::vector<zt::Tensor> acquire(int unit, zt::Phase) override {
    std::vector<zt::Tensor> views = own(unit);
    for (const zt::TiedParam& t : model_.unit(unit).tied()) views.push_back(own(t.unit)[static_cast<size_t>(t.param)]);
    return views;
  }
  void release(int, zt::Phase) override {}

 private:
  std::vector<zt::Tensor> own(int unit) const {
    std::vector<zt::Tensor> views;
    const zt::Tensor flat = units_[static_cast<size_t>(unit)].tensor();
    int64_t off = 0;
    for (const zt::ParamSpec& p : model_.unit(unit).params()) {
      views.push_back(flat.slice1d(off, p.shape.numel()).reshape(p.shape));
      off += p.shape.numel();
    }
    return views;
  }
  const zt::Model& model_;
  std::vector<zt::Buffer>& units_;
};

}  // namespace

int cmd_logits(int argc, char** argv) {
  std::string step_dir, out_path, tokens_arg, tokens_file, expect;
  double tolerance = 1e-4;
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help")("out", po::value<std::string>(&out_path), "output .npy file")(
      "tokens", po::value<std::string>(&tokens_arg), "token ids: sequences separated by ';', ids by ','")(
      "tokens-file", po::value<std::string>(&tokens_file), "token ids: one sequence per line")(
      "expect", po::value<std::string>(&expect), "reference logits (.npy, float32 (B, T, V)) to compare with")(
      "tolerance", po::value<double>(&tolerance),
      "with --expect: largest |difference| allowed, relative to the largest |reference logit| (default 1e-4)");
  po::variables_map vm;
  if (!parse_command(argc, argv, opts,
      "usage: zckpt logits STEP_DIR (--tokens IDS | --tokens-file FILE) --out FILE.npy\n\n"
      "Runs the checkpoint's fp32 master weights forward on the CPU and writes the logits,\n"
      "float32 (B, T, V), as NumPy .npy. Prints the mean next-token loss computed from the\n"
      "logits and by the training head. With --expect REF.npy, compares them with reference\n"
      "logits (e.g. those transformers computed) and exits 1 if they differ by more than the\n"
      "tolerance.\n\n",
      step_dir, vm))
    return 0;
  if (step_dir.empty()) throw UsageError("logits: STEP_DIR is required");
  if (out_path.empty()) throw UsageError("logits: --out FILE.npy is required");
  if (tokens_arg.empty() == tokens_file.empty()) throw UsageError("logits: give exactly one of --tokens and --tokens-file");
  if (vm.count("tolerance") && expect.empty())
    throw UsageError("logits: --tolerance bounds the comparison with --expect REF.npy, which is not given");
  if (!(tolerance >= 0) || !std::isfinite(tolerance))
    throw UsageError("logits: --tolerance: expected a number >= 0, found " + std::to_string(tolerance));
  if (!expect.empty()) {
    std::error_code ec;
    if (out_path == expect || std::filesystem::equivalent(out_path, expect, ec))
      throw UsageError("logits: --out " + out_path + " is the --expect reference: writing the logits would replace "
                       "the reference before it is read; give another --out");
  }

  require_verified(step_dir);
  zt::CheckpointReader reader(step_dir);
  const zt::Model model = zt::build_model(checkpoint_model(reader));
  const zt::ModelShape& shape = model.desc().shape;
  std::string text = tokens_arg, where = "--tokens";
  if (!tokens_file.empty()) {
    std::ifstream in(tokens_file);
    if (!in) throw zt::UserError("cannot read --tokens-file " + tokens_file + ": " + std::strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    where = tokens_file;
  }
  const std::vector<std::vector<int32_t>> seqs = parse_sequences(text, where, shape.vocab, shape.seq_len);
  const int64_t B = static_cast<int64_t>(seqs.size()), T = static_cast<int64_t>(seqs[0].size());
  const int64_t C = shape.d_model, V = shape.vocab, N = B * T;

  zt::CpuDevice dev;
  zt::CpuKernels kernels;
  std::vector<zt::Buffer> weights;
  for (int u = 0; u < model.num_units(); ++u) {
    const int64_t n = reader.unit_numel(u);
    weights.emplace_back(dev, zt::DType::f32, zt::Shape{n}, zt::MemTag::params);
    reader.read_range("master", u, 0, n, weights.back().as<float>());
  }
  FullWeights provider(model, weights);

  // Targets: the next token; the last position has none (a negative target
  // is ignored by the head and gets loss 0).
  zt::Buffer tokens(dev, zt::DType::i32, zt::Shape{B, T}, zt::MemTag::activations);
  zt::Buffer targets(dev, zt::DType::i32, zt::Shape{B, T}, zt::MemTag::activations);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      tokens.as<int32_t>()[b * T + t] = seqs[static_cast<size_t>(b)][static_cast<size_t>(t)];
      targets.as<int32_t>()[b * T + t] = t + 1 < T ? seqs[static_cast<size_t>(b)][static_cast<size_t>(t + 1)] : -1;
    }

  zt::UnitRunner runner(model.units(), kernels, dev, zt::DType::f32, zt::DType::f32, false);
  zt::MicroBatchState mb(dev, model.num_units());
  const int head = model.num_units() - 1;
  const zt::Tensor losses = runner.forward(0, model.num_units(), mb, provider, tokens.tensor(), targets.tensor());

  // Logits = norm(head input) @ table^T: GPT-2's head views are ln_f.w,
  // ln_f.b and wte (tied); Llama's norm.weight and lm_head (or, tied, the
  // embedding table). The table is the last view either way.
  const std::vector<zt::Tensor> hp = provider.acquire(head, zt::Phase::forward);
  zt::Arena ws(dev, zt::MemTag::workspace);
  const zt::Tensor x = mb.inputs[static_cast<size_t>(head)].reshape(zt::Shape{N, C});
  const zt::Tensor xn = ws.alloc(zt::DType::f32, zt::Shape{N, C});
  const zt::Tensor rstd = ws.alloc(zt::DType::f32, zt::Shape{N});
  if (model.arch() == "gpt2") {
    const zt::Tensor mean = ws.alloc(zt::DType::f32, zt::Shape{N});
    kernels.layernorm_fwd(xn, mean, rstd, x, hp[0], hp[1]);
  } else if (model.arch() == "llama") {
    kernels.rmsnorm_fwd(xn, rstd, x, hp[0], shape.rms_norm_eps);
  } else {
    throw zt::UserError("zckpt logits: no logits head for architecture " + model.arch());
  }
  zt::Buffer logits(dev, zt::DType::f32, zt::Shape{N, V}, zt::MemTag::activations);
  kernels.matmul(ws, logits.tensor(), xn, false, hp.back(), true, false);

  // Mean next-token loss from the logits (double log-sum-exp) and from the head.
  const float* lg = logits.as<float>();
  const float* hl = losses.as<float>();
  double from_logits = 0, from_head = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int32_t y = targets.as<int32_t>()[i];
    if (y < 0) continue;
    const float* row = lg + i * V;
    double mx = row[0];
    for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
    double se = 0;
    for (int64_t v = 0; v < V; ++v) se += std::exp(static_cast<double>(row[v]) - mx);
    from_logits += mx + std::log(se) - row[y];
    from_head += hl[i];
    ++counted;
  }
  write_npy(out_path, lg, {B, T, V});
  std::cout << std::setprecision(9) << "wrote logits (" << B << ", " << T << ", " << V << ") float32 to " << out_path
            << "\n";
  if (counted > 0) {
    std::cout << "next-token loss from logits " << from_logits / counted << ", from the training head "
              << from_head / counted << " (" << counted << " tokens)\n";
  }
  if (!expect.empty()) {
    std::vector<int64_t> rshape;
    const std::vector<float> ref = read_npy(expect, &rshape);
    if (rshape != std::vector<int64_t>{B, T, V})
      throw zt::UserError(expect + ": reference logits of shape (" + [&] {
        std::string s;
        for (size_t i = 0; i < rshape.size(); ++i) s += (i ? ", " : "") + std::to_string(rshape[i]);
        return s;
      }() + "), these are (" + std::to_string(B) + ", " + std::to_string(T) + ", " + std::to_string(V) + ")");
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      max_ref = std::max(max_ref, std::abs(static_cast<double>(ref[i])));
      max_diff = std::max(max_diff, std::abs(static_cast<double>(ref[i]) - lg[i]));
    }
    const double rel = max_ref > 0 ? max_diff / max_ref : max_diff;
    const bool ok = rel <= tolerance;
    std::cout << (ok ? "match" : "MISMATCH") << ": max |logit - reference| " << max_diff << " = " << rel
              << " of the largest |reference| " << max_ref << " (tolerance " << tolerance << ")\n";
    if (!ok) return 1;
  }
  return 0;
}

}  // namespace zckpt
