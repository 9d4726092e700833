// Checkpointer: saves and restores a rank's ZeRO shards (fp32 master weights
// and Adam moments) with the io layer's sharded checkpoints, and the training
// state beside them in the manifest. Every shard carries its global
// coordinates, so a checkpoint written with one layout (DP, ZeRO stage,
// pipeline split) loads into another: each rank reads only the slices of the
// ranges it owns now.
#pragma once

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/topology.hpp"
#include "core/config.hpp"
#include "io/checkpoint.hpp"
#include "zero/zero_engine.hpp"

namespace zt {

// The checkpoints this process committed: how many, and the last one's step,
// duration (from the copy of the shards to the commit) and bytes over all
// ranks (the shards; the manifest aside). For the Prometheus export.
struct CheckpointsSaved {
  int64_t count = 0;
  int64_t step = 0;
  double seconds = 0;
  double bytes = 0;
};

class Checkpointer {
 public:
  // `skip_unit`: a unit this rank holds as a copy of another stage's (the
  // tied embedding on the last pipeline stage), not saved here.
  Checkpointer(const Config& cfg, Topology& topo, ZeroEngine& zero, Device& dev, std::vector<const Unit*> units,
               int skip_unit);
  ~Checkpointer();

  // Collective. Copies the owned shards to host memory; writes this rank's
  // file (in a background thread when checkpoint.async) and commits once
  // every rank's file is written. A save waits for the one before it.
  void save(int64_t step, const nlohmann::json& state);
  // Collective: completes (commits or reports) a background save, if any.
  void finish();
  // Collective. Loads the owned shards from a step directory, publishes the
  // working parameters and returns the saved training state.
  nlohmann::json load(const std::string& step_dir);
  // The directory of --resume: "auto" = the newest complete checkpoint under
  // checkpoint.dir ("" when there is none), or PATH, which must verify.
  std::string resolve(const std::string& resume) const;
  // Collective: whether checkpoint.dir already holds a step_<step> (rank 0
  // looks, every rank gets its answer).
  bool exists(int64_t step) const;
  const CheckpointsSaved& saved() const { return saved_; }

 private:
  struct Pending;
  void commit(Pending& p);
  std::string resolve_here(const std::string& resume) const;
  void write_16bit_weights(Pending& p, const std::string& tmp);
  void read_owned(CheckpointReader& reader, const std::string& step_dir);

  const Config& cfg_;
  Topology& topo_;
  ZeroEngine& zero_;
  Device& dev_;
  std::vector<const Unit*> units_;
  int skip_unit_;
  std::unique_ptr<Pending> pending_;
  CheckpointsSaved saved_;
};

}  // namespace zt
