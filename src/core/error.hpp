// Errors: one exception type carrying rank, host and source location, and the
// check macros every layer uses. Each `main` catches, prints once, and aborts
// the job (MPI_Abort) so that other ranks do not hang.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace zt {

// Process identity used in error messages; set once by the comm layer after
// MPI_Init (core itself knows nothing of MPI).
void set_process_identity(int rank, const std::string& host);
int process_rank();              // -1 before set_process_identity
const std::string& process_host();

class Error : public std::runtime_error {
 public:
  Error(const std::string& msg, const char* file, int line);
  const std::string& message() const { return msg_; }  // without location
 private:
  std::string msg_;
};

// A user-facing configuration or input error: printed without source location.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  append(os, rest...);
}
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  append(os, args...);
  return os.str();
}
}  // namespace detail

}  // namespace zt

// An error that every rank raises identically at the same point (for example a
// diverged run): main prints it once from rank 0 and exits without MPI_Abort.
class CollectiveError : public std::runtime_error {
 public:
  explicit CollectiveError(const std::string& msg) : std::runtime_error(msg) {}
};

#define ZT_THROW(...) throw ::zt::Error(::zt::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

#define ZT_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) ZT_THROW("check failed: " #cond ": ", ##__VA_ARGS__);        \
  } while (0)

#define ZT_USER_ERROR(...) throw ::zt::UserError(::zt::detail::concat(__VA_ARGS__))
