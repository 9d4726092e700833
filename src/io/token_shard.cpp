#include "io/token_shard.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.hpp"

namespace zt {
namespace {

// The format is little-endian on disk and read in place, so the host must be
// too (every platform ztrain targets is).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are read in place: little-endian host required");

std::string errno_text() { return std::strerror(errno); }

// [Note: shards changed under the run] A shard is mapped, not read: if
// the file is truncated (or replaced and truncated) while a run reads it,
// touching a page past its new end raises SIGBUS, which would kill the
// process with no word of which file. Every mapping is registered here, and
// a SIGBUS handler that finds the faulting address in one of them says which
// shard changed and ends the process (exit 2, bad input; under MPI the job
// ends with it). A fault elsewhere is re-raised with the default action.
// The handler only reads the table and calls write and _exit.
struct MappedRange {
  std::atomic<uintptr_t> begin{0};
  std::atomic<size_t> bytes{0};
  char path[480] = {};
};
constexpr int kMaxMapped = 256;
MappedRange g_mapped[kMaxMapped];
std::mutex g_mapped_mu;

void write_all(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

extern "C" void on_sigbus(int sig, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (MappedRange& m : g_mapped) {
    const uintptr_t b = m.begin.load();
    if (b == 0 || addr < b || addr >= b + m.bytes.load()) continue;
    write_all(program_invocation_short_name);
    write_all(": error: token shard '");
    write_all(m.path);
    write_all("' changed while the run was reading it (SIGBUS reading its mapping: the file was truncated or "
              "rewritten); stopping. Give each run token files that stay as they are while it runs\n");
    ::_exit(2);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void register_mapping(const void* map, size_t bytes, const std::string& path) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, nullptr);
  });
  std::lock_guard<std::mutex> lock(g_mapped_mu);
  for (MappedRange& m : g_mapped) {
    if (m.begin.load() != 0) continue;
    std::snprintf(m.path, sizeof m.path, "%s", path.c_str());
    m.bytes.store(bytes);
    m.begin.store(reinterpret_cast<uintptr_t>(map));
    return;
  }
  // More shards open than the table holds: those are read without the message.
}

void unregister_mapping(const void* map) {
  std::lock_guard<std::mutex> lock(g_mapped_mu);
  for (MappedRange& m : g_mapped)
    if (m.begin.load() == reinterpret_cast<uintptr_t>(map)) m.begin.store(0);
}

// Closes a file descriptor on every exit path of the constructor.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

TokenShard::TokenShard(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ZT_USER_ERROR("token shard '", path, "': cannot open: ", errno_text());
  FdGuard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) ZT_USER_ERROR("token shard '", path, "': cannot stat: ", errno_text());
  if (!S_ISREG(st.st_mode)) ZT_USER_ERROR("token shard '", path, "': not a regular file");
  const int64_t file_bytes = st.st_size;
  if (file_bytes < kTokenShardHeaderBytes) {
    ZT_USER_ERROR("token shard '", path, "': file has ", file_bytes, " bytes, shorter than the ",
                  kTokenShardHeaderBytes, "-byte header of llm.c's format (256 int32)");
  }

  // Read the header with pread first: a wrong file is reported without mapping it.
  int32_t header[kTokenShardHeaderInts];
  const ssize_t got = ::pread(fd, header, sizeof(header), 0);
  if (got != static_cast<ssize_t>(sizeof(header)))
    ZT_USER_ERROR("token shard '", path, "': cannot read the header: ", got < 0 ? errno_text() : "short read");
  int width = 0;
  if (header[0] == kTokenShardMagic && header[1] == kTokenShardVersion) {
    width = 2;
  } else if (header[0] == kTokenShardMagic32 && header[1] == kTokenShardVersion32) {
    width = 4;
  } else if (header[0] == kTokenShardMagic) {
    ZT_USER_ERROR("token shard '", path, "': unsupported version ", header[1], " for magic ", kTokenShardMagic,
                  " (expected ", kTokenShardVersion, ": uint16 tokens; uint32 tokens have magic ", kTokenShardMagic32,
                  " and version ", kTokenShardVersion32, ")");
  } else if (header[0] == kTokenShardMagic32) {
    ZT_USER_ERROR("token shard '", path, "': unsupported version ", header[1], " for magic ", kTokenShardMagic32,
                  " (expected ", kTokenShardVersion32, ": uint32 tokens)");
  } else {
    ZT_USER_ERROR("token shard '", path, "': wrong magic number ", header[0], " (expected ", kTokenShardMagic, " or ",
                  kTokenShardMagic32, ", llm.c's token shard format); is this a token file?");
  }
  if (header[2] < 0) ZT_USER_ERROR("token shard '", path, "': negative token count ", header[2], " in the header");
  const int64_t count = header[2];
  const int64_t expected_bytes = kTokenShardHeaderBytes + width * count;
  if (file_bytes != expected_bytes) {
    ZT_USER_ERROR("token shard '", path, "': header says ", count, " tokens of ", width,
                  " bytes, so the file should have ", expected_bytes, " bytes, but it has ", file_bytes,
                  file_bytes < expected_bytes ? " (truncated)" : " (trailing bytes)");
  }

