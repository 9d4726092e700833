#include "io/sha256.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.hpp"

namespace zt {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxDeleter>;

MdCtx new_sha256() {
  MdCtx ctx(EVP_MD_CTX_new());
  ZT_CHECK(ctx != nullptr, "EVP_MD_CTX_new failed");
  ZT_CHECK(EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) == 1, "EVP_DigestInit_ex(sha256) failed");
  return ctx;
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  ZT_CHECK(EVP_DigestFinal_ex(ctx, digest, &len) == 1, "EVP_DigestFinal_ex failed");
  static const char* kHex = "0123456789abcdef";
  std::string hex(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    hex[2 * i] = kHex[digest[i] >> 4];
    hex[2 * i + 1] = kHex[digest[i] & 15];
  }
  return hex;
}

}  // namespace

std::string sha256_hex(const void* data, size_t size) {
  MdCtx ctx = new_sha256();
  ZT_CHECK(EVP_DigestUpdate(ctx.get(), data, size) == 1, "EVP_DigestUpdate failed");
  return finish_hex(ctx.get());
}

std::string sha256_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ZT_THROW("cannot open '", path, "' to hash it: ", std::strerror(errno));
  MdCtx ctx = new_sha256();
  std::vector<unsigned char> block(size_t{4} << 20);
  for (;;) {
    const ssize_t n = ::read(fd, block.data(), block.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ZT_THROW("error while reading '", path, "' to hash it: ", std::strerror(err));
    }
    if (EVP_DigestUpdate(ctx.get(), block.data(), static_cast<size_t>(n)) != 1) {
      ::close(fd);
      ZT_THROW("EVP_DigestUpdate failed while hashing '", path, "'");
    }
  }
  ::close(fd);
  return finish_hex(ctx.get());
}

}  // namespace zt
