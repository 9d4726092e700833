// zdata: prepares token shards in llm.c's format for ztrain.
//
//   zdata text --out DIR [--val-fraction F] FILE...   byte-level tokens of text files
//   zdata tokenize --tokenizer T --out DIR FILE...     tokenizer.json / SentencePiece tokens
//   zdata finetune --tokenizer T --format F --out DIR FILE.jsonl...
//                                                       fine-tuning tokens + loss masks
//   zdata markov --out DIR [--states K] ...            the synthetic Markov corpus
//   zdata inspect FILE                                  header and token statistics
//
// Exit status: 0 on success, 2 for bad usage, 1 for any other error.
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "io/byte_tokenizer.hpp"
#include "io/finetune_data.hpp"
#include "io/loss_mask.hpp"
#include "io/synthetic.hpp"
#include "io/token_dataset.hpp"
#include "io/token_shard.hpp"
#include "io/tokenize_text.hpp"
#include "io/tokenizer.hpp"

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
    "Prepares token shards in llm.c's format (int32 header[256], then uint16 tokens, or\n"
    "uint32 tokens when the vocabulary exceeds 65,536 ids) for ztrain.\n"
    "\n"
    "commands:\n"
    "  text --out DIR [--val-fraction F] FILE...\n"
    "      byte-level tokens (vocab 256) of the files, concatenated in order; the last\n"
    "      fraction F goes to DIR/val.bin, the rest to DIR/train.bin\n"
    "  tokenize --tokenizer FILE --out DIR [--val-fraction F] [--docs MODE] [--bos B]\n"
    "         [--eos E] [--threads N] [--progress] [--split-special] FILE...\n"
    "      tokens of the files by a Hugging Face tokenizer.json (byte-level BPE: GPT-2,\n"
    "      Llama 3) or a SentencePiece .model (Llama 2), on N threads; train.bin, val.bin\n"
    "  finetune --tokenizer FILE --format prompt_completion|chat [--chat-template NAME]\n"
    "         --out DIR [--val-fraction F] [--bos B] [--eos E] FILE.jsonl...\n"
    "      JSONL examples ({\"prompt\", \"completion\"} or {\"messages\": [...]}) to\n"
    "      train.bin plus a loss mask train.mask (only completion / assistant tokens\n"
    "      count in the loss) that also marks where each example starts (for\n"
    "      data.packing); val.bin and val.mask hold the last fraction F of examples\n"
    "  markov --out DIR [--states K] [--successors M] [--background B]\n"
    "         [--train-tokens N] [--val-tokens N] [--seed S]\n"
    "      a seeded first-order Markov source of known entropy rate: DIR/train.bin,\n"
    "      DIR/val.bin and DIR/entropy.json; the defaults make the corpus ztrain embeds\n"
    "  inspect FILE\n"
    "      header, token count, smallest and largest token, unigram entropy; the loss\n"
    "      mask beside it, if any\n"
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

