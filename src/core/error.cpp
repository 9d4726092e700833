#include "core/error.hpp"

namespace zt {
namespace {
int g_rank = -1;
int g_gpu = -1;
std::string g_host;
std::string where(const char* file, int line) {
  std::ostringstream os;
  os << "[rank " << g_rank;
  if (!g_host.empty()) os << " on " << g_host;
  if (g_gpu >= 0) os << ", gpu " << g_gpu;
  os << "] " << file << ":" << line << ": ";
  return os.str();
}
}  // namespace

void set_process_identity(int rank, const std::string& host) {
  g_rank = rank;
  g_host = host;
}
int process_rank() { return g_rank; }
const std::string& process_host() { return g_host; }
void set_process_gpu(int ordinal) { g_gpu = ordinal; }
int process_gpu() { return g_gpu; }

Error::Error(const std::string& msg, const char* file, int line)
    : std::runtime_error(where(file, line) + msg), msg_(msg) {}

void throw_library_error(const char* library, const std::string& reason, const char* call, const char* file,
                         int line) {
  throw Error(detail::concat(library, " error ", reason, " in ", call), file, line);
}

}  // namespace zt
