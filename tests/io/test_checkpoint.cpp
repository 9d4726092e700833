// Sharded checkpoints without MPI: "ranks" are simulated by writing several
// rank files in one process. Written with a dp=4 layout, read back with dp=3
// and whole ranges bit for bit; the commit protocol; corruption and fallback;
// write errors; and the zckpt binary (path in ZCKPT_BIN).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5.hpp"
#include "io/sha256.hpp"
#include "temp_dir.hpp"

using zt::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kStates = {"master", "exp_avg", "exp_avg_sq"};
const std::vector<std::string> kUnitNames = {"embedding", "block0", "head"};
const std::vector<int64_t> kUnitNumel = {10, 37, 1001};

int64_t padded(int64_t numel, int dp) { return (numel + dp - 1) / dp * dp; }

// The value of element i of a unit's state: varied bit patterns (signs,
// exponents, subnormal-free mantissas), 0 in the padding as ZeRO keeps it.
float value(int state, int unit, int64_t i) {
  if (i >= kUnitNumel[unit]) return 0.0f;
  uint64_t h = (static_cast<uint64_t>(state) * 1000003u + static_cast<uint64_t>(unit)) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  const float mant = static_cast<float>(h & 0xFFFFFF) / static_cast<float>(1 << 24);
  const int exp = static_cast<int>((h >> 24) % 40) - 20;
  return std::ldexp((h >> 40) & 1 ? -mant : mant, exp);
}

std::vector<float> expected(int state, int unit, int64_t begin, int64_t end) {
  std::vector<float> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(value(state, unit, i));
  return v;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Writes rank r's shards of a dp-way layout into DIR/step_<N>.tmp/; returns its SHA-256.
std::string write_rank(const std::string& tmp, int rank, int dp, std::vector<std::vector<float>>* keep) {
  std::vector<zt::ShardData> shards;
  for (int s = 0; s < 3; ++s)
    for (int u = 0; u < 3; ++u) {
      const int64_t S = padded(kUnitNumel[u], dp) / dp;
      keep->push_back(expected(s, u, rank * S, (rank + 1) * S));
      shards.push_back({kStates[s], {u, kUnitNames[u], kUnitNumel[u], rank * S, S}, keep->back().data()});
    }
  return zt::write_shard_file(tmp + "/" + zt::rank_file_name(rank), shards);
}

// A complete dp-way checkpoint at DIR/step_<step> (ranks in `skip_ranks` not written).
void write_checkpoint(const std::string& dir, int64_t step, int dp, int keep_last = 0,
                      const std::vector<int>& skip_ranks = {}) {
  const std::string tmp = zt::checkpoint_tmp_dir(dir, step);
  fs::create_directories(tmp);
  std::vector<std::vector<float>> keep;
  keep.reserve(64);
  std::map<std::string, std::string> sha;
  for (int r = 0; r < dp; ++r)
    if (std::find(skip_ranks.begin(), skip_ranks.end(), r) == skip_ranks.end())
      sha[zt::rank_file_name(r)] = write_rank(tmp, r, dp, &keep);
  nlohmann::json manifest = {{"config", {{"model", {{"n_layer", 1}, {"d_model", 8}}}}},
                             {"topology", {{"dp", dp}, {"pp", 1}}}};
  zt::commit_checkpoint(dir, step, manifest, sha, keep_last);
}

void flip_byte(const std::string& path, size_t at) {
  std::string bytes = zt::test::read_bytes(path);
  ASSERT_LT(at, bytes.size());
  bytes[at] ^= 0x5A;
  zt::test::write_bytes(path, bytes);
}

}  // namespace

