#include "train/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace zt {

MetricsWriter::MetricsWriter(const std::string& dir, bool enabled) {
  if (!enabled) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) ZT_USER_ERROR("log.dir '", dir, "': cannot create directory: ", ec.message());
  path_ = (std::filesystem::path(dir) / "metrics.jsonl").string();
  enabled_ = true;
}

void MetricsWriter::open(const char* mode) {
  if (file_ != nullptr) std::fclose(file_);
  file_ = std::fopen(path_.c_str(), mode);
  if (file_ == nullptr) ZT_USER_ERROR("cannot open '", path_, "' for writing: ", std::strerror(errno));
}

void MetricsWriter::begin(bool resumed, int64_t step, const std::string& from) {
  if (!enabled_) return;
  open(resumed ? "a" : "w");
  if (resumed) write({{"event", "resume"}, {"step", step}, {"from", from}});
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::enable_csv(const CsvMonitorConfig& csv, int64_t samples_per_step) {
  if (!enabled_ || !csv.enabled) return;
  const std::filesystem::path dir = std::filesystem::path(csv.output_path) / csv.job_name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) ZT_USER_ERROR("csv_monitor.output_path '", dir.string(), "': cannot create directory: ", ec.message());
  csv_dir_ = dir.string();
  samples_per_step_ = samples_per_step;
}

// DeepSpeed's event names and file naming ("Train/Samples/train_loss" ->
// Train_Samples_train_loss.csv, header "step,train_loss").
void MetricsWriter::write_csv(const nlohmann::json& record) {
  if (csv_dir_.empty() || !record.contains("step")) return;
  const int64_t samples = record["step"].get<int64_t>() * samples_per_step_;
  for (const auto& [field, event] : {std::pair<const char*, const char*>{"loss", "train_loss"},
                                     {"lr", "lr"},
                                     {"loss_scale", "loss_scale"}}) {
    if (!record.contains(field)) continue;
    const std::string path = csv_dir_ + "/Train_Samples_" + event + ".csv";
    std::error_code ec;
    const bool fresh = !std::filesystem::exists(path, ec) || std::filesystem::file_size(path, ec) == 0;
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (f == nullptr) ZT_THROW("cannot open '", path, "' for appending: ", std::strerror(errno));
    bool ok = true;
    if (fresh) ok = std::fprintf(f, "step,%s\n", event) > 0;
    ok = ok && std::fprintf(f, "%lld,%.17g\n", static_cast<long long>(samples), record[field].get<double>()) > 0;
    ok = std::fclose(f) == 0 && ok;
    if (!ok) ZT_THROW("writing '", path, "' failed: ", std::strerror(errno));
  }
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled_) return;
  write_csv(record);
  if (file_ == nullptr) open("w");
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    ZT_THROW("writing '", path_, "' failed: ", std::strerror(errno));
  }
}

}  // namespace zt
