// Helpers shared by the train-layer tests: a small config parsed from JSON
// and resolved for the world, and the CPU backend a Trainer runs on.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/comm_bundle.hpp"
#include "core/config.hpp"
#include "modules/cpu_kernels.hpp"
#include "runtime/device.hpp"

namespace zt::test {

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A log directory of this process (metrics.jsonl is written by rank 0).
inline std::string log_dir() { return "/tmp/zt-train-test-" + std::to_string(::getpid()); }

// A tiny GPT on the embedded corpus; `extra` is merged over it, then the
// --set style `overrides`; the batch is resolved for `pp` stages.
inline Config small_config(const std::string& log_dir, const std::vector<std::string>& overrides = {}, int pp = 1) {
  nlohmann::json j = nlohmann::json::parse(R"({
    "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, "steps_per_print": 1,
    "gradient_clipping": 0.5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
    "model": {"n_layer": 4, "n_head": 2, "d_model": 16, "seq_len": 8, "vocab_size": 64},
    "train": {"steps": 4, "eval_interval": 2, "eval_steps": 1}
  })");
  j["log"] = {{"dir", log_dir}};
  std::vector<std::string> sets = overrides;
  sets.push_back("pipeline.parallel_size=" + std::to_string(pp));
  Config cfg = parse_config(j, "test.json", sets);
  resolve_batch(cfg, world_size() / pp);
  return cfg;
}

// The CPU backend of one rank: topology, communicators, device, kernels.
struct CpuRank {
  explicit CpuRank(int pp = 1, const std::string& order = "dp-pp") : topo(pp, order), comms(topo) {}
  Topology topo;
  CommBundle comms;
  CpuDevice dev;
  CpuKernels kernels;
};

}  // namespace zt::test
