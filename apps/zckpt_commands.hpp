// zckpt's commands that write: export (Hugging Face GPT-2 safetensors / HDF5),
// reshard (a committed checkpoint re-cut for another data-parallel size) and
// logits (the model run forward on given tokens).
#pragma once

#include <boost/program_options.hpp>

#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace zckpt {

// Bad usage: main prints it with a hint and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Parses `zckpt CMD STEP_DIR [options]` (argv[1] is CMD) into `vm` and
// `step_dir`. Returns false after printing `usage` and the options for --help.
inline bool parse_command(int argc, char** argv, boost::program_options::options_description& opts,
                          const std::string& usage, std::string& step_dir,
                          boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  po::options_description all(opts);
  all.add_options()("step-dir", po::value<std::string>(&step_dir));
  po::positional_options_description pos;
  pos.add("step-dir", 1);
  std::vector<std::string> args(argv + 2, argv + argc);
  po::store(po::command_line_parser(args).options(all).positional(pos).run(), vm);
  if (vm.count("help")) {
    std::cout << usage << opts;
    return false;
  }
  po::notify(vm);
  return true;
}

int cmd_export(int argc, char** argv);   // argv[1] == "export"
int cmd_reshard(int argc, char** argv);  // argv[1] == "reshard"
int cmd_logits(int argc, char** argv);   // argv[1] == "logits"
int cmd_import(int argc, char** argv);   // argv[1] == "import"

}  // namespace zckpt
