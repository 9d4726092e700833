// zckpt's commands that write: export (Hugging Face GPT-2 safetensors / HDF5)
// and reshard (a committed checkpoint re-cut for another data-parallel size).
#pragma once

#include <stdexcept>

namespace zckpt {

// Bad usage: main prints it with a hint and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int cmd_export(int argc, char** argv);   // argv[1] == "export"
int cmd_reshard(int argc, char** argv);  // argv[1] == "reshard"

}  // namespace zckpt
