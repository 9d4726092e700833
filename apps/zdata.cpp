// zdata: prepares token shards in llm.c's format for ztrain.
//
//   zdata text --out DIR [--val-fraction F] FILE...   byte-level tokens of text files
//   zdata markov --out DIR [--states K] ...            the synthetic Markov corpus
//   zdata inspect FILE                                  header and token statistics
//
// Exit status: 0 on success, 2 for bad usage, 1 for any other error.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/byte_tokenizer.hpp"
#include "io/synthetic.hpp"
#include "io/token_dataset.hpp"
#include "io/token_shard.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

// Bad command line: exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* kUsage =
    "usage: zdata COMMAND [options]\n"
    "\n"
    "Prepares token shards in llm.c's format (int32 header[256], uint16 tokens) for ztrain.\n"
    "\n"
    "commands:\n"
    "  text --out DIR [--val-fraction F] FILE...\n"
    "      byte-level tokens (vocab 256) of the files, concatenated in order; the last\n"
    "      fraction F goes to DIR/val.bin, the rest to DIR/train.bin\n"
    "  markov --out DIR [--states K] [--successors M] [--background B]\n"
    "         [--train-tokens N] [--val-tokens N] [--seed S]\n"
    "      a seeded first-order Markov source of known entropy rate: DIR/train.bin,\n"
    "      DIR/val.bin and DIR/entropy.json; the defaults make the corpus ztrain embeds\n"
    "  inspect FILE\n"
    "      header, token count, smallest and largest token, unigram entropy\n"
    "\n"
    "Run 'zdata COMMAND --help' for the options of a command.\n";

// Parses argv[first..] against `opts` (+ positionals); --help prints and returns false.
bool parse(int argc, char** argv, const std::string& command, const po::options_description& opts,
           const po::positional_options_description& positional, po::variables_map& vm) {
  po::options_description all(opts);
  all.add_options()("help,h", "show this help");
  std::vector<std::string> args(argv + 2, argv + argc);
  po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
  if (vm.count("help")) {
    std::cout << "usage: zdata " << command << " [options]\n\n" << all;
    return false;
  }
  po::notify(vm);
  return true;
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) ZT_USER_ERROR("cannot create directory '", dir, "': ", ec.message());
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) ZT_USER_ERROR("input file '", path, "' does not exist");
  if (!fs::is_regular_file(path, ec)) ZT_USER_ERROR("input '", path, "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) ZT_USER_ERROR("cannot open '", path, "' for reading");
  try {
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    ZT_USER_ERROR("error while reading '", path, "': ", e.what());
  }
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) ZT_USER_ERROR("cannot write '", tmp, "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) ZT_USER_ERROR("cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

std::string fixed(double x, int digits = 4) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << x;
  return os.str();
}

int64_t non_negative(const po::variables_map& vm, const char* name) {
  const int64_t v = vm[name].as<int64_t>();
  if (v < 0) throw UsageError(std::string("--") + name + " must be >= 0, got " + std::to_string(v));
  return v;
}

int cmd_text(int argc, char** argv) {
  po::options_description opts("zdata text --out DIR [--val-fraction F] FILE...");
  opts.add_options()
      ("out", po::value<std::string>()->required(), "output directory (created if missing)")
      ("val-fraction", po::value<double>()->default_value(0.1), "fraction of tokens, at the end, for val.bin [0, 1)")
      ("files", po::value<std::vector<std::string>>(), "text files");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse(argc, argv, "text", opts, pos, vm)) return 0;
  if (!vm.count("files")) throw UsageError("text: no input files given");
  const double frac = vm["val-fraction"].as<double>();
  if (!(frac >= 0.0 && frac < 1.0)) throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(frac));
  const std::string dir = vm["out"].as<std::string>();

  std::vector<uint16_t> tokens;
  for (const auto& f : vm["files"].as<std::vector<std::string>>()) {
    const std::vector<uint16_t> t = zt::encode_bytes(read_file(f));
    tokens.insert(tokens.end(), t.begin(), t.end());
  }
  const auto n_val = static_cast<size_t>(std::llround(frac * static_cast<double>(tokens.size())));
  std::vector<uint16_t> val(tokens.end() - static_cast<std::ptrdiff_t>(n_val), tokens.end());
  tokens.resize(tokens.size() - n_val);

  make_dir(dir);
  zt::write_token_shard(dir + "/train.bin", tokens);
  zt::write_token_shard(dir + "/val.bin", val);
  std::cout << dir << "/train.bin: " << tokens.size() << " tokens\n"
            << dir << "/val.bin: " << val.size() << " tokens\n"
            << "vocab_size: " << zt::kByteVocabSize << " (byte-level)\n"
            << "unigram entropy of train: "
            << fixed(zt::unigram_entropy_nats(tokens.data(), static_cast<int64_t>(tokens.size())))
            << " nats (the loss of a model that ignores context)\n";
  if (val.empty() && frac > 0.0) std::cerr << "zdata: warning: val.bin is empty\n";
  return 0;
}

