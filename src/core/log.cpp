#include "core/log.hpp"

#include <cstdio>

namespace zt {
namespace {
LogLevel g_level = LogLevel::info;
}

void set_log_level(LogLevel level) { g_level = level; }

void log_message(LogLevel level, const std::string& msg) {
  if (level < g_level) return;
  const int rank = process_rank();
  if (level <= LogLevel::info) {
    if (rank > 0) return;
    std::fprintf(stdout, "%s\n", msg.c_str());
    std::fflush(stdout);
    return;
  }
  const char* tag = level == LogLevel::warn ? "warning" : "error";
  if (rank >= 0)
    std::fprintf(stderr, "[rank %d] %s: %s\n", rank, tag, msg.c_str());
  else
    std::fprintf(stderr, "%s: %s\n", tag, msg.c_str());
  std::fflush(stderr);
}

}  // namespace zt