// The output directory, made before anything is written to it. A run that
// writes no validation split into a directory holding an earlier run's
// val.bin would leave a train.bin and a val.bin that share tokens, and
// ztrain would validate on training data: refused (`how` names the option
// that gives a split) rather than deleted, since the file is the user's.
void make_out_dir(const std::string& dir, bool writes_val, const std::string& how) {
  if (!writes_val) {
    for (const std::string& name : {std::string("val.bin"), zt::mask_path_for("val.bin")}) {
      std::error_code ec;
      if (fs::exists(dir + "/" + name, ec))
        throw UsageError(dir + "/" + name + " is left from an earlier run, and this run writes no validation split: "
                         "the new train.bin would hold the tokens of that old validation set; remove it, or give " +
                         how);
    }
  }
  make_dir(dir);
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

// [Note: no empty shards] An empty shard is a file ztrain cannot read: no
// tokens at all is an error before anything is written; an empty val split
// (--val-fraction 0, or a fraction of too few tokens) writes no val.bin, as
// finetune writes no val files.
void check_split(const char* command, size_t tokens, size_t n_val, double frac) {
  if (tokens == 0) ZT_USER_ERROR(command, ": the input files hold no tokens (empty input): nothing written");
  if (n_val >= tokens)
    ZT_USER_ERROR(command, ": --val-fraction ", frac, " of ", tokens,
                  " tokens leaves none for train.bin: nothing written");
  if (n_val == 0 && frac > 0.0)
    std::cerr << "zdata: warning: --val-fraction " << frac << " of " << tokens
              << " tokens is none: no val.bin written\n";
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
  check_split("text", tokens.size(), n_val, frac);
  std::vector<uint16_t> val(tokens.end() - static_cast<std::ptrdiff_t>(n_val), tokens.end());
  tokens.resize(tokens.size() - n_val);

  make_out_dir(dir, !val.empty(), "--val-fraction > 0");
  zt::write_token_shard(dir + "/train.bin", tokens);
  if (!val.empty()) zt::write_token_shard(dir + "/val.bin", val);
  std::cout << dir << "/train.bin: " << tokens.size() << " tokens\n"
            << dir << "/val.bin: "
            << (val.empty() ? "not written (no val split)" : std::to_string(val.size()) + " tokens") << "\n"
            << "vocab_size: " << zt::kByteVocabSize << " (byte-level)\n"
            << "unigram entropy of train: "
            << fixed(zt::unigram_entropy_nats(tokens.data(), static_cast<int64_t>(tokens.size())))
            << " nats (the loss of a model that ignores context)\n";
  return 0;
}

// A one-line progress bar on stderr, redrawn in place.
void draw_progress(int64_t done, int64_t total, std::chrono::steady_clock::time_point t0) {
  const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  constexpr int kWidth = 40;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar = "\rzdata: [" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(kWidth - filled), ' ') + "] " + fixed(100.0 * frac, 1) + "% " +
                    fixed(static_cast<double>(done) / 1e6, 1) + "/" + fixed(static_cast<double>(total) / 1e6, 1) +
                    " MB " + fixed(secs > 0 ? static_cast<double>(done) / 1e6 / secs : 0.0, 1) + " MB/s ";
  std::fputs(bar.c_str(), stderr);
  std::fflush(stderr);
}

