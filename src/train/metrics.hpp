// Metrics sinks: one JSON object per line in LOG_DIR/metrics.jsonl, written by
// rank 0 only, flushed per line so a killed job keeps what it printed.
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace zt {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Names DIR/metrics.jsonl, creating DIR, and locks DIR/.lock (flock) for
  // the life of the writer: another process writing the same DIR is a
  // UserError naming it ([Note: one run per log directory]). The file is opened by begin(), or by the first write
  // (truncating). A writer constructed with enabled=false (ranks other than
  // 0) writes nothing.
  MetricsWriter(const std::string& dir, bool enabled);
  // A fresh run truncates the file; a resumed one (a requeued job, --resume)
  // appends to it, so the records of the steps before the resume survive,
  // and writes {"event": "resume", "step": S, "from": DIR} first.
  void begin(bool resumed, int64_t step, const std::string& from);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  MetricsWriter(MetricsWriter&& o) noexcept { *this = std::move(o); }
  MetricsWriter& operator=(MetricsWriter&& o) noexcept {
    std::swap(file_, o.file_);
    std::swap(path_, o.path_);
    std::swap(enabled_, o.enabled_);
    std::swap(csv_dir_, o.csv_dir_);
    std::swap(samples_per_step_, o.samples_per_step_);
    std::swap(lock_key_, o.lock_key_);
    std::swap(dir_, o.dir_);
    std::swap(warned_gone_, o.warned_gone_);
    return *this;
  }
  // DeepSpeed's csv_monitor (core/config.hpp): from now on, every step
  // record written also appends its loss, learning rate and (fp16) loss
  // scale to output_path/job_name/Train_Samples_{train_loss,lr,loss_scale}.csv
  // as "samples,value" rows (samples = step x samples_per_step), a
  // "step,<name>" header starting a new file. Nothing on disabled writers.
  void enable_csv(const CsvMonitorConfig& csv, int64_t samples_per_step);
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  void open(const char* mode);
  void write_csv(const nlohmann::json& record);
  std::string csv_dir_;  // "" = no csv_monitor
  int64_t samples_per_step_ = 0;
  // A metrics.jsonl removed or replaced under the run (the log directory
  // deleted) is re-created with a warning, once, instead of writing on into
  // a file no one can see.
  void check_still_there();
  std::FILE* file_ = nullptr;
  std::string path_;
  std::string dir_;
  bool enabled_ = false;
  std::string lock_key_;  // this writer's hold on the log directory's lock ("": none)
  bool warned_gone_ = false;
};

}  // namespace zt
