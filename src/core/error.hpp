// Errors: one exception type carrying rank, host, GPU and source location,
// and every check macro of the tree: ZT_CHECK, ZT_CUDA_CHECK,
// ZT_CUDA_CHECK_LAUNCH, ZT_CUBLAS_CHECK, ZT_NCCL_CHECK, ZT_MPI_CHECK and
// ZT_H5_CHECK. Each `main` catches, prints once, and aborts the job
// (MPI_Abort) so that other ranks do not hang.
//
// [Note: library checks] The library checks name the library's own error
// functions (cudaGetErrorName, ncclGetErrorString, MPI_Error_string, ...).
// They are macros, so those names resolve where a check is used, in a file
// that includes the library's header anyway; core includes no CUDA, NCCL, MPI
// or HDF5 header and only supplies throw_library_error.
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
// The GPU this process computes on, set by the layer that selects it (-1,
// not printed, when none is).
void set_process_gpu(int ordinal);
int process_gpu();

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

// Throws zt::Error for a call into an external library that failed:
// "<library> error <reason> in <call>", where reason is the library's own
// name and description of the error ([Note: library checks]).
[[noreturn]] void throw_library_error(const char* library, const std::string& reason, const char* call,
                                      const char* file, int line);

}  // namespace zt

namespace zt {
// Exit codes of ztrain's programs: 0 success, 2 bad input (config, data,
// command line, checkpoint), 3 a hang ended by the watchdog (a collective past
// comm.timeout, a peer whose heartbeat stopped; comm/watchdog.hpp), 1 anything
// else.
constexpr int kExitBadInput = 2;
constexpr int kExitHang = 3;
}  // namespace zt

// An error that every rank raises identically at the same point, after the
// ranks agreed on it (a diverged run, a checkpoint that cannot be read): main
// prints it once from rank 0 and every rank exits with `exit_code` (2 for bad
// input, as a UserError) without MPI_Abort.
class CollectiveError : public std::runtime_error {
 public:
  explicit CollectiveError(const std::string& msg, int exit_code = 1)
      : std::runtime_error(msg), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

#define ZT_THROW(...) throw ::zt::Error(::zt::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

#define ZT_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) ZT_THROW("check failed: " #cond ": ", ##__VA_ARGS__);        \
  } while (0)

#define ZT_USER_ERROR(...) throw ::zt::UserError(::zt::detail::concat(__VA_ARGS__))

// ---- external libraries ([Note: library checks]) ------------------------------

// CUDA runtime calls; ZT_CUDA_CHECK_LAUNCH() checks the last kernel launch
// (llm.c's cudaCheck(cudaGetLastError()) after every <<<>>>).
#define ZT_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    const cudaError_t zt_cuda_err_ = (call);                                                       \
    if (zt_cuda_err_ != cudaSuccess)                                                               \
      ::zt::throw_library_error("CUDA",                                                            \
                                ::zt::detail::concat(cudaGetErrorName(zt_cuda_err_), " (",         \
                                                     cudaGetErrorString(zt_cuda_err_), ")"),       \
                                #call, __FILE__, __LINE__);                                        \
  } while (0)

#define ZT_CUDA_CHECK_LAUNCH() ZT_CUDA_CHECK(cudaGetLastError())

// cuBLASLt calls.
#define ZT_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                             \
    const cublasStatus_t zt_cublas_st_ = (call);                                                   \
    if (zt_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::zt::throw_library_error("cuBLAS",                                                          \
                                ::zt::detail::concat(cublasLtGetStatusName(zt_cublas_st_), " (",   \
                                                     cublasLtGetStatusString(zt_cublas_st_), ")"), \
                                #call, __FILE__, __LINE__);                                        \
  } while (0)

// NCCL calls; ncclGetLastError adds NCCL's own account of what went wrong.
#define ZT_NCCL_CHECK(call)                                                                        \
  do {                                                                                             \
    const ncclResult_t zt_nccl_rc_ = (call);                                                       \
    if (zt_nccl_rc_ != ncclSuccess)                                                                \
      ::zt::throw_library_error("NCCL",                                                            \
                                ::zt::detail::concat(ncclGetErrorString(zt_nccl_rc_), " (",        \
                                                     ncclGetLastError(nullptr), ")"),              \
                                #call, __FILE__, __LINE__);                                        \
  } while (0)

// MPI calls (communicators use MPI_ERRORS_RETURN, so failures come back here).
#define ZT_MPI_CHECK(call)                                                                         \
  do {                                                                                             \
    const int zt_mpi_rc_ = (call);                                                                 \
    if (zt_mpi_rc_ != MPI_SUCCESS) {                                                               \
      char zt_mpi_msg_[MPI_MAX_ERROR_STRING] = {};                                                 \
      int zt_mpi_len_ = 0;                                                                         \
      MPI_Error_string(zt_mpi_rc_, zt_mpi_msg_, &zt_mpi_len_);                                     \
      ::zt::throw_library_error("MPI", std::string(zt_mpi_msg_, static_cast<size_t>(zt_mpi_len_)), \
                                #call, __FILE__, __LINE__);                                        \
    }                                                                                              \
  } while (0)

// HDF5: its calls return a negative id or status on failure, and most ids are
// held by h5::Id owners, so the check takes a condition, as ZT_CHECK does, and
// appends the reason read from HDF5's error stack by h5::last_error()
// (io/h5.hpp, which the use site includes).
#define ZT_H5_CHECK(ok, ...)                                                                       \
  do {                                                                                             \
    if (!(ok)) ZT_THROW(__VA_ARGS__, ": ", ::zt::h5::last_error());                                \
  } while (0)
