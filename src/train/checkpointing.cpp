#include "train/checkpointing.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include <unistd.h>

#include "core/clock.hpp"
#include "core/log.hpp"
#include "io/checkpoint.hpp"
#include "train/fault_injection.hpp"
#include "train/train_state.hpp"
#include "io/safetensors.hpp"
#include "io/sha256.hpp"

namespace zt {
namespace {

// Per-rank strings of fixed size over the world (SHA-256 hex is 64 bytes).
std::vector<std::string> gather_strings(Communicator& world, const std::string& mine, size_t width) {
  std::vector<uint16_t> in((width + 1) / 2, 0), out(in.size() * static_cast<size_t>(world.size()), 0);
  std::memcpy(in.data(), mine.data(), std::min(mine.size(), width));
  CommRequest r = world.all_gather(Tensor(in.data(), DType::u16, Shape{static_cast<int64_t>(in.size())}),
                                   Tensor(out.data(), DType::u16, Shape{static_cast<int64_t>(out.size())}));
  wait(r);
  std::vector<std::string> all;
  for (int k = 0; k < world.size(); ++k) {
    const char* p = reinterpret_cast<const char*>(out.data() + in.size() * static_cast<size_t>(k));
    all.emplace_back(p, strnlen(p, width));
  }
  return all;
}

// Rank 0's string on every rank (at most `width` bytes).
std::string broadcast_string(Communicator& world, const std::string& text, size_t width = 4096) {
  std::vector<uint16_t> buf((width + 1) / 2, 0);
  if (world.rank() == 0) std::memcpy(buf.data(), text.data(), std::min(text.size(), width - 1));
  CommRequest r = world.broadcast(Tensor(buf.data(), DType::u16, Shape{static_cast<int64_t>(buf.size())}), 0);
  wait(r);
  const char* p = reinterpret_cast<const char*>(buf.data());
  return std::string(p, strnlen(p, width));
}

}  // namespace

// A save in progress: the host copies of the shards, the file being written
// and, when async, the thread writing it.
struct Checkpointer::Pending {
  int64_t step = 0;
  nlohmann::json manifest;
  // Backing store of `shards`, one block per shard and state; not zeroed
  // first (the copy from the device writes all of it).
  std::vector<std::unique_ptr<float[]>> host;
  std::vector<ShardData> shards;
  std::string path, sha, error;
  std::string weights_file, weights_sha;  // gather_16bit_weights_on_model_save
  std::thread writer;
  double started = 0;
  size_t bytes = 0;
  // Fault tests (train/fault_injection.hpp).
  bool kill_midway = false;
  bool hang_midway = false;
  bool fail_write = false;
  void write() {
    if (!error.empty()) return;  // refused before writing (non-finite state)
    try {
      if (fail_write) ZT_THROW("writing '", path, "' failed: No space left on device (injected)");
      if (kill_midway) {
        std::vector<ShardData> half(shards.begin(), shards.begin() + static_cast<std::ptrdiff_t>(shards.size() / 2));
        write_shard_file(path, half);
        std::raise(SIGKILL);
      }
      if (hang_midway) {  // the watchdog's test: a rank stuck inside its write
        std::vector<ShardData> half(shards.begin(), shards.begin() + static_cast<std::ptrdiff_t>(shards.size() / 2));
        write_shard_file(path, half);
        hang_forever();
      }
      sha = write_shard_file(path, shards);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
};

Checkpointer::Checkpointer(const Config& cfg, Topology& topo, ZeroEngine& zero, Device& dev,
                           std::vector<const Unit*> units, int skip_unit)
    : cfg_(cfg), topo_(topo), zero_(zero), dev_(dev), units_(std::move(units)), skip_unit_(skip_unit) {}

Checkpointer::~Checkpointer() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

void Checkpointer::save(int64_t step, const nlohmann::json& state) {
  finish();
  if (cfg_.checkpoint.tag_validation) {
    // Every rank must be saving the same step (DeepSpeed's tag validation).
    const double lo = all_reduce_scalar(topo_.world(), static_cast<double>(step), ReduceOp::min);
    const double hi = all_reduce_scalar(topo_.world(), static_cast<double>(step), ReduceOp::max);
    if (lo != hi) ZT_THROW("checkpoint tag validation: ranks save steps ", lo, " to ", hi);
  }
  const std::string dir = cfg_.checkpoint.dir;
  const std::string tmp = checkpoint_tmp_dir(dir, step);
  std::string error;
  if (topo_.world_rank() == 0) {
    std::error_code ec;
    std::filesystem::create_directories(tmp, ec);
    if (ec) error = "checkpoint: cannot create '" + tmp + "': " + ec.message();
  }
  error = broadcast_string(topo_.world(), error);
  if (!error.empty()) throw CollectiveError(error + "; the previous checkpoint is intact");

  auto p = std::make_unique<Pending>();
  p->step = step;
  p->started = now_s();
  p->manifest = state;
  p->path = tmp + "/" + rank_file_name(topo_.world_rank());
  const InjectedFault fault = injected_fault();
  p->kill_midway = fault.at(InjectedFault::Kind::kill_in_save, topo_.world_rank(), step);
  p->fail_write = fault.at(InjectedFault::Kind::write_error, topo_.world_rank(), step);
  p->hang_midway = fault.at(InjectedFault::Kind::hang_in_save, topo_.world_rank(), step);
  // Copy the owned shards to host memory at the step boundary; training may
  // go on while they are written.
  for (const OwnedShard& sh : zero_.owned_shards()) {
    if (sh.unit == skip_unit_) continue;
    const FlatUnit& fu = zero_.layout().unit(sh.unit);
    const int64_t end = std::min(sh.end, fu.numel);  // padding is not saved
    if (end <= sh.begin) continue;
    const int64_t n = end - sh.begin;
    // Wherever the placement keeps them (device, host, NVMe).
    std::vector<float> whole(static_cast<size_t>(sh.numel()));
    for (int k = 0; k < kNumOptimizerStates; ++k) {
      const auto which = static_cast<OptimizerState>(k);
      zero_.placement().read_state(sh, which, whole.data());
      float* h = p->host.emplace_back(new float[static_cast<size_t>(n)]).get();
      std::copy(whole.begin(), whole.begin() + n, h);
      // A diverged state is never published ([Note: non-finite steps]): the
      // write is failed like a full disk, so the previous checkpoint stays
      // the newest.
      if (p->error.empty() && !std::all_of(h, h + n, [](float x) { return std::isfinite(x); }))
        p->error = detail::concat("the ", optimizer_state_name(which), " state of unit '", fu.name, "' on rank ",
                                  topo_.world_rank(), " holds non-finite values (the run diverged): not saved");
      p->bytes += static_cast<size_t>(n) * sizeof(float);
      p->shards.push_back(ShardData{optimizer_state_name(which), ShardRef{sh.unit, fu.name, fu.numel, sh.begin, n}, h});
    }
  }
  if (cfg_.zero.stage3_gather_16bit_weights_on_model_save) write_16bit_weights(*p, tmp);
  pending_ = std::move(p);
  if (cfg_.checkpoint.async) {
    pending_->writer = std::thread([q = pending_.get()] { q->write(); });
  } else {
    pending_->write();
    finish();
  }
}

void Checkpointer::finish() {
  if (!pending_) return;
  if (pending_->writer.joinable()) pending_->writer.join();
  std::unique_ptr<Pending> p = std::move(pending_);
  commit(*p);
}

void Checkpointer::commit(Pending& p) {
  // Every rank learns whether every file was written; only then is the
  // checkpoint published.
  Communicator& world = topo_.world();
  const double failed = all_reduce_scalar(world, p.error.empty() ? 0.0 : 1.0, ReduceOp::max);
  if (failed != 0) {
    if (!p.error.empty()) log_warn("checkpoint step ", p.step, ": ", p.error);
    // Every rank is done with the staging dir (the reduction above follows
    // each rank's write): rank 0 removes it, so a full disk gets its space back.
    world.barrier();
    if (topo_.world_rank() == 0) {
      const std::string tmp = checkpoint_tmp_dir(cfg_.checkpoint.dir, p.step);
      std::error_code ec;
      std::filesystem::remove_all(tmp, ec);
      if (ec) log_warn("cannot remove the failed checkpoint's staging dir '", tmp, "': ", ec.message());
    }
    throw CollectiveError(detail::concat("checkpoint of step ", p.step,
                                         " failed on at least one rank (see the warnings); it was not published and "
                                         "the previous checkpoint is intact"));
  }
  const std::vector<std::string> shas = gather_strings(world, p.sha, 64);
  const std::vector<std::string> extra =
      gather_strings(world, p.weights_file.empty() ? std::string() : p.weights_file + "=" + p.weights_sha, 200);
  const double bytes = all_reduce_scalar(world, static_cast<double>(p.bytes));
  if (topo_.world_rank() == 0) {
    std::map<std::string, std::string> files;
    for (int r = 0; r < world.size(); ++r) files[rank_file_name(r)] = shas[static_cast<size_t>(r)];
    for (const std::string& e : extra)
      if (const size_t eq = e.find('='); eq != std::string::npos) files[e.substr(0, eq)] = e.substr(eq + 1);
    commit_checkpoint(cfg_.checkpoint.dir, p.step, p.manifest, files, cfg_.checkpoint.keep_last);
  }
  world.barrier();
  const double secs = now_s() - p.started;
  saved_ = {saved_.count + 1, p.step, secs, bytes};
  log_info("checkpoint: step ", p.step, " saved to ", checkpoint_final_dir(cfg_.checkpoint.dir, p.step), " (",
           bytes / 1e6, " MB in ", secs, " s, ", bytes / 1e6 / std::max(secs, 1e-9), " MB/s over all ranks)");
}

// gather_16bit_weights_on_model_save: the whole model's weights in 16 bits
// (bf16, or f16 with fp16 training) beside the shards, one file per pipeline
// stage written by its data-parallel rank 0, named by ztrain's parameter
// names ("h.0.attn.c_attn.weight"). The units are gathered one at a time
// (ZeroEngine::for_each_full_unit), never the whole model at once.
void Checkpointer::write_16bit_weights(Pending& p, const std::string& tmp) {
  const bool f16 = cfg_.fp16.enabled;
  const bool writer = topo_.dp_rank() == 0;
  std::vector<SafeTensor> tensors;
  std::vector<float> host;
  zero_.for_each_full_unit([&](int u, const float* full) {
    if (!writer || u == skip_unit_) return;
    const FlatUnit& fu = zero_.layout().unit(u);
    host.resize(static_cast<size_t>(fu.numel));
    dev_.copy_to_host(host.data(), full, host.size() * sizeof(float));
    for (const ParamSlot& slot : fu.params) {
      SafeTensor t;
      t.name = (u == 0 || u + 1 == zero_.layout().num_units() ? std::string() : fu.name + ".") + slot.name;
      t.dtype = f16 ? "F16" : "BF16";
      for (int d = 0; d < slot.shape.rank(); ++d) t.shape.push_back(slot.shape[d]);
      t.data.resize(static_cast<size_t>(slot.numel()) * 2);
      convert(host.data() + slot.offset, DType::f32, t.data.data(), f16 ? DType::f16 : DType::bf16,
              static_cast<size_t>(slot.numel()));
      tensors.push_back(std::move(t));
    }
  });
  if (!writer) return;
  p.weights_file = "model_16bit_stage" + std::to_string(topo_.pp_rank()) + ".safetensors";
  const std::string path = tmp + "/" + p.weights_file;
  try {
    write_safetensors(path, tensors, {{"format", "pt"}, {"step", std::to_string(p.step)}});
    p.weights_sha = sha256_file(path);
  } catch (const std::exception& e) {
    p.error = e.what();
  }
}

std::string Checkpointer::resolve(const std::string& resume) {
  // Rank 0 decides (verifying reads every file once) and tells the others;
  // an error is raised on every rank alike.
  std::string answer, error;
  if (topo_.world_rank() == 0) {
    try {
      answer = "ok:" + resolve_here(resume);
    } catch (const std::exception& e) {
      answer = std::string("error:") + e.what();
    }
  }
  answer = broadcast_string(topo_.world(), answer);
  if (answer.rfind("error:", 0) == 0) throw CollectiveError(answer.substr(6), kExitBadInput);
  return answer.substr(3);
}

void Checkpointer::check_dir(bool resuming) {
  namespace fs = std::filesystem;
  const std::string& dir = cfg_.checkpoint.dir;
  std::string error;
  if (topo_.world_rank() == 0) {
    try {
      std::error_code ec;
      if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
        ZT_USER_ERROR("checkpoint.dir '", dir, "' exists and is not a directory");
      fs::create_directories(dir, ec);
      if (ec) ZT_USER_ERROR("checkpoint.dir '", dir, "': cannot create directory: ", ec.message());
      // Permission bits do not tell (root, read-only mounts): a file is made and removed.
      const std::string probe = dir + "/.write_probe_" + std::to_string(::getpid());
      std::FILE* f = std::fopen(probe.c_str(), "w");
      if (f == nullptr) ZT_USER_ERROR("checkpoint.dir '", dir, "' is not writable: ", std::strerror(errno));
      std::fclose(f);
      std::remove(probe.c_str());
      // A committed step_<N> (not a staging step_<N>.tmp) is another run's:
      // listed, not verified (that would read every byte of it).
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (resuming) break;
        const std::string name = entry.path().filename().string();
        if (name.size() > 5 && name.compare(0, 5, "step_") == 0 &&
            name.find_first_not_of("0123456789", 5) == std::string::npos && entry.is_directory(ec))
          ZT_USER_ERROR("checkpoint.dir '", dir, "' holds checkpoints already (", entry.path().string(),
                        "): continue that run with --resume auto, or give this run another checkpoint.dir");
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = broadcast_string(topo_.world(), error);
  if (!error.empty()) throw CollectiveError(error, kExitBadInput);
}

bool Checkpointer::exists(int64_t step) const {
  std::string answer;
  if (topo_.world_rank() == 0) {
    std::error_code ec;
    answer = std::filesystem::exists(std::filesystem::path(cfg_.checkpoint.dir) / ("step_" + std::to_string(step)), ec)
                 ? "1"
                 : "0";
  }
  return broadcast_string(topo_.world(), answer) == "1";
}

std::string Checkpointer::resolve_here(const std::string& resume) {
  if (resume != "auto") {
    const std::vector<std::string> problems = verify_checkpoint(resume, true);
    if (!problems.empty()) ZT_USER_ERROR("--resume ", resume, ": ", problems.front());
    return resume;
  }
  if (cfg_.checkpoint.dir.empty()) ZT_USER_ERROR("--resume auto needs checkpoint.dir");
  std::vector<std::string> skipped, damaged;
  std::optional<std::string> found = find_latest_checkpoint(cfg_.checkpoint.dir, &skipped, &damaged, excluded_);
  for (const std::string& s : skipped) log_warn("--resume auto: skipping ", s);
  // Starting from scratch is right only where no checkpoint was ever
  // committed (uncommitted staging dirs do not count): over damaged ones it
  // would throw away the run silently.
  if (!found && !damaged.empty()) {
    std::string list;
    for (const std::string& d : damaged) list += (list.empty() ? "" : ", ") + d;
    ZT_USER_ERROR("--resume auto: every checkpoint under ", cfg_.checkpoint.dir, " is damaged (", list,
                  "; the warnings say why): refusing to start from scratch over them. Repair or move them away, or ",
                  "start a fresh run (without --resume) with another checkpoint.dir");
  }
  damaged_ = std::move(damaged);
  return found ? *found : std::string();
}

void Checkpointer::set_aside_damaged() {
  if (topo_.world_rank() != 0) return;
  for (const std::string& d : damaged_) {
    const std::string to = d + ".damaged";
    std::error_code ec;
    if (!std::filesystem::exists(to, ec)) std::filesystem::rename(d, to, ec);
    if (ec || std::filesystem::exists(d, ec))
      log_warn("--resume auto: cannot move the damaged checkpoint ", d, " aside to ", to,
               ": saving its step again will fail");
    else
      log_warn("--resume auto: the damaged checkpoint ", d, " moved aside to ", to);
  }
  damaged_.clear();
}

nlohmann::json Checkpointer::load(const std::string& step_dir) {
  const double start = now_s();
  // Reading is local; a failure on any rank is agreed on before the
  // collectives of publishing, so no rank is left waiting.
  // A file that cannot be read (kind 2) lets --resume auto try an older
  // checkpoint; a checkpoint that does not fit this run (kind 1) does not.
  std::unique_ptr<CheckpointReader> reader;
  std::string error;
  double kind = 0;
  try {
    kind = 2;
    reader = std::make_unique<CheckpointReader>(step_dir);
    kind = 1;
    if (reader->manifest().contains("imported_from"))  // apps/zckpt_import.cpp
      ZT_USER_ERROR("checkpoint ", step_dir, " was made by zckpt import: weights only, no optimizer state or ",
                    "training step to resume; start from it with model.init_from instead of --resume");
    if (const std::string d = model_record_difference(reader->manifest(), model_record(cfg_.model)); !d.empty())
      ZT_USER_ERROR("checkpoint ", step_dir, " holds another model than this run's: ", d,
                    "; resume with the model section it was saved with");
    kind = 2;
    read_owned(*reader, step_dir);
    kind = 0;
  } catch (const std::exception& e) {
    error = e.what();
    log_warn(error);
  }
  kind = all_reduce_scalar(topo_.world(), kind, ReduceOp::max);
  if (kind != 0) {
    if (error.empty()) error = "checkpoint " + step_dir + " could not be loaded on another rank (see its warning)";
    if (kind == 2) throw CheckpointDataError(error, kExitBadInput);
    throw CollectiveError(error, kExitBadInput);
  }
  zero_.publish_params();
  const double bytes = all_reduce_scalar(topo_.world(), static_cast<double>(reader->bytes_read()));
  const double secs = now_s() - start;
  log_info("checkpoint: loaded ", step_dir, " (", bytes / 1e6, " MB read in ", secs, " s, ",
           bytes / 1e6 / std::max(secs, 1e-9), " MB/s over all ranks)");
  return reader->manifest();
}

void Checkpointer::read_owned(CheckpointReader& reader, const std::string& step_dir) {
  std::vector<float> host;
  for (const OwnedShard& sh : zero_.owned_shards()) {
    const FlatUnit& fu = zero_.layout().unit(sh.unit);
    const int64_t saved = reader.unit_numel(sh.unit);
    if (saved != fu.numel)
      ZT_USER_ERROR("checkpoint ", step_dir, ": unit ", sh.unit, " ('", fu.name, "') has ", saved,
                    " parameters there and ", fu.numel, " in this model");
    host.resize(static_cast<size_t>(sh.numel()));
    for (int k = 0; k < kNumOptimizerStates; ++k) {
      const auto which = static_cast<OptimizerState>(k);
      reader.read_range(optimizer_state_name(which), sh.unit, sh.begin, sh.end, host.data());
      // Checkpoints of a diverged run written before they were refused.
      if (!std::all_of(host.begin(), host.end(), [](float x) { return std::isfinite(x); }))
        ZT_USER_ERROR("checkpoint ", step_dir, ": the ", optimizer_state_name(which), " state of unit ", sh.unit,
                      " ('", fu.name, "') holds non-finite values: the run that saved it had diverged");
      zero_.placement().write_state(sh, which, host.data());
    }
  }
}

}  // namespace zt