  void* map = ::mmap(nullptr, static_cast<size_t>(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) ZT_USER_ERROR("token shard '", path, "': cannot mmap ", file_bytes, " bytes: ", errno_text());
  map_ = map;
  map_bytes_ = file_bytes;
  register_mapping(map, static_cast<size_t>(file_bytes), path);  // before the scan below reads it
  tokens_ = static_cast<const char*>(map) + kTokenShardHeaderBytes;
  token_bytes_ = width;
  num_tokens_ = count;
  // One sequential pass; it also warms the page cache for training.
  uint32_t mx = 0;
  if (width == 2) {
    const auto* t = static_cast<const uint16_t*>(tokens_);
    for (int64_t i = 0; i < count; ++i) mx = std::max<uint32_t>(mx, t[i]);
  } else {
    const auto* t = static_cast<const uint32_t*>(tokens_);
    for (int64_t i = 0; i < count; ++i) mx = std::max(mx, t[i]);
  }
  max_token_ = count > 0 ? static_cast<int64_t>(mx) : -1;
}

const uint16_t* TokenShard::tokens() const {
  ZT_CHECK(token_bytes_ == 2, "token shard '", path_, "' has ", token_bytes_, "-byte tokens, not uint16");
  return static_cast<const uint16_t*>(tokens_);
}

const uint32_t* TokenShard::tokens32() const {
  ZT_CHECK(token_bytes_ == 4, "token shard '", path_, "' has ", token_bytes_, "-byte tokens, not uint32");
  return static_cast<const uint32_t*>(tokens_);
}

TokenShard::~TokenShard() {
  if (map_ != nullptr) {
    unregister_mapping(map_);
    ::munmap(map_, static_cast<size_t>(map_bytes_));
  }
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)),
      num_tokens_(std::exchange(other.num_tokens_, 0)),
      token_bytes_(other.token_bytes_),
      max_token_(std::exchange(other.max_token_, -1)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (map_ != nullptr) {
      unregister_mapping(map_);
      ::munmap(map_, static_cast<size_t>(map_bytes_));
    }
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    num_tokens_ = std::exchange(other.num_tokens_, 0);
    token_bytes_ = other.token_bytes_;
    max_token_ = std::exchange(other.max_token_, -1);
  }
  return *this;
}

void TokenShard::validate_vocab(int vocab_size) const {
  if (max_token_ < vocab_size) return;
  // Only on failure: find the first offender so the user can look at it.
  for (int64_t i = 0; i < num_tokens_; ++i) {
    if (token(i) >= static_cast<uint32_t>(vocab_size)) {
      ZT_USER_ERROR("token shard '", path_, "': token ", token(i), " at position ", i,
                    " is outside the model's vocabulary (vocab_size ", vocab_size, "; largest token in the file ",
                    max_token_, ")");
    }
  }
}

namespace {

void write_shard_bytes(const std::string& path, int32_t magic, int32_t version, const void* data, size_t count,
                       size_t width) {
  if (count > static_cast<size_t>(INT32_MAX)) {
    ZT_USER_ERROR("token shard '", path, "': ", count, " tokens do not fit the int32 count of llm.c's header (",
                  INT32_MAX, " at most); split the data into several shards");
  }
  int32_t header[kTokenShardHeaderInts] = {};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(count);

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) ZT_USER_ERROR("token shard '", path, "': cannot create '", tmp, "': ", errno_text());
  bool ok = std::fwrite(header, sizeof(header), 1, f) == 1;
  if (ok && count > 0) ok = std::fwrite(data, width, count, f) == count;
  ok = (std::fflush(f) == 0) && ok;
  const int saved_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    errno = saved_errno;
    ZT_USER_ERROR("token shard '", path, "': writing '", tmp, "' failed: ", errno_text());
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(tmp.c_str());
    ZT_USER_ERROR("token shard '", path, "': cannot rename '", tmp, "' to it: ", why);
  }
}

}  // namespace

void write_token_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_shard_bytes(path, kTokenShardMagic, kTokenShardVersion, tokens.data(), tokens.size(), sizeof(uint16_t));
}

void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens, int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > int64_t{1} << 32)
    ZT_USER_ERROR("token shard '", path, "': vocab_size ", vocab_size, " outside 1..2^32");
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size)
      ZT_USER_ERROR("token shard '", path, "': token ", tokens[i], " at position ", i, " is outside the vocabulary of ",
                    vocab_size);
  }
  if (vocab_size <= kTokenShardMaxVocab16) {
    const std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    write_token_shard(path, narrow);
  } else {
    write_shard_bytes(path, kTokenShardMagic32, kTokenShardVersion32, tokens.data(), tokens.size(), sizeof(uint32_t));
  }
}

}  // namespace zt
