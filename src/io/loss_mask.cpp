#include "io/loss_mask.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.hpp"

namespace zt {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "loss masks are little-endian on disk");

std::string mask_path_for(const std::string& shard_path) {
  const std::string ext = ".bin";
  if (shard_path.size() > ext.size() && shard_path.compare(shard_path.size() - ext.size(), ext.size(), ext) == 0)
    return shard_path.substr(0, shard_path.size() - ext.size()) + ".mask";
  return shard_path + ".mask";
}

LossMaskFile read_loss_mask_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ZT_USER_ERROR("loss mask '", path, "': cannot open: ", std::strerror(errno));
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size < kLossMaskHeaderBytes)
    ZT_USER_ERROR("loss mask '", path, "': ", size, " bytes, shorter than the ", kLossMaskHeaderBytes, "-byte header");
  if (std::memcmp(bytes.data(), kLossMaskMagic, sizeof kLossMaskMagic) != 0)
    ZT_USER_ERROR("loss mask '", path, "': wrong magic (expected \"ZTLMASK\", see [Note: loss mask file])");
  int32_t version = 0;
  int64_t count = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  if (version != kLossMaskVersion && version != kLossMaskVersionPlain)
    ZT_USER_ERROR("loss mask '", path, "': unsupported version ", version, " (expected ", kLossMaskVersionPlain,
                  " or ", kLossMaskVersion, ")");
  if (count < 0 || size != kLossMaskHeaderBytes + count)
    ZT_USER_ERROR("loss mask '", path, "': header says ", count, " entries, so the file should have ",
                  kLossMaskHeaderBytes + count, " bytes, but it has ", size);
  LossMaskFile f;
  f.has_examples = version == kLossMaskVersion;
  f.counts.assign(bytes.begin() + kLossMaskHeaderBytes, bytes.end());
  const uint8_t allowed = f.has_examples ? (kMaskCounts | kMaskExampleStart) : kMaskCounts;
  for (size_t i = 0; i < f.counts.size(); ++i) {
    const uint8_t v = f.counts[i];
    if ((v & ~allowed) != 0) {
      ZT_USER_ERROR("loss mask '", path, "': entry ", i, " is ", int{v},
                    f.has_examples ? " (version 2 allows bits 0 and 1 only: values 0 to 3)"
                                   : " (only 0 and 1 are allowed)");
    }
    if (f.has_examples && (v & kMaskExampleStart)) f.example_starts.push_back(static_cast<int64_t>(i));
    f.counts[i] = v & kMaskCounts;
  }
  if (f.has_examples && !f.counts.empty() && (f.example_starts.empty() || f.example_starts[0] != 0))
    ZT_USER_ERROR("loss mask '", path, "': entry 0 does not start an example (version 2 files begin with one)");
  return f;
}

std::vector<uint8_t> read_loss_mask(const std::string& path) { return read_loss_mask_file(path).counts; }

namespace {

// The header then the bytes as given, through path.tmp and a rename.
void write_mask_file(const std::string& path, int32_t version, const std::vector<uint8_t>& mask) {
  char header[kLossMaskHeaderBytes] = {};
  std::memcpy(header, kLossMaskMagic, sizeof kLossMaskMagic);
  const int64_t count = static_cast<int64_t>(mask.size());
  std::memcpy(header + 8, &version, 4);
  std::memcpy(header + 16, &count, 8);
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) ZT_USER_ERROR("loss mask '", path, "': cannot create '", tmp, "': ", std::strerror(errno));
  bool ok = std::fwrite(header, sizeof header, 1, f) == 1;
  if (ok && !mask.empty()) ok = std::fwrite(mask.data(), 1, mask.size(), f) == mask.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    ZT_USER_ERROR("loss mask '", path, "': writing '", tmp, "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    ZT_USER_ERROR("loss mask '", path, "': cannot rename '", tmp, "' to it: ", std::strerror(errno));
  }
}

}  // namespace

void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask) {
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] > 1) ZT_USER_ERROR("loss mask '", path, "': entry ", i, " is ", int{mask[i]}, " (0 or 1 expected)");
  write_mask_file(path, kLossMaskVersionPlain, mask);
}

void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask,
                     const std::vector<int64_t>& example_starts) {
  for (size_t i = 0; i < mask.size(); ++i)
    if (mask[i] > 1) ZT_USER_ERROR("loss mask '", path, "': entry ", i, " is ", int{mask[i]}, " (0 or 1 expected)");
  const int64_t n = static_cast<int64_t>(mask.size());
  if (n > 0 && (example_starts.empty() || example_starts[0] != 0))
    ZT_USER_ERROR("loss mask '", path, "': the first example must start at token 0");
  std::vector<uint8_t> bytes = mask;
  for (size_t k = 0; k < example_starts.size(); ++k) {
    const int64_t s = example_starts[k];
    if (s < 0 || s >= n || (k > 0 && s <= example_starts[k - 1]))
      ZT_USER_ERROR("loss mask '", path, "': example start ", k, " at ", s, " is not increasing inside [0, ", n, ")");
    bytes[static_cast<size_t>(s)] |= kMaskExampleStart;
  }
  write_mask_file(path, kLossMaskVersion, bytes);
}

}  // namespace zt
