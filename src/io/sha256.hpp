// SHA-256 of files and byte strings (OpenSSL's EVP API), as lowercase hex. The
// checkpoint manifest records one per rank file; verification recomputes it.
#pragma once

#include <cstddef>
#include <string>

namespace zt {

// Hex digest (64 characters) of `size` bytes at `data`.
std::string sha256_hex(const void* data, size_t size);

// Hex digest of the whole file at `path`, read in 4 MiB blocks. Throws
// zt::Error naming the path and the errno reason when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace zt