TEST(Checkpoint, Names) {
  EXPECT_EQ(zt::rank_file_name(3), "rank_00003.h5");
  EXPECT_EQ(zt::checkpoint_tmp_dir("/c", 42), "/c/step_42.tmp");
  EXPECT_EQ(zt::checkpoint_final_dir("/c", 42), "/c/step_42");
  EXPECT_EQ(zt::sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Checkpoint, ReadsBackWithAnotherLayout) {
  TempDir dir;
  write_checkpoint(dir.path(), 10, /*dp=*/4);
  const std::string step_dir = dir / "step_10";
  zt::CheckpointReader reader(step_dir);
  EXPECT_EQ(reader.manifest().at("version"), 2);
  EXPECT_EQ(reader.manifest().at("step"), 10);
  EXPECT_EQ(reader.manifest().at("files").size(), 4u);
  EXPECT_EQ(reader.manifest().at("topology").at("dp"), 4);
  EXPECT_EQ(reader.units(), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(reader.unit_numel(2), 1001);
  EXPECT_EQ(reader.unit_name(1), "block0");
  EXPECT_EQ(reader.unit_numel(7), -1);

  for (int s = 0; s < 3; ++s)
    for (int u = 0; u < 3; ++u) {
      // A dp=3 layout's ranges cut the dp=4 shards in other places.
      const int64_t S3 = padded(kUnitNumel[u], 3) / 3;
      for (int r = 0; r < 3; ++r) {
        std::vector<float> got(S3, -1.0f);
        reader.read_range(kStates[s], u, r * S3, (r + 1) * S3, got.data());
        EXPECT_TRUE(bits_equal(got, expected(s, u, r * S3, (r + 1) * S3))) << kStates[s] << " unit " << u << " r " << r;
      }
      // The whole unit, and beyond the dp=4 padding: uncovered padding reads as 0.
      const int64_t n = padded(kUnitNumel[u], 4) + 5;
      std::vector<float> all(n, -1.0f);
      reader.read_range(kStates[s], u, 0, n, all.data());
      EXPECT_TRUE(bits_equal(all, expected(s, u, 0, n))) << kStates[s] << " unit " << u;
    }

  // One rank's range touches only its own slice: far fewer bytes than the checkpoint holds.
  zt::CheckpointReader fresh(step_dir);
  const int64_t S4 = padded(1001, 4) / 4;
  std::vector<float> one(S4);
  fresh.read_range("exp_avg", 2, S4, 2 * S4, one.data());
  EXPECT_TRUE(bits_equal(one, expected(1, 2, S4, 2 * S4)));
  EXPECT_EQ(fresh.bytes_read(), S4 * 4);
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(step_dir)) total += static_cast<int64_t>(fs::file_size(e.path()));
  EXPECT_LT(fresh.bytes_read(), total);
}

TEST(Checkpoint, DatasetsAreChunkedWithFletcher32) {
  TempDir dir;
  write_checkpoint(dir.path(), 1, 2);
  const hid_t file = H5Fopen((dir / "step_1/rank_00001.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t dset = H5Dopen2(file, "/exp_avg_sq/u2_501", H5P_DEFAULT);  // dp=2: S = 501
  ASSERT_GE(dset, 0);
  const hid_t dcpl = H5Dget_create_plist(dset);
  hsize_t chunk[1] = {0};
  EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED);
  EXPECT_EQ(H5Pget_chunk(dcpl, 1, chunk), 1);
  EXPECT_EQ(chunk[0], 501u);
  ASSERT_EQ(H5Pget_nfilters(dcpl), 1);
  unsigned flags = 0;
  size_t nelem = 0;
  EXPECT_EQ(H5Pget_filter2(dcpl, 0, &flags, &nelem, nullptr, 0, nullptr, nullptr), H5Z_FILTER_FLETCHER32);
  H5Pclose(dcpl);
  H5Dclose(dset);
  H5Fclose(file);
}

// HDF5's own checksum (exported by libhdf5, declared in its private headers).
extern "C" uint32_t H5_checksum_fletcher32(const void* data, size_t len);

// Chunks are written pre-filtered, so ztrain's Fletcher32 must equal HDF5's
// on every input: sizes odd and even, below and above the segment split,
// zeros (0, not 0xffff), all 0xff (totals that are multiples of 65535), one
// nonzero byte at either end, and random data.
TEST(Checkpoint, Fletcher32EqualsHdf5s) {
  std::mt19937 rng(5);
  std::vector<unsigned char> buf((size_t{4} << 20) + 7);
  std::vector<size_t> sizes = {0, 1, 2, 3, 15, 16, 17, 719, 720, 721, 4096, 65535 * 2, (size_t{1} << 20) + 1,
                               size_t{4} << 20, (size_t{4} << 20) + 4, (size_t{4} << 20) + 7};
  for (int i = 0; i < 40; ++i) sizes.push_back(rng() % buf.size());
  for (const int fill : {0, 0xff, -1, -2, -3}) {
    for (size_t n : sizes) {
      for (size_t k = 0; k < n; ++k)
        buf[k] = fill >= 0 ? static_cast<unsigned char>(fill) : static_cast<unsigned char>(rng());
      if (fill == -2 && n > 0) std::fill(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n - 1), 0);
      if (fill == -3 && n > 0) std::fill(buf.begin() + 1, buf.begin() + static_cast<std::ptrdiff_t>(n), 0);
      ASSERT_EQ(zt::h5::fletcher32(buf.data(), n), H5_checksum_fletcher32(buf.data(), n)) << "fill " << fill << ", " << n << " bytes";
    }
  }
}

TEST(Checkpoint, MissingElementsAreAnError) {
  TempDir dir;
  write_checkpoint(dir.path(), 5, 4, 0, /*skip_ranks=*/{2});
  zt::CheckpointReader reader(dir / "step_5");
  const int64_t S = padded(37, 4) / 4;
  std::vector<float> buf(40);
  reader.read_range("master", 1, 0, 2 * S, buf.data());  // ranks 0 and 1: present
  EXPECT_THROW(reader.read_range("master", 1, 0, 40, buf.data()), zt::UserError);
  EXPECT_THROW(reader.read_range("momentum", 1, 0, 4, buf.data()), zt::UserError);
  EXPECT_THROW(reader.read_range("master", 9, 0, 4, buf.data()), zt::UserError);
}

TEST(Checkpoint, CommitProtocol) {
  TempDir dir;
  fs::create_directories(dir / "step_5.tmp");   // stale: older than the commits below
  fs::create_directories(dir / "step_99.tmp");  // newer: left alone
  write_checkpoint(dir.path(), 10, 2);
  EXPECT_EQ(zt::read_latest_name(dir.path()), "step_10");
  EXPECT_EQ(zt::test::read_bytes(dir / "latest"), "step_10");
  EXPECT_FALSE(fs::exists(dir / "step_5.tmp"));
  EXPECT_FALSE(fs::exists(dir / "step_10.tmp"));
  EXPECT_TRUE(fs::exists(dir / "step_99.tmp"));
  EXPECT_FALSE(fs::exists(dir / "latest.tmp"));

  write_checkpoint(dir.path(), 20, 2);
  EXPECT_EQ(zt::read_latest_name(dir.path()), "step_20");

  // A committed checkpoint is never written again.
  const std::string before = zt::sha256_file(dir / "step_20/manifest.json");
  EXPECT_THROW(write_checkpoint(dir.path(), 20, 2), zt::Error);
  EXPECT_EQ(zt::sha256_file(dir / "step_20/manifest.json"), before);
  fs::remove_all(dir / "step_20.tmp");

  write_checkpoint(dir.path(), 30, 2, /*keep_last=*/2);
  EXPECT_FALSE(fs::exists(dir / "step_10"));
  EXPECT_TRUE(fs::exists(dir / "step_20"));
  EXPECT_TRUE(fs::exists(dir / "step_30"));
  EXPECT_EQ(zt::read_latest_name(dir.path()), "step_30");
  EXPECT_TRUE(zt::verify_checkpoint(dir / "step_30").empty());
}

TEST(Checkpoint, CorruptionFallsBackToThePreviousStep) {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 4);
  write_checkpoint(dir.path(), 20, 4);
  fs::create_directories(dir / "step_30.tmp");  // a crash before the commit
  fs::create_directories(dir / "step_25");      // no manifest
  const std::string bad = dir / "step_20/rank_00001.h5";
  flip_byte(bad, fs::file_size(bad) / 2);

  const std::vector<std::string> problems = zt::verify_checkpoint(dir / "step_20");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(contains(problems[0], "rank_00001.h5")) << problems[0];
  EXPECT_TRUE(zt::verify_checkpoint(dir / "step_10").empty());

  std::vector<std::string> skipped;
  EXPECT_EQ(zt::find_latest_checkpoint(dir.path(), &skipped), dir / "step_10");
  ASSERT_EQ(skipped.size(), 3u);
  EXPECT_TRUE(contains(skipped[0], "step_30.tmp")) << skipped[0];
  EXPECT_TRUE(contains(skipped[1], "step_25") && contains(skipped[1], "manifest.json")) << skipped[1];
  EXPECT_TRUE(contains(skipped[2], "step_20") && contains(skipped[2], "rank_00001.h5")) << skipped[2];
  EXPECT_EQ(zt::find_latest_checkpoint(dir / "nothing_here", nullptr), std::nullopt);
}