int cmd_tokenize(int argc, char** argv) {
  po::options_description opts("zdata tokenize --tokenizer FILE --out DIR [options] FILE...");
  opts.add_options()
      ("tokenizer", po::value<std::string>()->required(), "tokenizer.json (byte-level BPE) or SentencePiece .model")
      ("out", po::value<std::string>()->required(), "output directory (created if missing)")
      ("val-fraction", po::value<double>()->default_value(0.1), "fraction of tokens, at the end, for val.bin [0, 1)")
      ("docs", po::value<std::string>()->default_value("file"),
       "documents: file (each file), line (each line), blank-line (paragraphs)")
      ("bos", po::value<std::string>()->default_value("auto"),
       "BOS before each document: auto (the tokenizer's: Llama 2's <s>, the template's <|begin_of_text|>; "
       "none for GPT-2), none, or a token such as '<s>'")
      ("eos", po::value<std::string>()->default_value("none"),
       "EOS after each document: none, auto (the tokenizer's end token, e.g. <|endoftext|>), or a token")
      ("threads", po::value<int>()->default_value(0), "threads (0: all cores)")
      ("item-mb", po::value<double>()->default_value(1.0), "MB of text per work item")
      ("progress", po::bool_switch(), "draw the progress bar even when stderr is not a terminal")
      ("split-special", po::bool_switch(), "tokenizer.json: encode special tokens in the text as plain text")
      ("files", po::value<std::vector<std::string>>(), "text files (UTF-8)");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse(argc, argv, "tokenize", opts, pos, vm)) return 0;
  if (!vm.count("files")) throw UsageError("tokenize: no input files given");
  const double frac = vm["val-fraction"].as<double>();
  if (!(frac >= 0.0 && frac < 1.0)) throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(frac));
  const int threads_arg = vm["threads"].as<int>();
  if (threads_arg < 0) throw UsageError("--threads must be >= 0");
  const double item_mb = vm["item-mb"].as<double>();
  if (!(item_mb > 0.0)) throw UsageError("--item-mb must be > 0");
  zt::TokenizeOptions o;
  try {
    o.docs = zt::parse_doc_mode(vm["docs"].as<std::string>());
  } catch (const zt::UserError& e) {
    throw UsageError(std::string("--docs: ") + e.what());
  }
  o.threads = threads_arg > 0 ? threads_arg : std::max(1u, std::thread::hardware_concurrency());
  o.item_bytes = static_cast<int64_t>(item_mb * 1e6);
  const std::string dir = vm["out"].as<std::string>();
  const std::string tok_path = vm["tokenizer"].as<std::string>();
  const auto tok = zt::load_tokenizer(tok_path, vm["split-special"].as<bool>());

  // --bos / --eos: none, auto, or a token of the vocabulary.
  auto special = [&](const char* flag, const std::optional<uint32_t>& automatic) -> std::optional<uint32_t> {
    const std::string v = vm[flag].as<std::string>();
    if (v == "none") return std::nullopt;
    if (v == "auto") {
      if (!automatic && std::string(flag) == "eos")
        throw UsageError(std::string("--eos auto: tokenizer '") + tok_path + "' has no known end token; name one");
      return automatic;
    }
    const auto id = tok->token_id(v);
    if (!id) throw UsageError(std::string("--") + flag + ": '" + v + "' is not a token of '" + tok_path + "'");
    return id;
  };
  o.bos = special("bos", tok->default_bos());
  o.eos = special("eos", tok->default_eos());

  std::vector<std::string> contents;
  for (const auto& f : vm["files"].as<std::vector<std::string>>()) contents.push_back(read_file(f));
  std::vector<std::string_view> texts(contents.begin(), contents.end());
  int64_t bytes = 0;
  for (const auto& c : contents) bytes += static_cast<int64_t>(c.size());

  // The bar: when asked, or on a terminal for inputs large enough to wait for.
  const bool bar = vm["progress"].as<bool>() || (::isatty(STDERR_FILENO) && bytes >= (int64_t{16} << 20));
  const auto t0 = std::chrono::steady_clock::now();
  if (bar) o.progress = [t0](int64_t done, int64_t total) { draw_progress(done, total, t0); };
  std::vector<uint32_t> tokens = zt::tokenize_texts(*tok, texts, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bar) std::fputs("\n", stderr);
  contents.clear();

  const auto n_val = static_cast<size_t>(std::llround(frac * static_cast<double>(tokens.size())));
  check_split("tokenize", tokens.size(), n_val, frac);
  std::vector<uint32_t> val(tokens.end() - static_cast<std::ptrdiff_t>(n_val), tokens.end());
  tokens.resize(tokens.size() - n_val);
  make_out_dir(dir, !val.empty(), "--val-fraction > 0");
  zt::write_token_shard(dir + "/train.bin", tokens, tok->vocab_size());
  if (!val.empty()) zt::write_token_shard(dir + "/val.bin", val, tok->vocab_size());
  const int64_t n_tok = static_cast<int64_t>(tokens.size() + val.size());
  std::cout << dir << "/train.bin: " << tokens.size() << " tokens\n"
            << dir << "/val.bin: "
            << (val.empty() ? "not written (no val split)" : std::to_string(val.size()) + " tokens") << "\n"
            << "tokenizer: " << tok_path << " (" << tok->kind() << ")\n"
            << "vocab_size: " << tok->vocab_size() << " (" << (tok->vocab_size() <= zt::kTokenShardMaxVocab16 ? "uint16" : "uint32")
            << " ids)\n"
            << "throughput: " << fixed(static_cast<double>(bytes) / 1e6, 2) << " MB in " << fixed(secs, 3) << " s: "
            << fixed(secs > 0 ? static_cast<double>(bytes) / 1e6 / secs : 0.0, 2) << " MB/s, "
            << fixed(secs > 0 ? static_cast<double>(n_tok) / secs : 0.0, 0) << " tokens/s on " << o.threads
            << " threads\n";
  return 0;
}

