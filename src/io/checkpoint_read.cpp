// Reading checkpoints: the shard index, global-range reads with hyperslabs, and
// the full-read check that verify_checkpoint uses (checkpoint.hpp).
#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"

namespace zt {

namespace h5 {

std::vector<std::string> list_shard_datasets(hid_t file) {
  auto children = [](hid_t group) {
    std::vector<std::string> names;
    H5G_info_t info;
    if (H5Gget_info(group, &info) < 0) return names;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      const ssize_t len = H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (len < 0) continue;
      std::string name(static_cast<size_t>(len) + 1, '\0');
      H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
      name.resize(static_cast<size_t>(len));
      names.push_back(name);
    }
    return names;
  };
  std::vector<std::string> out;
  for (const std::string& state : children(file)) {
    Id group(H5Gopen2(file, state.c_str(), H5P_DEFAULT), H5Gclose);
    if (!group.valid()) continue;
    for (const std::string& name : children(group.get())) out.push_back(state + "/" + name);
  }
  return out;
}

namespace {
bool read_i64(hid_t obj, const char* name, int64_t* value) {
  if (H5Aexists(obj, name) <= 0) return false;
  Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  return attr.valid() && H5Aread(attr.get(), H5T_NATIVE_INT64, value) >= 0;
}

bool read_string(hid_t obj, const char* name, std::string* value) {
  if (H5Aexists(obj, name) <= 0) return false;
  Id attr(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
  Id ftype(H5Aget_type(attr.get()), H5Tclose);
  if (!ftype.valid() || H5Tget_class(ftype.get()) != H5T_STRING || H5Tis_variable_str(ftype.get()) > 0) return false;
  const size_t size = H5Tget_size(ftype.get());
  Id mtype(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(mtype.get(), size);
  H5Tset_strpad(mtype.get(), H5T_STR_NULLPAD);
  std::string buf(size, '\0');
  if (H5Aread(attr.get(), mtype.get(), buf.data()) < 0) return false;
  *value = buf.substr(0, buf.find('\0'));
  return true;
}
}  // namespace

bool read_shard_ref(hid_t dset, ShardRef* ref, std::string* why) {
  int64_t unit = 0;
  if (!read_i64(dset, "unit", &unit) || !read_string(dset, "unit_name", &ref->unit_name) ||
      !read_i64(dset, "unit_numel", &ref->unit_numel) || !read_i64(dset, "global_offset", &ref->global_offset) ||
      !read_i64(dset, "length", &ref->length)) {
    *why = "missing or unreadable coordinate attributes";
    return false;
  }
  // Units are ints, and a shard's end (global_offset + length) is computed
  // by every reader: values that do not fit are damage, not a layout.
  if (unit < 0 || unit > std::numeric_limits<int>::max() || ref->unit_numel < 0 || ref->global_offset < 0 ||
      ref->length < 0 || ref->global_offset > std::numeric_limits<int64_t>::max() - ref->length) {
    *why = "coordinates out of range (unit " + std::to_string(unit) + ", unit_numel " +
           std::to_string(ref->unit_numel) + ", global_offset " + std::to_string(ref->global_offset) + ", length " +
           std::to_string(ref->length) + ")";
    return false;
  }
  ref->unit = static_cast<int>(unit);
  Id space(H5Dget_space(dset), H5Sclose);
  hsize_t dims[1] = {0};
  if (!space.valid() || H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0 || static_cast<int64_t>(dims[0]) != ref->length) {
    *why = "dataset shape does not match its length attribute";
    return false;
  }
  return true;
}

std::vector<std::string> check_shard_file_readable(const std::string& path) {
  const Quiet quiet;
  std::vector<std::string> problems;
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) return {path + ": cannot open as HDF5: " + last_error()};
  std::vector<float> buf;
  for (const std::string& name : list_shard_datasets(file.get())) {
    Id dset(H5Dopen2(file.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    ShardRef ref;
    std::string why;
    if (!dset.valid() || !read_shard_ref(dset.get(), &ref, &why)) {
      problems.push_back(path + ": dataset /" + name + ": " + (dset.valid() ? why : last_error()));
      continue;
    }
    // Chunk-sized hyperslabs keep memory bounded whatever the shard size.
    for (int64_t at = 0; at < ref.length; at += int64_t{1} << 20) {
      const hsize_t off[1] = {static_cast<hsize_t>(at)};
      const hsize_t cnt[1] = {static_cast<hsize_t>(std::min(ref.length - at, int64_t{1} << 20))};
      buf.resize(cnt[0]);
      Id fspace(H5Dget_space(dset.get()), H5Sclose);
      Id mspace(H5Screate_simple(1, cnt, nullptr), H5Sclose);
      if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, off, nullptr, cnt, nullptr) < 0 ||
          H5Dread(dset.get(), H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, buf.data()) < 0) {
        problems.push_back(path + ": dataset /" + name + " unreadable at element " + std::to_string(at) + ": " +
                           last_error());
        break;
      }
    }
  }
  return problems;
}

}  // namespace h5

struct CheckpointReader::Impl {
  struct Entry {
    int file = 0;
    std::string dataset;  // "state/u<unit>_<offset>"
    ShardRef ref;
  };
  std::string step_dir;
  nlohmann::json manifest;
  std::vector<std::string> paths;
  std::vector<h5::Id> files;
  std::map<std::pair<std::string, int>, std::vector<Entry>> index;  // by global_offset
  std::map<int, ShardRef> unit_info;                                // unit -> name, numel
  std::set<std::string> states;
  int64_t bytes_read = 0;
};

CheckpointReader::CheckpointReader(const std::string& step_dir) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.step_dir = step_dir;
  const std::string manifest_path = step_dir + "/manifest.json";
  std::ifstream in(manifest_path);
  if (!in) ZT_USER_ERROR("checkpoint manifest '", manifest_path, "' is missing or unreadable");
  try {
    m.manifest = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    ZT_USER_ERROR("checkpoint manifest '", manifest_path, "' is not valid JSON: ", e.what());
  }
  if (!m.manifest.is_object() || !m.manifest.contains("files") || !m.manifest["files"].is_object())
    ZT_USER_ERROR("checkpoint manifest '", manifest_path, "' has no \"files\" object");
  if (const std::string p = manifest_checksum_problem(m.manifest, manifest_path); !p.empty())
    ZT_USER_ERROR("checkpoint manifest ", p);
  if (const std::string p = manifest_files_problem(m.manifest["files"], manifest_path); !p.empty())
    ZT_USER_ERROR("checkpoint manifest ", p);
  const h5::Quiet quiet;
  for (const auto& [name, sha] : m.manifest["files"].items()) {
    if (!is_shard_file_name(name)) continue;  // e.g. the 16-bit weights beside the shards
    const std::string path = step_dir + "/" + name;
    h5::Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
    if (!file.valid()) ZT_USER_ERROR("checkpoint file '", path, "' cannot be opened: ", h5::last_error());
    const int fi = static_cast<int>(m.files.size());
    for (const std::string& ds : h5::list_shard_datasets(file.get())) {
      h5::Id dset(H5Dopen2(file.get(), ds.c_str(), H5P_DEFAULT), H5Dclose);
      Impl::Entry e{fi, ds, {}};
      std::string why = dset.valid() ? "" : h5::last_error();
      if (!dset.valid() || !h5::read_shard_ref(dset.get(), &e.ref, &why))
        ZT_USER_ERROR("checkpoint file '", path, "': dataset /", ds, ": ", why);
      const std::string state = ds.substr(0, ds.find('/'));
      auto [it, fresh] = m.unit_info.emplace(e.ref.unit, e.ref);
      if (!fresh && it->second.unit_numel != e.ref.unit_numel)
        ZT_USER_ERROR("checkpoint file '", path, "': dataset /", ds, " says unit ", e.ref.unit, " has ",
                      e.ref.unit_numel, " elements, another shard says ", it->second.unit_numel);
      m.states.insert(state);
      m.index[{state, e.ref.unit}].push_back(std::move(e));
    }
    m.paths.push_back(path);
    m.files.push_back(std::move(file));
  }
  for (auto& [key, entries] : m.index)
    std::sort(entries.begin(), entries.end(),
              [](const Impl::Entry& a, const Impl::Entry& b) { return a.ref.global_offset < b.ref.global_offset; });
}

CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

const nlohmann::json& CheckpointReader::manifest() const { return impl_->manifest; }
int64_t CheckpointReader::bytes_read() const { return impl_->bytes_read; }

int64_t CheckpointReader::unit_numel(int unit) const {
  auto it = impl_->unit_info.find(unit);
  return it == impl_->unit_info.end() ? -1 : it->second.unit_numel;
}

std::string CheckpointReader::unit_name(int unit) const {
  auto it = impl_->unit_info.find(unit);
  return it == impl_->unit_info.end() ? std::string() : it->second.unit_name;
}

std::vector<int> CheckpointReader::units() const {
  std::vector<int> out;
  for (const auto& [u, ref] : impl_->unit_info) out.push_back(u);
  return out;
}

std::vector<std::string> CheckpointReader::states() const {
  return std::vector<std::string>(impl_->states.begin(), impl_->states.end());
}

void CheckpointReader::read_range(const std::string& state, int unit, int64_t begin, int64_t end, float* out) {
  Impl& m = *impl_;
  ZT_CHECK(0 <= begin && begin <= end, "bad range [", begin, ", ", end, ")");
  std::fill(out, out + (end - begin), 0.0f);
  std::vector<std::pair<int64_t, int64_t>> covered;
  const h5::Quiet quiet;
  auto it = m.index.find({state, unit});
  if (it != m.index.end()) {
    for (const Impl::Entry& e : it->second) {
      const int64_t lo = std::max(begin, e.ref.global_offset);
      const int64_t hi = std::min(end, e.ref.global_offset + e.ref.length);
      if (lo >= hi) continue;
      const std::string& path = m.paths[e.file];
      h5::Id dset(H5Dopen2(m.files[e.file].get(), e.dataset.c_str(), H5P_DEFAULT), H5Dclose);
      h5::Id fspace(dset.valid() ? H5Dget_space(dset.get()) : H5I_INVALID_HID, H5Sclose);
      const hsize_t off[1] = {static_cast<hsize_t>(lo - e.ref.global_offset)};
      const hsize_t cnt[1] = {static_cast<hsize_t>(hi - lo)};
      h5::Id mspace(H5Screate_simple(1, cnt, nullptr), H5Sclose);
      if (!fspace.valid() || H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, off, nullptr, cnt, nullptr) < 0 ||
          H5Dread(dset.get(), H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), H5P_DEFAULT, out + (lo - begin)) < 0)
        ZT_USER_ERROR("checkpoint file '", path, "': cannot read dataset /", e.dataset, " [", off[0], ", ",
                      off[0] + cnt[0], "): ", h5::last_error());
      m.bytes_read += (hi - lo) * static_cast<int64_t>(sizeof(float));
      covered.emplace_back(lo, hi);
    }
  }
  // Every real element (below unit_numel) must come from some shard; padding may be absent.
  const int64_t numel = unit_numel(unit);
  const int64_t need_end = std::min(end, std::max<int64_t>(numel, 0));
  std::sort(covered.begin(), covered.end());
  int64_t at = begin;
  for (const auto& [lo, hi] : covered) {
    if (lo > at && at < need_end) break;
    at = std::max(at, hi);
  }
  if (at < need_end || (numel < 0 && begin < end))
    ZT_USER_ERROR("checkpoint '", m.step_dir, "' lacks ", state, " elements [", at, ", ",
                  numel < 0 ? end : need_end, ") of unit ", unit,
                  numel < 0 ? " (unit not in checkpoint)" : " (" + unit_name(unit) + ")");
}

}  // namespace zt