TEST(Checkpoint, Fletcher32CatchesDamageTheManifestMissed) {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 4);
  // Damage a value of rank 2's exp_avg of unit 2, then re-record the file's SHA-256.
  const std::string path = dir / "step_10/rank_00002.h5";
  const int64_t S = padded(1001, 4) / 4;
  const std::vector<float> data = expected(1, 2, 2 * S, 2 * S + 8);
  const std::string bytes = zt::test::read_bytes(path);
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(data.data()), 32));
  ASSERT_NE(at, std::string::npos);
  flip_byte(path, at + 5);
  nlohmann::json m = nlohmann::json::parse(zt::test::read_bytes(dir / "step_10/manifest.json"));
  m["files"]["rank_00002.h5"] = zt::sha256_file(path);
  m["manifest_sha256"] = zt::manifest_checksum(m);
  zt::test::write_bytes(dir / "step_10/manifest.json", m.dump());

  EXPECT_TRUE(zt::verify_checkpoint(dir / "step_10", /*read_data=*/false).empty());
  const std::vector<std::string> problems = zt::verify_checkpoint(dir / "step_10");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(contains(problems[0], "rank_00002.h5") && contains(problems[0], "/exp_avg/u2_")) << problems[0];
  zt::CheckpointReader reader(dir / "step_10");
  std::vector<float> buf(S);
  EXPECT_THROW(reader.read_range("exp_avg", 2, 2 * S, 3 * S, buf.data()), zt::UserError);
}

