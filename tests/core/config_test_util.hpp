// Helpers shared by the config tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/error.hpp"

namespace zt::test {

// Parses JSON text as if it were the file "config.json".
inline Config parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_config(nlohmann::json::parse(text), "config.json", overrides);
}

// The message of the zt::UserError that `f` throws; a test failure when it
// throws nothing or another type.
template <typename F>
std::string user_error(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected zt::UserError, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected zt::UserError, nothing was thrown";
  return "";
}

inline std::string parse_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return user_error([&] { parse(text, overrides); });
}

#define EXPECT_CONTAINS(message, part)                                                 \
  EXPECT_NE(std::string(message).find(part), std::string::npos)                        \
      << "expected the message to contain: " << (part) << "\n       message: " << (message)

// A file that exists for the test's lifetime.
class TempFile {
 public:
  explicit TempFile(const std::string& name, const std::string& content = "tokens") {
    path_ = (std::filesystem::temp_directory_path() /
             ("zt_core_test_" + std::to_string(::getpid()) + "_" + name))
                .string();
    std::ofstream(path_, std::ios::binary) << content;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace zt::test
