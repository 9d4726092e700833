// Minimal logging: rank-0 info, warnings from any rank with its rank.
#pragma once

#include <string>

#include "core/error.hpp"

namespace zt {

enum class LogLevel { debug, info, warn, error };

void set_log_level(LogLevel level);
// Messages at info and debug are printed by rank 0 only (or before the rank is
// known); warnings and errors by any rank, prefixed with it.
void log_message(LogLevel level, const std::string& msg);

template <typename... Args>
void log_info(const Args&... args) { log_message(LogLevel::info, detail::concat(args...)); }
template <typename... Args>
void log_warn(const Args&... args) { log_message(LogLevel::warn, detail::concat(args...)); }
template <typename... Args>
void log_debug(const Args&... args) { log_message(LogLevel::debug, detail::concat(args...)); }

}  // namespace zt
