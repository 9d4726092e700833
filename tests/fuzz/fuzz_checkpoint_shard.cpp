// The shard metadata of a checkpoint's HDF5 files (io/checkpoint.hpp: each
// dataset's unit, unit_name, unit_numel, global_offset and length
// attributes, and its shape), as CheckpointReader indexes it and serves
// global ranges from it, and as verify_checkpoint reads it.
//
// The input is not an HDF5 file (HDF5's own parser is not ztrain's code) but
// a description of one that the harness writes with the HDF5 library: up to
// four datasets, each with its group (state), dataset length, which
// attributes it carries, with which types, and their values (raw 64-bit
// integers, so that extremes are reached). The manifest lists the file with
// its true SHA-256 and checksum, so every input reaches the metadata.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.hpp"
#include "fuzz_util.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/sha256.hpp"

namespace {

// Reads fields off the input; zeros once it is used up.
struct Reader {
  const uint8_t* p;
  size_t n;
  uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  int64_t i64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(byte()) << (8 * i);
    return static_cast<int64_t>(v);
  }
  // Small values most of the time, any 64-bit value when the selector says so.
  int64_t coordinate() {
    const uint8_t sel = byte();
    if (sel < 192) return sel % 24;
    if (sel < 224) return -static_cast<int64_t>(sel % 4);
    return i64();
  }
  std::string text() {
    const size_t len = byte() % 12;
    std::string s;
    for (size_t i = 0; i < len; ++i) s.push_back(static_cast<char>(byte()));
    return s;
  }
};

void put_i64(hid_t obj, const char* name, int64_t v, uint8_t how) {
  zt::h5::Id space(H5Screate(H5S_SCALAR), H5Sclose);
  if (how % 4 == 1) {  // a string where a number belongs
    zt::h5::Id type(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(type.get(), 4);
    zt::h5::Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    H5Awrite(attr.get(), type.get(), "1234");
    return;
  }
  if (how % 4 == 2) {  // a double
    const double d = static_cast<double>(v) * 0.5;
    zt::h5::Id attr(H5Acreate2(obj, name, H5T_IEEE_F64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &d);
    return;
  }
  zt::h5::Id attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  H5Awrite(attr.get(), H5T_NATIVE_INT64, &v);
}

void put_string(hid_t obj, const char* name, const std::string& s, uint8_t how) {
  zt::h5::Id space(H5Screate(H5S_SCALAR), H5Sclose);
  if (how % 4 == 1) {  // a number where a string belongs
    const int64_t v = 7;
    zt::h5::Id attr(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    H5Awrite(attr.get(), H5T_NATIVE_INT64, &v);
    return;
  }
  zt::h5::Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (how % 4 == 2) {  // variable length
    H5Tset_size(type.get(), H5T_VARIABLE);
    const char* c = s.c_str();
    zt::h5::Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    H5Awrite(attr.get(), type.get(), &c);
    return;
  }
  H5Tset_size(type.get(), std::max<size_t>(1, s.size()));
  H5Tset_strpad(type.get(), how % 4 == 3 ? H5T_STR_NULLTERM : H5T_STR_NULLPAD);
  std::string padded = s;
  padded.resize(std::max<size_t>(1, s.size()), '\0');
  zt::h5::Id attr(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  H5Awrite(attr.get(), type.get(), padded.data());
}

void write_file(const std::string& path, Reader& in) {
  const zt::h5::Quiet quiet;
  zt::h5::Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  const char* states[] = {"master", "exp_avg", "exp_avg_sq", "master"};
  const int count = 1 + in.byte() % 4;
  for (int d = 0; d < count; ++d) {
    const char* state = states[in.byte() % 4];
    zt::h5::Id group(H5Lexists(file.get(), state, H5P_DEFAULT) > 0 ? H5Gopen2(file.get(), state, H5P_DEFAULT)
                                                                   : H5Gcreate2(file.get(), state, H5P_DEFAULT,
                                                                                H5P_DEFAULT, H5P_DEFAULT),
                     H5Gclose);
    const hsize_t len = in.byte() % 40;
    const uint8_t rank = in.byte();
    const hsize_t dims2[2] = {len, 2};
    zt::h5::Id space(rank % 8 == 7 ? H5Screate_simple(2, dims2, nullptr) : H5Screate_simple(1, &len, nullptr),
                     H5Sclose);
    const std::string name = "u" + std::to_string(d);
    zt::h5::Id dset(H5Dcreate2(group.get(), name.c_str(), rank % 8 == 6 ? H5T_STD_I32LE : H5T_IEEE_F32LE,
                               space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                    H5Dclose);
    std::vector<float> values(static_cast<size_t>(len) * 2, 1.5f);
    if (rank % 8 != 6) H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    const uint8_t present = in.byte();  // a set bit leaves that attribute out
    const uint8_t types = in.byte();
    const char* ints[] = {"unit", "unit_numel", "global_offset", "length"};
    for (int a = 0; a < 4; ++a) {
      const int64_t v = in.coordinate();
      if ((present >> a) & 1) continue;
      put_i64(dset.get(), ints[a], a == 3 && (types & 0x80) == 0 ? static_cast<int64_t>(len) : v, types >> (2 * a));
    }
    const std::string unit_name = in.text();
    if (!((present >> 4) & 1)) put_string(dset.get(), "unit_name", unit_name, types >> 5);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = zt::fuzz::scratch_dir() + "/ckpt/step_1";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/rank_00000.h5";
  Reader in{data, size};
  write_file(path, in);
  nlohmann::json manifest = {{"version", zt::kCheckpointVersion},
                             {"step", 1},
                             {"files", {{"rank_00000.h5", zt::sha256_file(path)}}}};
  manifest["manifest_sha256"] = zt::manifest_checksum(manifest);
  zt::fuzz::write_file("ckpt/step_1/manifest.json", manifest.dump());

  (void)zt::verify_checkpoint(dir, /*read_data=*/true);
  try {
    zt::CheckpointReader reader(dir);
    std::vector<float> out;
    for (const int unit : reader.units()) {
      const int64_t numel = reader.unit_numel(unit);
      const int64_t begin = static_cast<int64_t>(in.byte() % 8);
      const int64_t end = begin + std::min<int64_t>(std::max<int64_t>(numel, 0), 256);
      out.resize(static_cast<size_t>(end - begin));
      for (const std::string& state : reader.states()) {
        try {
          reader.read_range(state, unit, begin, end, out.data());
        } catch (const zt::UserError&) {
        }
      }
    }
  } catch (const zt::UserError&) {
  }
  return 0;
}
