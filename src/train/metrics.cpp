#include "train/metrics.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/error.hpp"
#include "core/log.hpp"

namespace zt {
namespace {

// [Note: one run per log directory] Two runs appending to one metrics.jsonl
// interleave their records with no sign of it. The lock is advisory (flock
// on DIR/.lock, released when the process ends, however it ends); the file
// holds the owner's pid for the message. flock locks conflict between two
// opens even in one process, so a process takes each directory's lock once
// and counts its writers (the trainer's tests run several in one process).
struct HeldLock {
  int fd = -1;
  int writers = 0;
};
std::mutex g_locks_mu;
std::map<std::string, HeldLock> g_locks;

std::string lock_dir(const std::string& dir) {
  std::error_code ec;
  std::string key = std::filesystem::weakly_canonical(dir, ec).string();
  if (ec || key.empty()) key = dir;
  std::lock_guard<std::mutex> guard(g_locks_mu);
  HeldLock& held = g_locks[key];
  if (held.writers++ > 0) return key;
  const std::string lock = (std::filesystem::path(dir) / ".lock").string();
  const int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    g_locks.erase(key);
    ZT_USER_ERROR("log.dir '", dir, "': cannot open '", lock, "': ", std::strerror(errno));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      char owner[32] = {};
      const ssize_t n = ::pread(fd, owner, sizeof owner - 1, 0);
      ::close(fd);
      g_locks.erase(key);
      ZT_USER_ERROR("log.dir '", dir, "' is in use by another run (process ", n > 0 ? owner : "?",
                    " holds its lock '", lock, "'): give each run its own log.dir (--log-dir)");
    }
    // A file system without locks (some network mounts) is no reason to stop.
    ::close(fd);
    log_warn("log.dir '", dir, "': cannot lock '", lock, "' (", std::strerror(err),
             "): another run writing this directory would not be noticed");
    return key;
  }
  held.fd = fd;
  const std::string pid = std::to_string(::getpid());
  const bool written =
      ::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  static_cast<void>(written);  // the pid only serves the message of a run that finds the lock taken
  return key;
}

void unlock_dir(const std::string& key) {
  std::lock_guard<std::mutex> guard(g_locks_mu);
  const auto it = g_locks.find(key);
  if (it == g_locks.end() || --it->second.writers > 0) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  g_locks.erase(it);
}

}  // namespace

MetricsWriter::MetricsWriter(const std::string& dir, bool enabled) {
  if (!enabled) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) ZT_USER_ERROR("log.dir '", dir, "': cannot create directory: ", ec.message());
  lock_key_ = lock_dir(dir);
  dir_ = dir;
  path_ = (std::filesystem::path(dir) / "metrics.jsonl").string();
  enabled_ = true;
}

void MetricsWriter::check_still_there() {
  if (file_ == nullptr) return;
  struct stat open_st {}, path_st {};
  const bool same = ::fstat(fileno(file_), &open_st) == 0 && ::stat(path_.c_str(), &path_st) == 0 &&
                    open_st.st_ino == path_st.st_ino && open_st.st_dev == path_st.st_dev;
  if (same) return;
  if (!warned_gone_)
    log_warn("'", path_, "' was removed or replaced during the run (log.dir deleted?): writing a new one from here on");
  warned_gone_ = true;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  std::FILE* f = std::fopen(path_.c_str(), "a");
  if (f == nullptr) return;  // write() goes on into the old file; the warning was given
  std::fclose(file_);
  file_ = f;
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
  if (!lock_key_.empty()) unlock_dir(lock_key_);
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
  check_still_there();
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    ZT_THROW("writing '", path_, "' failed: ", std::strerror(errno));
  }
}

}  // namespace zt