int cmd_markov(int argc, char** argv) {
  const zt::MarkovSpec defaults;
  po::options_description opts("zdata markov --out DIR [options]");
  opts.add_options()
      ("out", po::value<std::string>()->required(), "output directory (created if missing)")
      ("states", po::value<int>()->default_value(defaults.states), "K: states = tokens 0..K-1 = vocab size [2, 1024]")
      ("successors", po::value<int>()->default_value(defaults.successors), "likely next states per state")
      ("background", po::value<double>()->default_value(defaults.background, fixed(defaults.background, 2)), "probability mass spread over all states (0, 1]")
      ("train-tokens", po::value<int64_t>()->default_value(zt::kEmbeddedTrainTokens), "tokens in train.bin")
      ("val-tokens", po::value<int64_t>()->default_value(zt::kEmbeddedValTokens), "tokens in val.bin")
      ("seed", po::value<std::string>()->default_value(std::to_string(defaults.seed)), "seed (unsigned 64-bit)");
  po::variables_map vm;
  if (!parse(argc, argv, "markov", opts, po::positional_options_description(), vm)) return 0;
  const std::string seed_text = vm["seed"].as<std::string>();
  if (seed_text.empty() || seed_text.find_first_not_of("0123456789") != std::string::npos || seed_text.size() > 20)
    throw UsageError("--seed must be an unsigned integer, got '" + seed_text + "'");
  zt::MarkovSpec spec;
  spec.states = vm["states"].as<int>();
  spec.successors = vm["successors"].as<int>();
  spec.background = vm["background"].as<double>();
  spec.seed = std::stoull(seed_text);
  const int64_t n_train = non_negative(vm, "train-tokens");
  const int64_t n_val = non_negative(vm, "val-tokens");
  const std::string dir = vm["out"].as<std::string>();

  std::optional<zt::MarkovSource> source;
  try {
    source.emplace(spec);
  } catch (const zt::UserError& e) {
    throw UsageError(e.what());  // out-of-range parameters are a command-line problem
  }
  const std::vector<uint16_t> train = source->generate(n_train, zt::kMarkovTrainStream);
  const std::vector<uint16_t> val = source->generate(n_val, zt::kMarkovValStream);
  const double unigram = zt::unigram_entropy_nats(train.data(), n_train);

  make_dir(dir);
  zt::write_token_shard(dir + "/train.bin", train);
  zt::write_token_shard(dir + "/val.bin", val);
  const nlohmann::json info = {
      {"entropy_nats", source->entropy_rate()},
      {"states", spec.states},
      {"vocab_size", spec.states},
      {"successors", spec.successors},
      {"background", spec.background},
      {"seed", spec.seed},
      {"train_tokens", n_train},
      {"val_tokens", n_val},
      {"train_stream", zt::kMarkovTrainStream},
      {"val_stream", zt::kMarkovValStream},
      {"unigram_entropy_nats", unigram},
      {"generator", "zt::MarkovSource (src/io/synthetic.hpp)"},
  };
  write_text_file(dir + "/entropy.json", info.dump(2) + "\n");
  std::cout << dir << "/train.bin: " << n_train << " tokens\n"
            << dir << "/val.bin: " << n_val << " tokens\n"
            << "vocab_size: " << spec.states << "\n"
            << "ideal loss (entropy rate): " << fixed(source->entropy_rate()) << " nats\n"
            << "unigram entropy of train: " << fixed(unigram) << " nats; log(vocab): "
            << fixed(std::log(static_cast<double>(spec.states))) << " nats\n";
  return 0;
}

int cmd_inspect(int argc, char** argv) {
  po::options_description opts("zdata inspect FILE");
  opts.add_options()("file", po::value<std::string>(), "token shard");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!parse(argc, argv, "inspect", opts, pos, vm)) return 0;
  if (!vm.count("file")) throw UsageError("inspect: no file given");
  const zt::TokenShard shard(vm["file"].as<std::string>());  // validates the whole file
  int min_token = -1;
  if (shard.size() > 0) {
    min_token = 65535;
    for (int64_t i = 0; i < shard.size(); ++i) min_token = std::min<int>(min_token, shard.tokens()[i]);
  }
  std::cout << "file: " << shard.path() << "\n"
            << "magic: " << zt::kTokenShardMagic << ", version: " << zt::kTokenShardVersion << "\n"
            << "tokens: " << shard.size() << "\n"
            << "bytes: " << zt::kTokenShardHeaderBytes + 2 * shard.size() << "\n";
  if (shard.size() > 0) {
    std::cout << "min token: " << min_token << "\n"
              << "max token: " << shard.max_token() << " (vocab_size must be > " << shard.max_token() << ")\n"
              << "unigram entropy: " << fixed(zt::unigram_entropy_nats(shard.tokens(), shard.size())) << " nats\n";
  }
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError("no command given");
  const std::string command = argv[1];
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "text") return cmd_text(argc, argv);
  if (command == "markov") return cmd_markov(argc, argv);
  if (command == "inspect") return cmd_inspect(argc, argv);
  throw UsageError("unknown command '" + command + "' (expected text, markov or inspect)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "zdata: error: " << e.what() << "\n" << "run 'zdata --help' for usage\n";
    return 2;
  } catch (const po::error& e) {
    std::cerr << "zdata: error: " << e.what() << "\n" << "run 'zdata --help' for usage\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zdata: error: " << e.what() << "\n";
    return 1;
  }
}
