// Metrics sinks: one JSON object per line in LOG_DIR/metrics.jsonl, written by
// rank 0 only, flushed per line so a killed job keeps what it printed.
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace zt {

class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Opens DIR/metrics.jsonl for writing (truncating), creating DIR. A writer
  // constructed with enabled=false (ranks other than 0) writes nothing.
  MetricsWriter(const std::string& dir, bool enabled);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  MetricsWriter(MetricsWriter&& o) noexcept { *this = std::move(o); }
  MetricsWriter& operator=(MetricsWriter&& o) noexcept {
    std::swap(file_, o.file_);
    std::swap(path_, o.path_);
    return *this;
  }
  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace zt
