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

void MetricsWriter::write(const nlohmann::json& record) {
  if (!enabled_) return;
  if (file_ == nullptr) open("w");
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    ZT_THROW("writing '", path_, "' failed: ", std::strerror(errno));
  }
}

}  // namespace zt
