// Shared pieces of the libFuzzer targets (docs/reliability.md,
// "Fuzzing"). Every target feeds one parser of outside input and accepts only
// two outcomes: the input is read, or a zt::UserError explains what is wrong
// with it. Anything else (a crash, a sanitizer report, another exception
// escaping, a hang) is a finding; libFuzzer reports it and saves the input.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace zt::fuzz {

// One scratch directory per fuzzing process (libFuzzer's -jobs/-workers run
// several), removed at exit. The parsers read files, so each input is written
// to a file in it first.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/zt_fuzz_XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + templ);
    static const struct Remover {
      std::string path;
      ~Remover() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    } remover{templ};
    return templ;
  }();
  return dir;
}

inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = scratch_dir() + "/" + name;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
  return path;
}

// The input cut at NUL bytes: pieces[0] is the main document, the others
// extra arguments (a target says what each one means). At most `max` pieces;
// the last one keeps any further NULs.
inline std::vector<std::string_view> split_nul(const uint8_t* data, size_t size, size_t max) {
  std::vector<std::string_view> out;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (out.size() + 1 < max) {
    const size_t nul = rest.find('\0');
    if (nul == std::string_view::npos) break;
    out.push_back(rest.substr(0, nul));
    rest.remove_prefix(nul + 1);
  }
  out.push_back(rest);
  return out;
}

}  // namespace zt::fuzz
