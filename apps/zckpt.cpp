// zckpt: inspects, verifies, exports and reshards ztrain's sharded checkpoints
// (src/io/checkpoint.hpp), computes their model's logits, and imports Hugging
// Face models as checkpoints.
//
//   zckpt inspect STEP_DIR   step, topology and config summary, files, units, total bytes
//   zckpt verify STEP_DIR    manifest, SHA-256 of every file, every dataset readable
//   zckpt export STEP_DIR --out DIR     Hugging Face GPT-2 / Llama weights (zckpt_export.cpp)
//   zckpt reshard STEP_DIR --out DIR --dp N   re-cut for another DP size (zckpt_reshard.cpp)
//   zckpt logits STEP_DIR --tokens IDS --out F.npy   the model's logits (zckpt_logits.cpp)
//   zckpt import HF_DIR --out DIR       a Hugging Face model as a checkpoint (zckpt_import.cpp)
//
// Exit status: 0 on success ("ok" for verify), 1 when verification finds a
// problem or on any other error, 2 for bad usage.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "zckpt_commands.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

using zckpt::UsageError;

const char* kUsage =
    "usage: zckpt COMMAND STEP_DIR [OPTIONS]\n"
    "\n"
    "Inspects, verifies, exports and reshards ztrain checkpoints (DIR/step_<N>/: manifest.json + rank_*.h5),\n"
    "computes the logits of their model, and imports Hugging Face models.\n"
    "\n"
    "commands:\n"
    "  inspect STEP_DIR   step, topology and config summary, files with sizes,\n"
    "                     units with their element counts, total bytes\n"
    "  verify STEP_DIR    manifest, SHA-256 of every file and a full read of every\n"
    "                     dataset (Fletcher32); prints each problem, exit 1 if any\n"
    "  export STEP_DIR --out DIR [--format safetensors|hdf5] [--dtype f32|bf16]\n"
    "                     the master weights as a Hugging Face GPT2LMHeadModel or\n"
    "                     LlamaForCausalLM (model.safetensors or model.h5, config.json,\n"
    "                     generation_config.json and the run's tokenizer files)\n"
    "  reshard STEP_DIR --out DIR --dp N [--zero-stage S]\n"
    "                     a new committed checkpoint with every state re-cut for\n"
    "                     data-parallel size N (pipeline size 1 only)\n"
    "  logits STEP_DIR (--tokens IDS | --tokens-file FILE) --out FILE.npy\n"
    "                     the model's logits on given tokens (CPU, fp32), as NumPy\n"
    "  import HF_DIR --out DIR\n"
    "                     a Hugging Face GPT-2 or Llama model (safetensors) as a\n"
    "                     checkpoint DIR/step_0 of fp32 master weights\n"
    "\n"
    "run 'zckpt COMMAND --help' for a command's options\n";

// Parses `zckpt COMMAND STEP_DIR [--help]`; false when --help was printed.
bool parse_step_dir(int argc, char** argv, const std::string& command, std::string* step_dir) {
  po::options_description opts("options");
  opts.add_options()("help,h", "show this help");
  po::options_description all(opts);
  all.add_options()("step-dir", po::value<std::string>(step_dir));
  po::positional_options_description pos;
  pos.add("step-dir", 1);
  po::variables_map vm;
  std::vector<std::string> args(argv + 2, argv + argc);
  po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: zckpt " << command << " STEP_DIR\n\n" << opts;
    return false;
  }
  po::notify(vm);
  if (step_dir->empty()) throw UsageError(command + ": STEP_DIR is required");
  return true;
}

std::string human_bytes(uintmax_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  std::ostringstream os;
  os << std::fixed << std::setprecision(u == 0 ? 0 : 1) << v << " " << units[u];
  return os.str();
}

// A one-line summary of a JSON section: scalars as key=value, objects by their keys.
std::string summary(const nlohmann::json& j) {
  if (!j.is_object()) return j.dump();
  std::string out;
  for (const auto& [k, v] : j.items()) {
    if (!out.empty()) out += " ";
    out += k + "=" + (v.is_structured() ? (v.is_object() ? "{...}" : "[" + std::to_string(v.size()) + "]") : v.dump());
  }
  return out;
}

int cmd_inspect(int argc, char** argv) {
  std::string step_dir;
  if (!parse_step_dir(argc, argv, "inspect", &step_dir)) return 0;
  zt::CheckpointReader reader(step_dir);
  const nlohmann::json& m = reader.manifest();
  std::cout << "checkpoint " << step_dir << "\n";
  std::cout << "  version " << m.value("version", nlohmann::json()).dump() << ", step "
            << m.value("step", nlohmann::json()).dump() << "\n";
  if (m.contains("topology")) std::cout << "  topology: " << summary(m["topology"]) << "\n";
  if (m.contains("config")) {
    const nlohmann::json& c = m["config"];
    if (c.is_object()) {
      for (const auto& [k, v] : c.items()) std::cout << "  config." << k << ": " << summary(v) << "\n";
    } else {
      std::cout << "  config: " << c.dump() << "\n";
    }
  }
  uintmax_t total = 0;
  std::cout << "files:\n";
  for (const auto& [name, sha] : m["files"].items()) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(step_dir + "/" + name, ec);
    total += ec ? 0 : size;
    std::cout << "  " << std::left << std::setw(16) << name << std::right << std::setw(14)
              << (ec ? std::string("missing") : std::to_string(size)) << "  " << sha.get<std::string>() << "\n";
  }
  int64_t params = 0;
  std::cout << "units (states:";
  for (const std::string& s : reader.states()) std::cout << " " << s;
  std::cout << "):\n";
  for (int u : reader.units()) {
    params += reader.unit_numel(u);
    std::cout << "  " << std::setw(4) << u << "  " << std::left << std::setw(24) << reader.unit_name(u)
              << std::right << std::setw(14) << reader.unit_numel(u) << "\n";
  }
  std::cout << "parameters: " << params << " in " << reader.units().size() << " units\n";
  std::cout << "total bytes: " << total << " (" << human_bytes(total) << ")\n";
  return 0;
}

int cmd_verify(int argc, char** argv) {
  std::string step_dir;
  if (!parse_step_dir(argc, argv, "verify", &step_dir)) return 0;
  const std::vector<std::string> problems = zt::verify_checkpoint(step_dir, /*read_data=*/true);
  for (const std::string& p : problems) std::cout << p << "\n";
  if (!problems.empty()) {
    std::cout << problems.size() << " problem(s) in " << step_dir << "\n";
    return 1;
  }
  std::cout << "ok\n";
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError("no command given");
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "inspect") return cmd_inspect(argc, argv);
  if (command == "verify") return cmd_verify(argc, argv);
  if (command == "export") return zckpt::cmd_export(argc, argv);
  if (command == "reshard") return zckpt::cmd_reshard(argc, argv);
  if (command == "logits") return zckpt::cmd_logits(argc, argv);
  if (command == "import") return zckpt::cmd_import(argc, argv);
  throw UsageError("unknown command '" + command + "' (expected inspect, verify, export, reshard, logits or import)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "zckpt: error: " << e.what() << "\n" << "run 'zckpt --help' for usage\n";
    return 2;
  } catch (const po::error& e) {
    std::cerr << "zckpt: error: " << e.what() << "\n" << "run 'zckpt --help' for usage\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zckpt: error: " << e.what() << "\n";
    return 1;
  }
}