// [Note: manifest checksum]: an edited field (the step, the applied steps)
// fails verification and reading, naming manifest.json; the checksum does not
// depend on indentation; a version-1 manifest (no checksum) still verifies.
TEST(Checkpoint, ManifestChecksumCatchesEditedFields) {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 2);
  const std::string mpath = dir / "step_10/manifest.json";
  const nlohmann::json good = nlohmann::json::parse(zt::test::read_bytes(mpath));
  ASSERT_TRUE(good.contains("manifest_sha256"));
  EXPECT_EQ(good["manifest_sha256"], zt::manifest_checksum(good));
  zt::test::write_bytes(mpath, good.dump(4));  // re-indented: still good
  EXPECT_TRUE(zt::verify_checkpoint(dir / "step_10").empty());

  for (const char* key : {"step", "applied_steps"}) {
    nlohmann::json m = good;
    m[key] = 80;
    zt::test::write_bytes(mpath, m.dump(2));
    const std::vector<std::string> problems = zt::verify_checkpoint(dir / "step_10");
    ASSERT_EQ(problems.size(), 1u) << key;
    EXPECT_TRUE(contains(problems[0], "manifest.json") && contains(problems[0], "manifest_sha256")) << problems[0];
    EXPECT_THROW(zt::CheckpointReader reader(dir / "step_10"), zt::UserError) << key;
    std::vector<std::string> skipped;
    EXPECT_EQ(zt::find_latest_checkpoint(dir.path(), &skipped), std::nullopt) << key;
  }
  nlohmann::json unsigned_v2 = good;
  unsigned_v2.erase("manifest_sha256");
  zt::test::write_bytes(mpath, unsigned_v2.dump(2));
  ASSERT_EQ(zt::verify_checkpoint(dir / "step_10").size(), 1u);

  nlohmann::json v1 = unsigned_v2;
  v1["version"] = 1;
  zt::test::write_bytes(mpath, v1.dump(2));
  EXPECT_TRUE(zt::verify_checkpoint(dir / "step_10").empty());
  std::string warning;
  EXPECT_EQ(zt::manifest_checksum_problem(v1, mpath, &warning), "");
  EXPECT_TRUE(contains(warning, "version 1") && contains(warning, mpath)) << warning;
  EXPECT_NO_THROW(zt::CheckpointReader reader(dir / "step_10"));
}

