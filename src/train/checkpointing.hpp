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

// A checkpoint whose files could not be read (a damaged HDF5 file, a
// Fletcher32 mismatch): --resume auto tries the one before it.
class CheckpointDataError : public CollectiveError {
 public:
  using CollectiveError::CollectiveError;
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
  // working parameters and returns the saved training state. A file that
  // cannot be read is a CheckpointDataError.
  nlohmann::json load(const std::string& step_dir);
  // The directory of --resume: "auto" = the newest complete checkpoint under
  // checkpoint.dir ("" when there is none at all; a UserError when every one
  // is damaged), or PATH, which must verify.
  std::string resolve(const std::string& resume);
  // --resume auto: `step_dir` could not be loaded; the next resolve passes over it.
  void exclude(const std::string& step_dir) { excluded_.push_back(step_dir); }
  // After a load: the damaged checkpoints newer than the one loaded are
  // renamed to <dir>.damaged (kept for inspection), so this run can save
  // those steps again. Rank 0 renames; every rank may call it.
  void set_aside_damaged();
  // Collective, before the first step: checkpoint.dir is created if missing
  // and must be a writable directory; a fresh run (not `resuming`) refuses
  // one that holds committed checkpoints (another run's). UserErrors naming
  // the directory, agreed on every rank, so the run stops before training
  // rather than at its first save.
  void check_dir(bool resuming);
  // Collective: whether checkpoint.dir already holds a step_<step> (rank 0
  // looks, every rank gets its answer).
  bool exists(int64_t step) const;
  const CheckpointsSaved& saved() const { return saved_; }

 private:
  struct Pending;
  void commit(Pending& p);
  std::string resolve_here(const std::string& resume);
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
  std::vector<std::string> excluded_;  // --resume auto: could not be loaded
  std::vector<std::string> damaged_;   // rank 0: the damaged ones the last resolve passed over
};

}  // namespace zt
