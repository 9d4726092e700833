// Thin HDF5 helpers for the io layer: a move-only owner of an hid_t, and the
// reason of the last HDF5 failure read from the error stack (HDF5's own
// printing is silenced while an H5Quiet is alive, so errors surface once,
// through zt::Error / UserError, naming the file).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zt::h5 {

class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) : id_(id), close_(close) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and reports whether HDF5 succeeded (a file's close flushes).
  bool close() {
    if (!valid()) return true;
    const herr_t rc = close_(id_);
    id_ = H5I_INVALID_HID;
    return rc >= 0;
  }
  void reset() { (void)close(); }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

// HDF5's Fletcher32 checksum of `bytes` bytes (what the filter appends to a
// chunk, little-endian), computed here so that chunks can be written
// pre-filtered ([Note: Fletcher32] in checkpoint_h5.cpp).
uint32_t fletcher32(const void* data, size_t bytes);

// Silences HDF5's automatic error printing for its lifetime.
class Quiet {
 public:
  Quiet() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Quiet() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  Quiet(const Quiet&) = delete;
  Quiet& operator=(const Quiet&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The innermost messages of the current HDF5 error stack ("unknown HDF5
// error" when it is empty); these carry the system reason (errno text) when
// there is one. ZT_H5_CHECK (core/error.hpp) appends them to its message.
std::string last_error();

}  // namespace zt::h5

namespace zt {
struct ShardRef;
namespace h5 {

// Names ("state/dataset") of every shard dataset in an open checkpoint file.
std::vector<std::string> list_shard_datasets(hid_t file);
// The coordinates attributes of a shard dataset; false (with *why) if missing or bad.
bool read_shard_ref(hid_t dset, ShardRef* ref, std::string* why);
// Problems reading every dataset of the shard file at `path` fully (Fletcher32
// is checked by HDF5 on read), each naming the file; empty = readable.
std::vector<std::string> check_shard_file_readable(const std::string& path);

}  // namespace h5
}  // namespace zt
