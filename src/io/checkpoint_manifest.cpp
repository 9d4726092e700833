// Checkpoint directories: names, the commit protocol (manifest, renames,
// fsyncs, `latest`, pruning) and verification (checkpoint.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/sha256.hpp"

namespace zt {
namespace fs = std::filesystem;

namespace {

void fsync_or_throw(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) ZT_THROW("cannot open '", path, "' to fsync it: ", std::strerror(errno));
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ZT_THROW("cannot fsync '", path, "': ", std::strerror(err));
  }
  ::close(fd);
}

// Writes `text` to `path` (created or truncated) and fsyncs it.
void write_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) ZT_THROW("cannot create '", path, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(path.c_str());
      ZT_THROW("cannot write '", path, "': ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    ZT_THROW("cannot sync '", path, "': ", std::strerror(err));
  }
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    ZT_THROW("cannot rename '", from, "' to '", to, "': ", std::strerror(errno));
}

// step_<N> (committed) and step_<N>.tmp (not) directories under `dir`.
struct StepDir {
  int64_t step;
  bool tmp;
  std::string path;
};

std::vector<StepDir> list_step_dirs(const std::string& dir) {
  static const std::regex kName(R"(step_(\d{1,18})(\.tmp)?)");
  std::vector<StepDir> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory(ec) || !std::regex_match(name, m, kName)) continue;
    out.push_back({std::stoll(m[1].str()), m[2].matched, entry.path().string()});
  }
  return out;
}

}  // namespace

std::string manifest_checksum(const nlohmann::json& manifest) {
  nlohmann::json body = manifest;
  body.erase("manifest_sha256");
  const std::string text = body.dump();
  return sha256_hex(text.data(), text.size());
}

std::string manifest_checksum_problem(const nlohmann::json& manifest, const std::string& path,
                                      std::string* warning) {
  const nlohmann::json version = manifest.value("version", nlohmann::json());
  if (version == 1) {
    if (warning != nullptr)
      *warning = path + ": checkpoint version 1, written before manifests carried their own checksum: its step, "
                        "training state and file list are not verified (the files' SHA-256 are)";
    return "";
  }
  if (version != kCheckpointVersion) return path + ": unsupported version " + version.dump();
  const auto it = manifest.find("manifest_sha256");
  if (it == manifest.end() || !it->is_string()) return path + ": no \"manifest_sha256\" (the manifest's own checksum)";
  const std::string actual = manifest_checksum(manifest);
  if (it->get<std::string>() != actual)
    return path + ": the manifest's own SHA-256 does not match its contents (manifest_sha256 " + it->dump() +
           ", contents " + actual + "): the manifest was edited or damaged";
  return "";
}

std::string manifest_files_problem(const nlohmann::json& files, const std::string& path) {
  for (const auto& [name, sha] : files.items())
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
      return path + ": files: '" + name + "' is not a file name of the checkpoint directory";
  return "";
}

std::string checkpoint_tmp_dir(const std::string& dir, int64_t step) {
  return dir + "/step_" + std::to_string(step) + ".tmp";
}

std::string checkpoint_final_dir(const std::string& dir, int64_t step) {
  return dir + "/step_" + std::to_string(step);
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05d.h5", rank);
  return buf;
}

std::optional<std::string> read_latest_name(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  if (!in) return std::nullopt;
  std::string name;
  in >> name;
  return name;
}