int cmd_finetune(int argc, char** argv) {
  po::options_description opts("zdata finetune --tokenizer FILE --format F --out DIR [options] FILE.jsonl...");
  opts.add_options()
      ("tokenizer", po::value<std::string>()->required(), "tokenizer.json (byte-level BPE) or SentencePiece .model")
      ("format", po::value<std::string>()->required(), "prompt_completion or chat")
      ("chat-template", po::value<std::string>(), "chat only: llama3 or plain (docs/data.md)")
      ("out", po::value<std::string>()->required(), "output directory (created if missing)")
      ("val-fraction", po::value<double>()->default_value(0.0),
       "fraction of the examples, at the end, for val.bin / val.mask [0, 1); 0: no val files")
      ("bos", po::value<std::string>()->default_value("auto"),
       "BOS before each example: auto (the tokenizer's; none for GPT-2), none, or a token")
      ("eos", po::value<std::string>()->default_value("auto"),
       "EOS ending each example: auto (the tokenizer's end token) or a token")
      ("files", po::value<std::vector<std::string>>(), "JSONL files, one example a line");
  po::positional_options_description pos;
  pos.add("files", -1);
  po::variables_map vm;
  if (!parse(argc, argv, "finetune", opts, pos, vm)) return 0;
  if (!vm.count("files")) throw UsageError("finetune: no input files given");
  const double frac = vm["val-fraction"].as<double>();
  if (!(frac >= 0.0 && frac < 1.0)) throw UsageError("--val-fraction must be in [0, 1), got " + std::to_string(frac));
  zt::FinetuneOptions o;
  try {
    o.format = zt::parse_finetune_format(vm["format"].as<std::string>());
  } catch (const zt::UserError& e) {
    throw UsageError(std::string("--format: ") + e.what());
  }
  if (o.format == zt::FinetuneFormat::chat) {
    if (!vm.count("chat-template")) throw UsageError("--format chat needs --chat-template (llama3 or plain)");
    o.chat_template = vm["chat-template"].as<std::string>();
    const auto& names = zt::chat_template_names();
    if (std::find(names.begin(), names.end(), o.chat_template) == names.end())
      throw UsageError("unknown --chat-template '" + o.chat_template + "' (expected llama3 or plain)");
  } else if (vm.count("chat-template")) {
    throw UsageError("--chat-template applies to --format chat only");
  }
  const std::string dir = vm["out"].as<std::string>();
  const std::string tok_path = vm["tokenizer"].as<std::string>();
  const auto tok = zt::load_tokenizer(tok_path);
  auto named = [&](const char* flag, const std::string& v) -> uint32_t {
    const auto id = tok->token_id(v);
    if (!id) throw UsageError(std::string("--") + flag + ": '" + v + "' is not a token of '" + tok_path + "'");
    return *id;
  };
  const std::string bos = vm["bos"].as<std::string>();
  if (bos == "auto")
    o.bos = tok->default_bos();
  else if (bos != "none")
    o.bos = named("bos", bos);
  const std::string eos = vm["eos"].as<std::string>();
  if (eos == "auto") {
    if (!tok->default_eos())
      throw UsageError("--eos auto: tokenizer '" + tok_path + "' has no known end token; name one");
    o.eos = *tok->default_eos();
  } else {
    o.eos = named("eos", eos);  // every example ends with EOS: "none" is not an option
  }

  const zt::FinetuneEncoder encoder(*tok, o);
  zt::MaskedTokens all;
  for (const auto& f : vm["files"].as<std::vector<std::string>>()) {
    std::error_code ec;
    if (!fs::is_regular_file(f, ec)) ZT_USER_ERROR("input file '", f, "' does not exist or is not a regular file");
    encoder.add_file(f, all);
  }
  const size_t examples = all.example_begin.size();
  if (examples == 0) ZT_USER_ERROR("finetune: the input files hold no examples");
  // Whole examples go to val: the last n_val of them.
  const auto n_val = static_cast<size_t>(std::llround(frac * static_cast<double>(examples)));
  if (n_val >= examples)
    ZT_USER_ERROR("finetune: --val-fraction ", frac, " of ", examples,
                  " examples leaves none for train.bin: nothing written");
  const size_t cut = n_val > 0 ? all.example_begin[examples - n_val] : all.tokens.size();
  auto part = [&](size_t b, size_t e) {
    zt::MaskedTokens p;
    p.tokens.assign(all.tokens.begin() + static_cast<std::ptrdiff_t>(b), all.tokens.begin() + static_cast<std::ptrdiff_t>(e));
    p.mask.assign(all.mask.begin() + static_cast<std::ptrdiff_t>(b), all.mask.begin() + static_cast<std::ptrdiff_t>(e));
    for (size_t s : all.example_begin)
      if (s >= b && s < e) p.example_begin.push_back(s - b);
    return p;
  };
  make_out_dir(dir, n_val > 0, "--val-fraction large enough for one example");
  auto write = [&](const std::string& name, const zt::MaskedTokens& p, size_t n_examples) {
    const std::string shard = dir + "/" + name + ".bin";
    zt::write_token_shard(shard, p.tokens, tok->vocab_size());
    // Version 2: the example starts go with the loss bits (data.packing).
    zt::write_loss_mask(zt::mask_path_for(shard), p.mask,
                        std::vector<int64_t>(p.example_begin.begin(), p.example_begin.end()));
    int64_t counted = 0;
    for (uint8_t m : p.mask) counted += m;
    std::cout << shard << ": " << p.tokens.size() << " tokens, " << n_examples << " examples; "
              << zt::mask_path_for(shard) << ": " << counted << " targets count in the loss\n";
  };
  write("train", part(0, cut), examples - n_val);
  if (n_val > 0) {
    write("val", part(cut, all.tokens.size()), n_val);
  } else if (frac > 0.0) {  // [Note: no empty shards]
    std::cerr << "zdata: warning: --val-fraction " << frac << " of " << examples
              << " examples is none: no val files written\n";
  }
  std::cout << "tokenizer: " << tok_path << " (" << tok->kind() << ")\n"
            << "vocab_size: " << tok->vocab_size() << "\n";
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
  errno = 0;
  char* seed_end = nullptr;
  spec.seed = std::strtoull(seed_text.c_str(), &seed_end, 10);
  if (errno == ERANGE || *seed_end != '\0')
    throw UsageError("--seed must be an unsigned 64-bit integer (at most 18446744073709551615), got '" + seed_text +
                     "'");
  const int64_t n_train = non_negative(vm, "train-tokens");
  const int64_t n_val = non_negative(vm, "val-tokens");
  // Before generating (minutes and gigabytes at the limit): what a shard can hold.
  if (n_train == 0) throw UsageError("--train-tokens must be > 0 (an empty train.bin cannot be trained on)");
  for (const auto& [flag, n] : {std::pair<const char*, int64_t>{"train-tokens", n_train}, {"val-tokens", n_val}})
    if (n > INT32_MAX)
      throw UsageError(std::string("--") + flag + " " + std::to_string(n) + ": one shard holds at most " +
                       std::to_string(INT32_MAX) + " tokens (the int32 count of llm.c's header)");
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

  make_out_dir(dir, n_val > 0, "--val-tokens > 0");
  zt::write_token_shard(dir + "/train.bin", train);
  if (n_val > 0) zt::write_token_shard(dir + "/val.bin", val);  // [Note: no empty shards]
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
            << dir << "/val.bin: "
            << (n_val > 0 ? std::to_string(n_val) + " tokens" : "not written (--val-tokens 0)") << "\n"
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
  int64_t min_token = -1;
  if (shard.size() > 0) {
    uint32_t mn = UINT32_MAX;
    for (int64_t i = 0; i < shard.size(); ++i) mn = std::min(mn, shard.token(i));
    min_token = mn;
  }
  const bool wide = shard.token_bytes() == 4;
  std::cout << "file: " << shard.path() << "\n"
            << "magic: " << (wide ? zt::kTokenShardMagic32 : zt::kTokenShardMagic)
            << ", version: " << (wide ? zt::kTokenShardVersion32 : zt::kTokenShardVersion) << " ("
            << (wide ? "uint32" : "uint16") << " tokens)\n"
            << "tokens: " << shard.size() << "\n"
            << "bytes: " << zt::kTokenShardHeaderBytes + shard.token_bytes() * shard.size() << "\n";
  if (shard.size() > 0) {
    const double h = wide ? zt::unigram_entropy_nats(shard.tokens32(), shard.size())
                          : zt::unigram_entropy_nats(shard.tokens(), shard.size());
    std::cout << "min token: " << min_token << "\n"
              << "max token: " << shard.max_token() << " (vocab_size must be > " << shard.max_token() << ")\n"
              << "unigram entropy: " << fixed(h) << " nats\n";
  }
  const std::string mask_path = zt::mask_path_for(shard.path());
  std::error_code ec;
  if (fs::exists(mask_path, ec)) {
    const zt::LossMaskFile file = zt::read_loss_mask_file(mask_path);
    const std::vector<uint8_t>& mask = file.counts;
    int64_t counted = 0;
    for (uint8_t m : mask) counted += m;
    if (static_cast<int64_t>(mask.size()) != shard.size())
      ZT_USER_ERROR("loss mask '", mask_path, "' has ", mask.size(), " entries but the shard has ", shard.size(),
                    " tokens");
    std::cout << "loss mask: " << mask_path << ": " << counted << " of " << mask.size()
              << " targets count in the loss\n";
    if (file.has_examples) std::cout << "examples: " << file.example_starts.size() << "\n";
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
  if (command == "tokenize") return cmd_tokenize(argc, argv);
  if (command == "finetune") return cmd_finetune(argc, argv);
  if (command == "markov") return cmd_markov(argc, argv);
  if (command == "inspect") return cmd_inspect(argc, argv);
  throw UsageError("unknown command '" + command + "' (expected text, tokenize, finetune, markov or inspect)");
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
