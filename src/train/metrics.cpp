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
  file_ = std::fopen(path_.c_str(), "w");
  if (file_ == nullptr) ZT_USER_ERROR("cannot open '", path_, "' for writing: ", std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (file_ == nullptr) return;
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    ZT_THROW("writing '", path_, "' failed: ", std::strerror(errno));
  }
}

}  // namespace zt