void commit_checkpoint(const std::string& dir, int64_t step, nlohmann::json manifest,
                       const std::map<std::string, std::string>& file_sha256, int keep_last) {
  const std::string tmp = checkpoint_tmp_dir(dir, step);
  const std::string final_dir = checkpoint_final_dir(dir, step);
  std::error_code ec;
  if (fs::exists(final_dir, ec))
    ZT_THROW("checkpoint '", final_dir, "' already exists: a committed checkpoint is never written again");
  if (!fs::is_directory(tmp, ec)) ZT_THROW("checkpoint staging directory '", tmp, "' does not exist");
  for (const auto& [name, sha] : file_sha256)
    if (!fs::is_regular_file(tmp + "/" + name, ec)) ZT_THROW("checkpoint file '", tmp, "/", name, "' is missing");
  if (manifest.is_null()) manifest = nlohmann::json::object();
  ZT_CHECK(manifest.is_object(), "checkpoint manifest must be a JSON object");
  manifest["version"] = kCheckpointVersion;
  manifest["step"] = step;
  manifest["files"] = file_sha256;
  manifest.erase("manifest_sha256");  // a manifest copied from another checkpoint (zckpt reshard)
  manifest["manifest_sha256"] = manifest_checksum(manifest);

  write_synced(tmp + "/manifest.json", manifest.dump(2) + "\n");
  fsync_or_throw(tmp, true);
  rename_or_throw(tmp, final_dir);
  fsync_or_throw(dir, true);

  const std::string latest_tmp = dir + "/latest.tmp";
  write_synced(latest_tmp, "step_" + std::to_string(step));
  rename_or_throw(latest_tmp, dir + "/latest");
  fsync_or_throw(dir, true);

  // The commit is durable; what follows only frees space, so failures warn.
  std::vector<StepDir> older;
  for (const StepDir& d : list_step_dirs(dir)) {
    if (d.step >= step) continue;
    if (d.tmp) {
      fs::remove_all(d.path, ec);
      if (ec) log_warn("cannot remove stale checkpoint staging dir '", d.path, "': ", ec.message());
    } else {
      older.push_back(d);
    }
  }
  if (keep_last <= 0) return;
  std::sort(older.begin(), older.end(), [](const StepDir& a, const StepDir& b) { return a.step > b.step; });
  for (size_t i = static_cast<size_t>(keep_last - 1); i < older.size(); ++i) {
    fs::remove_all(older[i].path, ec);
    if (ec) log_warn("cannot prune checkpoint '", older[i].path, "': ", ec.message());
  }
}

std::vector<std::string> verify_checkpoint(const std::string& step_dir, bool read_data) {
  const std::string manifest_path = step_dir + "/manifest.json";
  std::ifstream in(manifest_path);
  if (!in) return {manifest_path + ": missing (checkpoint not committed)"};
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return {manifest_path + ": not valid JSON: " + e.what()};
  }
  if (!manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_object() ||
      manifest["files"].empty())
    return {manifest_path + ": no \"files\" listed"};
  std::vector<std::string> problems;
  std::string warning;
  if (std::string p = manifest_checksum_problem(manifest, manifest_path, &warning); !p.empty())
    return {p};  // its list of files cannot be trusted either
  if (std::string p = manifest_files_problem(manifest["files"], manifest_path); !p.empty()) return {p};
  if (!warning.empty()) log_warn(warning);
  for (const auto& [name, expected] : manifest["files"].items()) {
    const std::string path = step_dir + "/" + name;
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      problems.push_back(path + ": missing");
      continue;
    }
    std::string actual;
    try {
      actual = sha256_file(path);
    } catch (const Error& e) {
      problems.push_back(path + ": " + e.message());
      continue;
    }
    if (!expected.is_string() || actual != expected.get<std::string>()) {
      problems.push_back(path + ": SHA-256 mismatch (manifest " + expected.dump() + ", file " + actual + ")");
      continue;  // a damaged file is not handed to the HDF5 parser
    }
    if (read_data && is_shard_file_name(name)) {
      for (std::string& p : h5::check_shard_file_readable(path)) problems.push_back(std::move(p));
    }
  }
  return problems;
}

std::optional<std::string> find_latest_checkpoint(const std::string& dir, std::vector<std::string>* skipped,
                                                  std::vector<std::string>* damaged,
                                                  const std::vector<std::string>& exclude) {
  std::vector<StepDir> dirs = list_step_dirs(dir);
  // Newest first; at equal N the committed dir before its stale staging dir.
  std::sort(dirs.begin(), dirs.end(),
            [](const StepDir& a, const StepDir& b) { return a.step != b.step ? a.step > b.step : !a.tmp; });
  for (const StepDir& d : dirs) {
    if (d.tmp) {
      if (skipped != nullptr) skipped->push_back(d.path + ": not committed (staging directory)");
      continue;
    }
    if (std::find(exclude.begin(), exclude.end(), d.path) != exclude.end()) {
      if (damaged != nullptr) damaged->push_back(d.path);
      continue;
    }
    // The SHA-256 of every byte already proves integrity; the HDF5 read pass
    // is left to `zckpt verify` (damage only Fletcher32 sees shows when the
    // trainer reads, and it excludes that checkpoint and asks again).
    const std::vector<std::string> problems = verify_checkpoint(d.path, /*read_data=*/false);
    if (problems.empty()) return d.path;
    if (damaged != nullptr) damaged->push_back(d.path);
    if (skipped != nullptr) {
      std::string why = problems.front();
      if (problems.size() > 1) why += " (and " + std::to_string(problems.size() - 1) + " more)";
      skipped->push_back(d.path + ": " + why);
    }
  }
  return std::nullopt;
}

}  // namespace zt
