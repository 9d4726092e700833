// Sharded checkpoints (DESIGN.md "Checkpoints"). A checkpoint is a directory
//
//   DIR/step_<N>/manifest.json     version, step, config, topology, ... and the SHA-256 of every file
//   DIR/step_<N>/rank_<RRRRR>.h5   one HDF5 file per rank with that rank's shards
//   DIR/latest                     "step_<N>" of the newest commit, replaced atomically
//
// written as step_<N>.tmp/ and renamed by rank 0 once every rank has written and
// synced its file. Every shard dataset carries its global coordinates, so a
// reader with any other layout (DP size, ZeRO stage, pipeline split) serves
// global ranges of a unit's flat state from whichever files hold them.
//
// Shard dataset: /<state>/u<unit>_<global_offset>, 1-D float32, chunked
// (min(length, 2^20) elements), Fletcher32 checksummed, with attributes
// unit, unit_name, unit_numel, global_offset, length. Offsets are elements of
// the unit's flat buffer (padding included: [unit_numel, padded) is zero).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace zt {

// 2: the manifest carries "manifest_sha256", the SHA-256 of its own other
// fields ([Note: manifest checksum]). 1: the same without it; still read,
// with a warning.
constexpr int kCheckpointVersion = 2;

// [Note: manifest checksum] The shard files are covered by the SHA-256s the
// manifest lists; the manifest itself (step, applied steps, sampler, loss
// scale, config, the list of files) by "manifest_sha256": the SHA-256 of the
// manifest object without that key, written compactly (nlohmann::json's
// dump(), whose keys are sorted, so the text is the same for the same
// fields however the file is indented). Any edited field fails verification.
std::string manifest_checksum(const nlohmann::json& manifest);
// The problem with a parsed manifest's version and checksum ("" if none),
// naming `path`. A version-1 manifest (no checksum) is no problem; its
// warning goes to *warning when not null.
std::string manifest_checksum_problem(const nlohmann::json& manifest, const std::string& path,
                                      std::string* warning = nullptr);

// One slice of a unit's flat fp32 state that a rank owns: elements
// [global_offset, global_offset + length) of unit `unit`.
struct ShardRef {
  int unit = 0;
  std::string unit_name;
  int64_t unit_numel = 0;
  int64_t global_offset = 0;
  int64_t length = 0;
};

// What a rank saves: for each state name ("master", "exp_avg", "exp_avg_sq"),
// its shards with host pointers to `ref.length` fp32 values.
struct ShardData {
  std::string state;
  ShardRef ref;
  const float* data = nullptr;
};

// Writes PATH (an HDF5 file) holding every shard, fsyncs it and returns its
// SHA-256 (hex). Throws zt::Error naming the path and the HDF5/errno reason on
// any failure (a full disk included) and removes the partial file.
std::string write_shard_file(const std::string& path, const std::vector<ShardData>& shards);

std::string checkpoint_tmp_dir(const std::string& dir, int64_t step);    // DIR/step_<N>.tmp
std::string checkpoint_final_dir(const std::string& dir, int64_t step);  // DIR/step_<N>
std::string rank_file_name(int rank);
// Whether a manifest's file is a rank's shard file (HDF5) rather than
// something kept beside the shards (the 16-bit weights).
inline bool is_shard_file_name(const std::string& name) {
  return name.size() > 8 && name.compare(0, 5, "rank_") == 0 && name.compare(name.size() - 3, 3, ".h5") == 0;
}                                     // "rank_00003.h5"

// The problem with a parsed manifest's "files" names ("" if none), naming
// `path`: each must be a file of the step directory itself (no '/', not "."
// or ".."), so that a damaged or edited manifest cannot send readers to
// files elsewhere.
std::string manifest_files_problem(const nlohmann::json& files, const std::string& path);

// Rank 0, after every rank wrote its file into the tmp dir and a barrier:
// writes manifest.json (`manifest` plus "version", "step", "files":
// {name: sha256} and "manifest_sha256") into the tmp dir, fsyncs it and the dir, renames tmp ->
// final (zt::Error if final exists: a committed checkpoint is never written
// again), fsyncs DIR, atomically replaces DIR/latest (latest.tmp + rename),
// then prunes committed step_* dirs older than this step beyond keep_last
// (0 = keep all; newer ones are left alone) and removes step_*.tmp dirs older
// than this step. Pruning problems are warnings: the commit has happened.
void commit_checkpoint(const std::string& dir, int64_t step, nlohmann::json manifest,
                       const std::map<std::string, std::string>& file_sha256, int keep_last);

// Problems of a committed step dir (empty = good), each naming the file:
// manifest present, parseable and matching its own checksum, every listed
// file present with the right SHA-256 and, with read_data, every dataset
// readable (HDF5 checks Fletcher32). A version-1 manifest is logged as a warning.
std::vector<std::string> verify_checkpoint(const std::string& step_dir, bool read_data = true);

// For --resume auto: the newest DIR/step_<N> (by N, not by `latest`) that
// verifies (SHA-256 of every file; see verify_checkpoint). The newer ones
// passed over, uncommitted step_<N>.tmp dirs included, go to *skipped (may be
// null) as "PATH: reason"; the committed ones among them (damage, not an
// interrupted save) also to *damaged (may be null) as paths. Dirs in
// `exclude` (paths as found here, already judged by the caller) are passed
// over as damaged without a reason. nullopt when none verifies or DIR does
// not exist.
std::optional<std::string> find_latest_checkpoint(const std::string& dir, std::vector<std::string>* skipped,
                                                  std::vector<std::string>* damaged = nullptr,
                                                  const std::vector<std::string>& exclude = {});

// The contents of DIR/latest ("step_<N>"), nullopt when absent.
std::optional<std::string> read_latest_name(const std::string& dir);

// Reads a committed checkpoint with any layout: indexes every shard dataset of
// every file in the manifest (attributes only) and serves global ranges with
// hyperslab reads of just the overlapping slices. Keeps the files open.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& step_dir);  // UserError naming the file if bad
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const nlohmann::json& manifest() const;
  // Fills out[0, end - begin) with elements [begin, end) of `unit`'s `state`.
  // Elements no shard covers at or beyond unit_numel (padding) are 0; a
  // missing element below unit_numel is a UserError.
  void read_range(const std::string& state, int unit, int64_t begin, int64_t end, float* out);
  int64_t unit_numel(int unit) const;          // -1 if absent
  std::string unit_name(int unit) const;       // "" if absent
  std::vector<int> units() const;              // ascending
  std::vector<std::string> states() const;     // ascending
  int64_t bytes_read() const;                  // payload bytes read by read_range so far

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace zt