// Shard coordinates that do not fit (an end past int64, a unit past int) are
// reported as damage naming the file and dataset: the reader's
// global_offset + length overflowed before (found by
// tests/fuzz/fuzz_checkpoint_shard). A manifest may list only names inside
// its step directory (found by tests/fuzz/fuzz_checkpoint_manifest).
TEST(Checkpoint, OutOfRangeCoordinatesAndForeignPathsAreDamage) {
  TempDir dir;
  write_checkpoint(dir.path(), 3, 1);
  const std::string path = dir / "step_3/rank_00000.h5";
  const std::string mpath = dir / "step_3/manifest.json";
  {
    zt::h5::Id file(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_TRUE(file.valid());
    zt::h5::Id dset(H5Dopen2(file.get(), "master/u1_0", H5P_DEFAULT), H5Dclose);
    ASSERT_TRUE(dset.valid());
    zt::h5::Id attr(H5Aopen(dset.get(), "global_offset", H5P_DEFAULT), H5Aclose);
    const int64_t huge = std::numeric_limits<int64_t>::max() - 2;
    ASSERT_GE(H5Awrite(attr.get(), H5T_NATIVE_INT64, &huge), 0);
  }
  nlohmann::json m = nlohmann::json::parse(zt::test::read_bytes(mpath));
  m["files"]["rank_00000.h5"] = zt::sha256_file(path);
  m["manifest_sha256"] = zt::manifest_checksum(m);
  zt::test::write_bytes(mpath, m.dump());
  const std::vector<std::string> problems = zt::verify_checkpoint(dir / "step_3");
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(contains(problems[0], "rank_00000.h5: dataset /master/u1_0: coordinates out of range")) << problems[0];
  try {
    zt::CheckpointReader reader(dir / "step_3");
    ADD_FAILURE() << "no error";
  } catch (const zt::UserError& e) {
    EXPECT_TRUE(contains(e.what(), "dataset /master/u1_0: coordinates out of range (unit 1, unit_numel 37, "
                                   "global_offset 9223372036854775805, length 37)"))
        << e.what();
  }

  for (const char* name : {"../step_3/rank_00000.h5", "/etc/hostname", "..", "."}) {
    nlohmann::json bad = m;
    bad["files"][name] = "0";
    bad["manifest_sha256"] = zt::manifest_checksum(bad);
    zt::test::write_bytes(mpath, bad.dump());
    const std::vector<std::string> p = zt::verify_checkpoint(dir / "step_3", /*read_data=*/false);
    ASSERT_FALSE(p.empty()) << name;
    EXPECT_TRUE(contains(p[0], std::string("manifest.json: files: '") + name + "' is not a file name")) << p[0];
    EXPECT_THROW(zt::CheckpointReader reader(dir / "step_3"), zt::UserError) << name;
  }
}

TEST(Checkpoint, WriteErrorsNameThePathAndLeaveNoFile) {
  TempDir dir;
  const std::vector<float> v(1 << 20, 1.5f);
  const std::vector<zt::ShardData> shards = {{"master", {0, "u", 1 << 20, 0, 1 << 20}, v.data()}};
  zt::test::write_bytes(dir / "plain_file", "x");
  for (const std::string& path : {dir / "plain_file/rank_00000.h5", dir / "no/such/dir/rank_00000.h5"}) {
    try {
      zt::write_shard_file(path, shards);
      ADD_FAILURE() << "no error writing " << path;
    } catch (const zt::Error& e) {
      EXPECT_TRUE(contains(e.what(), path)) << e.what();
    }
  }
  // A full disk: /dev/full answers ENOSPC (and, not being a regular file, is never removed).
  if (fs::exists("/dev/full")) {
    try {
      zt::write_shard_file("/dev/full", shards);
      ADD_FAILURE() << "no error writing /dev/full";
    } catch (const zt::Error& e) {
      EXPECT_TRUE(contains(e.what(), "/dev/full") && contains(e.what(), "No space left")) << e.what();
    }
    EXPECT_TRUE(fs::exists("/dev/full"));
  }
  // A full disk midway, simulated with a file-size limit (EFBIG instead of SIGXFSZ).
  const std::string path = dir / "rank_00001.h5";
  struct rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string what;
  try {
    zt::write_shard_file(path, shards);
  } catch (const zt::Error& e) {
    what = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(contains(what, path)) << what;
  EXPECT_FALSE(fs::exists(path));
}

namespace {
struct Result {
  int code;
  std::string out;
};
Result zckpt(const TempDir& dir, const std::string& args) {
  const std::string cmd = std::string(ZCKPT_BIN) + " " + args + " >" + (dir / "out") + " 2>&1";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, zt::test::read_bytes(dir / "out")};
}
}  // namespace

TEST(Checkpoint, ZckptInspectAndVerify) {
  TempDir dir;
  write_checkpoint(dir.path(), 10, 4);
  const std::string step_dir = dir / "step_10";
  Result r = zckpt(dir, "inspect " + step_dir);
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* part : {"step 10", "dp=4", "n_layer=1", "rank_00003.h5", "embedding", "head", "parameters: 1048",
                           "total bytes"})
    EXPECT_TRUE(contains(r.out, part)) << part << " not in\n" << r.out;

  r = zckpt(dir, "verify " + step_dir);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "ok")) << r.out;

  const std::string bad = step_dir + "/rank_00003.h5";
  flip_byte(bad, fs::file_size(bad) / 3);
  r = zckpt(dir, "verify " + step_dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "rank_00003.h5")) << r.out;

  EXPECT_EQ(zckpt(dir, "export " + step_dir).code, 2);
  EXPECT_EQ(zckpt(dir, "inspect " + (dir / "missing")).code, 1);
}
