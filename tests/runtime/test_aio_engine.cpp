// The aio engines: both back ends write and read back identical bytes under
// every combination of the aio keys, with many transfers in flight waited for
// out of order; io_uring and the thread pool leave identical files; the
// checks of alignment and of the aio options; I/O errors (a short read at the
// end of a file, ENOSPC on a full tmpfs) name the file, the operation and
// the offset; directories without O_DIRECT fall back to buffered I/O.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "aio_test_util.hpp"
#include "core/error.hpp"
#include "runtime/aio/aio.hpp"

namespace zt {
namespace {

using aio_test::AlignedBuf;
using aio_test::Mount;
using aio_test::TempDir;

constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";

// GTEST_SKIP only works in the test body: the macro returns from it.
#define SKIP_WITHOUT_IO_URING(backend)                                   \
  do {                                                                   \
    std::string why_;                                                    \
    if ((backend) == AioBackend::io_uring && !io_uring_available(&why_)) \
      GTEST_SKIP() << "io_uring unavailable: " << why_;                  \
  } while (0)

struct Region {
  int64_t offset;
  size_t bytes;
};

// Regions of assorted sizes, aligned but mostly not whole blocks, laid end to
// end from offset 0: one alignment unit, a few, a block and a bit, many
// blocks and a bit.
std::vector<Region> regions(size_t a, int64_t block) {
  const std::vector<int64_t> sizes = {static_cast<int64_t>(a), 3 * static_cast<int64_t>(a), block,
                                      block + static_cast<int64_t>(a), 5 * block + 9 * static_cast<int64_t>(a),
                                      block - static_cast<int64_t>(a), 17 * block + static_cast<int64_t>(a),
                                      7 * static_cast<int64_t>(a), 2 * block, 11 * block - 5 * static_cast<int64_t>(a),
                                      static_cast<int64_t>(a), 4 * block + 2 * static_cast<int64_t>(a)};
  std::vector<Region> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back({at, static_cast<size_t>(s)});
    at += s;
  }
  return out;
}

int64_t end_of(const std::vector<Region>& rs) { return rs.back().offset + static_cast<int64_t>(rs.back().bytes); }

// Writes every region of `src` (all in flight), waits in reverse order, reads
// them back into a poisoned buffer (all in flight), waits evens then odds;
// the bytes read and the file's bytes must equal `src`.
void round_trip(AioEngine& aio, SwapFile& f, const std::vector<Region>& rs, uint64_t seed) {
  const auto total = static_cast<size_t>(end_of(rs));
  AlignedBuf src(total), dst(total);
  src.fill_random(seed);
  std::memset(dst.data(), 0xab, total);

  std::vector<AioHandle> hs;
  for (const Region& r : rs) hs.push_back(aio.submit_write(f, src.data() + r.offset, r.bytes, r.offset));
  for (size_t i = hs.size(); i-- > 0;) aio.wait(hs[i]);

  hs.clear();
  for (const Region& r : rs) hs.push_back(aio.submit_read(f, dst.data() + r.offset, r.bytes, r.offset));
  for (size_t i = 0; i < hs.size(); i += 2) aio.wait(hs[i]);
  for (size_t i = 1; i < hs.size(); i += 2) aio.wait(hs[i]);

  ASSERT_EQ(std::memcmp(src.data(), dst.data(), total), 0);
  const std::vector<char> on_disk = aio_test::read_file(f.path());
  ASSERT_GE(on_disk.size(), total);
  EXPECT_EQ(std::memcmp(on_disk.data(), src.data(), total), 0);
}

struct Combo {
  AioBackend backend;
  int queue_depth;
  int thread_count;
  bool single_submit;
  bool overlap_events;
};

std::string combo_name(const testing::TestParamInfo<Combo>& info) {
  const Combo& c = info.param;
  return std::string(aio_backend_name(c.backend)) + "_qd" + std::to_string(c.queue_depth) + "_t" +
         std::to_string(c.thread_count) + (c.single_submit ? "_single" : "_batch") +
         (c.overlap_events ? "_overlap" : "_rounds");
}

std::vector<Combo> all_combos() {
  std::vector<Combo> out;
  for (AioBackend b : {AioBackend::io_uring, AioBackend::threads})
    for (int qd : {1, 8})
      for (int t : {1, 4})
        for (bool single : {false, true})
          for (bool overlap : {false, true}) out.push_back({b, qd, t, single, overlap});
  return out;
}

class AioRoundTrip : public testing::TestWithParam<Combo> {};

TEST_P(AioRoundTrip, WritesAndReadsBackIdenticalBytes) {
  const Combo c = GetParam();
  SKIP_WITHOUT_IO_URING(c.backend);
  TempDir tmp;
  SwapDir dir(tmp.path(), kKey, "rt", 0);
  AioOptions o;
  o.block_size = 64 << 10;  // small blocks: many pieces per transfer
  o.queue_depth = c.queue_depth;
  o.thread_count = c.thread_count;
  o.single_submit = c.single_submit;
  o.overlap_events = c.overlap_events;
  std::unique_ptr<AioEngine> aio = make_aio_engine(o, c.backend, dir);
  EXPECT_EQ(aio->backend(), c.backend);
  EXPECT_EQ(aio->options().queue_depth, c.queue_depth);

  const std::vector<Region> rs = regions(dir.alignment(), o.block_size);
  SwapFile& f = dir.file("states", align_up(end_of(rs), dir.alignment()));
  round_trip(*aio, f, rs, 1234 + c.queue_depth * 10 + c.thread_count);
  // The same engine again, over what the first pass wrote.
  round_trip(*aio, f, rs, 99);
  const AioStats st = aio->stats();
  EXPECT_EQ(st.transfers, 4 * static_cast<int64_t>(rs.size()));
  EXPECT_LE(st.max_in_flight, c.queue_depth);
  if (c.single_submit) {
    EXPECT_EQ(st.handovers, st.requests);
  }
  if (!c.overlap_events) {
    EXPECT_EQ(st.refills, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllKeys, AioRoundTrip, testing::ValuesIn(all_combos()), combo_name);

// /dev/shm is tmpfs: O_DIRECT from Linux 6.6 on, buffered before; the same
// calls work either way.
TEST(AioEngine, RoundTripOnDevShm) {
  if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "/dev/shm is not writable here";
  for (AioBackend b : {AioBackend::io_uring, AioBackend::threads}) {
    std::string why;
    if (b == AioBackend::io_uring && !io_uring_available(&why)) continue;
    TempDir tmp("/dev/shm");
    SwapDir dir(tmp.path(), kKey, "shm", 0);
    AioOptions o;
    o.block_size = 64 << 10;
    o.thread_count = 2;
    std::unique_ptr<AioEngine> aio = make_aio_engine(o, b, dir);
    const std::vector<Region> rs = regions(dir.alignment(), o.block_size);
    round_trip(*aio, dir.file("p", align_up(end_of(rs), dir.alignment())), rs, 5);
  }
}

// Each key changes what is done, in both back ends: the engine's counts
// after one 4 MiB write and read.
TEST(AioEngine, EachKeyChangesWhatIsDone) {
  for (AioBackend b : {AioBackend::io_uring, AioBackend::threads}) {
    std::string why;
    if (b == AioBackend::io_uring && !io_uring_available(&why)) continue;
    SCOPED_TRACE(aio_backend_name(b));
    TempDir tmp;
    SwapDir dir(tmp.path(), kKey, "keys", 0);
    constexpr size_t kBytes = 4 << 20;
    SwapFile& f = dir.file("k", kBytes);
    AlignedBuf buf(kBytes);
    buf.fill_random(11);
    auto run = [&](AioOptions o) {
      std::unique_ptr<AioEngine> aio = make_aio_engine(o, b, dir);
      aio->wait(aio->submit_write(f, buf.data(), kBytes, 0));
      aio->wait(aio->submit_read(f, buf.data(), kBytes, 0));
      return aio->stats();
    };
    AioOptions o;
    o.block_size = 64 << 10;  // 64 pieces per transfer
    const AioStats base = run(o);
    EXPECT_EQ(base.transfers, 2);
    EXPECT_EQ(base.slices, 2);
    EXPECT_EQ(base.requests, 128);
    EXPECT_EQ(base.max_in_flight, 8);
    EXPECT_LT(base.handovers, 128);  // batches
    EXPECT_GT(base.refills, 0);      // refilled while others were in flight

    AioOptions big = o;
    big.block_size = 256 << 10;
    EXPECT_EQ(run(big).requests, 32);

    AioOptions qd1 = o, qd3 = o;
    qd1.queue_depth = 1;
    qd3.queue_depth = 3;
    EXPECT_EQ(run(qd1).max_in_flight, 1);
    EXPECT_EQ(run(qd3).max_in_flight, 3);

    AioOptions four = o;
    four.thread_count = 4;
    const AioStats s4 = run(four);
    EXPECT_EQ(s4.slices, 8);  // each transfer split over the four lanes
    EXPECT_EQ(s4.requests, 128);

    AioOptions single = o;
    single.single_submit = true;
    const AioStats ss = run(single);
    EXPECT_EQ(ss.handovers, ss.requests);

    AioOptions rounds = o;
    rounds.overlap_events = false;
    const AioStats sr = run(rounds);
    EXPECT_EQ(sr.handovers, 2 * 64 / 8);  // one batch of queue_depth per round
    EXPECT_EQ(sr.refills, 0);
    EXPECT_EQ(sr.max_in_flight, 8);
  }
}

TEST(AioEngine, IoUringAndThreadPoolWriteIdenticalFiles) {
  SKIP_WITHOUT_IO_URING(AioBackend::io_uring);
  TempDir tmp;
  SwapDir dir(tmp.path(), kKey, "same", 0);
  AioOptions o;
  o.block_size = 128 << 10;
  o.thread_count = 4;
  const std::vector<Region> rs = regions(dir.alignment(), o.block_size);
  const auto total = static_cast<size_t>(end_of(rs));
  AlignedBuf src(total);
  src.fill_random(77);
  std::vector<std::vector<char>> files;
  for (AioBackend b : {AioBackend::io_uring, AioBackend::threads}) {
    std::unique_ptr<AioEngine> aio = make_aio_engine(o, b, dir);
    SwapFile& f = dir.file(aio_backend_name(b), align_up(static_cast<int64_t>(total), dir.alignment()));
    std::vector<AioHandle> hs;
    for (const Region& r : rs) hs.push_back(aio->submit_write(f, src.data() + r.offset, r.bytes, r.offset));
    for (AioHandle h : hs) aio->wait(h);
    files.push_back(aio_test::read_file(f.path()));
  }
  ASSERT_EQ(files[0].size(), files[1].size());
  EXPECT_TRUE(files[0] == files[1]);
  EXPECT_EQ(std::memcmp(files[0].data(), src.data(), total), 0);
}

TEST(AioEngine, AutomaticPicksIoUringWhenAvailable) {
  TempDir tmp;
  SwapDir dir(tmp.path(), kKey, "auto", 0);
  std::string why;
  const bool uring = io_uring_available(&why);
  std::unique_ptr<AioEngine> aio = make_aio_engine(AioOptions{}, AioBackend::automatic, dir);
  EXPECT_EQ(aio->backend(), uring ? AioBackend::io_uring : AioBackend::threads) << why;
  if (!uring) {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(make_aio_engine(AioOptions{}, AioBackend::io_uring, dir), Error);
  }
}

template <typename E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(AioEngine, OptionsAreValidatedAgainstTheDirectory) {
  TempDir tmp;
  SwapDir dir(tmp.path(), kKey, "opts", 0);
  const std::string a = std::to_string(dir.alignment());
  auto make = [&](AioOptions o) { return [&dir, o] { make_aio_engine(o, AioBackend::threads, dir); }; };
  AioOptions o;
  o.block_size = static_cast<int64_t>(dir.alignment()) + 100;
  std::string m = message_of<UserError>(make(o));
  EXPECT_NE(m.find("aio.block_size"), std::string::npos) << m;
  EXPECT_NE(m.find(a), std::string::npos) << m;
  EXPECT_NE(m.find(tmp.path()), std::string::npos) << m;
  o.block_size = 0;
  EXPECT_NE(message_of<UserError>(make(o)).find("aio.block_size"), std::string::npos);
  o.block_size = int64_t{2} << 30;
  EXPECT_NE(message_of<UserError>(make(o)).find("aio.block_size"), std::string::npos);
  o = AioOptions{};
  o.queue_depth = 0;
  EXPECT_NE(message_of<UserError>(make(o)).find("aio.queue_depth"), std::string::npos);
  o = AioOptions{};
  o.thread_count = 0;
  EXPECT_NE(message_of<UserError>(make(o)).find("aio.thread_count"), std::string::npos);
  // The defaults are valid on every file system (1 MiB is a multiple of 4096).
  EXPECT_NO_THROW(validate_aio_options(AioOptions{}, 4096, "x"));
}

TEST(AioEngine, UnalignedTransfersAreRefusedSayingWhich) {
  TempDir tmp;
  SwapDir dir(tmp.path(), kKey, "align", 0);
  const size_t a = dir.alignment();
  std::unique_ptr<AioEngine> aio = make_aio_engine(AioOptions{}, AioBackend::threads, dir);
  SwapFile& f = dir.file("x", 16 * static_cast<int64_t>(a));
  AlignedBuf buf(16 * a);
  auto msg = [&](char* p, size_t bytes, int64_t off) {
    return message_of<Error>([&] { aio->submit_write(f, p, bytes, off); });
  };
  std::string m = msg(buf.data() + 1, a, 0);
  EXPECT_NE(m.find("buffer address"), std::string::npos) << m;
  EXPECT_NE(m.find(f.path()), std::string::npos) << m;
  EXPECT_NE(msg(buf.data(), a + 1, 0).find("bytes is not a multiple"), std::string::npos);
  EXPECT_NE(msg(buf.data(), a, 7).find("offset 7"), std::string::npos);
  EXPECT_NE(msg(buf.data(), 2 * a, 15 * static_cast<int64_t>(a)).find("run past"), std::string::npos);
  // Nothing was submitted; a handle is redeemed once.
  AioHandle h = aio->submit_read(f, buf.data(), a, 0);
  // done() never blocks: polled until the transfer is over, then wait()
  // returns at once.
  while (!aio->done(h)) std::this_thread::yield();
  EXPECT_TRUE(aio->done(h));
  aio->wait(h);
  EXPECT_THROW(aio->wait(h), Error);
  EXPECT_THROW(aio->done(h), Error);
  EXPECT_THROW(aio->wait(AioHandle{12345}), Error);
  // Zero bytes is a transfer that is done at once.
  aio->wait(aio->submit_read(f, buf.data(), 0, 0));
}

// A read past the end of the file (shrunk behind the engine's back): a short
// transfer, reported with the file, the operation and the offset.
TEST(AioEngine, ShortReadNamesFileOperationAndOffset) {
  for (AioBackend b : {AioBackend::io_uring, AioBackend::threads}) {
    std::string why;
    if (b == AioBackend::io_uring && !io_uring_available(&why)) continue;
    TempDir tmp;
    SwapDir dir(tmp.path(), kKey, "short", 0);
    AioOptions o;
    o.block_size = 64 << 10;
    std::unique_ptr<AioEngine> aio = make_aio_engine(o, b, dir);
    SwapFile& f = dir.file("s", 1 << 20);
    ASSERT_EQ(::ftruncate(f.fd(), 256 << 10), 0);
    AlignedBuf buf(1 << 20);
    AioHandle h = aio->submit_read(f, buf.data(), 1 << 20, 0);
    const std::string m = message_of<Error>([&] { aio->wait(h); });
    SCOPED_TRACE(aio_backend_name(b));
    EXPECT_NE(m.find(f.path()), std::string::npos) << m;
    EXPECT_NE(m.find("read"), std::string::npos) << m;
    EXPECT_NE(m.find("offset 262144"), std::string::npos) << m;
    EXPECT_NE(m.find("end of file"), std::string::npos) << m;
    std::printf("[ info ] %s: %s\n", aio_backend_name(b), m.c_str());
    // The engine goes on working after a failed transfer.
    aio->wait(aio->submit_read(f, buf.data(), 64 << 10, 0));
  }
}

// A full file system under a file that was preallocated but lost its blocks
// (a hole punched, the space taken by another file): the write fails with
// ENOSPC, named with the file, "write" and the offset.
TEST(AioEngine, NoSpaceOnWriteNamesFileAndOperation) {
  for (AioBackend b : {AioBackend::io_uring, AioBackend::threads}) {
    std::string why;
    if (b == AioBackend::io_uring && !io_uring_available(&why)) continue;
    Mount small("tmpfs", 0, "size=1m");
    if (!small.ok()) GTEST_SKIP() << "cannot mount a small tmpfs: " << small.why();
    SwapDir dir(small.path(), kKey, "full", 0);
    AioOptions o;
    o.block_size = 64 << 10;
    std::unique_ptr<AioEngine> aio = make_aio_engine(o, b, dir);
    SwapFile& f = dir.file("m", 512 << 10);
    ASSERT_EQ(::fallocate(f.fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 512 << 10), 0);
    {  // fill the file system
      const std::string filler = small.path() + "/filler";
      FILE* fp = std::fopen(filler.c_str(), "wb");
      ASSERT_NE(fp, nullptr);
      std::vector<char> chunk(4096, 1);
      while (std::fwrite(chunk.data(), 1, chunk.size(), fp) == chunk.size() && std::fflush(fp) == 0) {
      }
      std::fclose(fp);
    }
    AlignedBuf buf(512 << 10);
    buf.fill_random(3);
    AioHandle h = aio->submit_write(f, buf.data(), 512 << 10, 0);
    const std::string m = message_of<Error>([&] { aio->wait(h); });
    SCOPED_TRACE(aio_backend_name(b));
    EXPECT_NE(m.find(f.path()), std::string::npos) << m;
    EXPECT_NE(m.find("write"), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
    EXPECT_NE(m.find(std::strerror(ENOSPC)), std::string::npos) << m;
    std::printf("[ info ] %s: %s\n", aio_backend_name(b), m.c_str());
  }
}

// ramfs has no O_DIRECT at all (open fails with EINVAL): the directory falls
// back to buffered I/O, says so once, and transfers still work.
TEST(AioEngine, NoDirectIoFallsBackToBufferedOnce) {
  Mount ram("ramfs", 0, "");
  if (!ram.ok()) GTEST_SKIP() << "cannot mount ramfs: " << ram.why();
  testing::internal::CaptureStderr();
  {
    SwapDir a(ram.path(), kKey, "ram", 0);
    SwapDir b(ram.path(), kKey, "ram", 1);
    EXPECT_FALSE(a.direct());
    EXPECT_EQ(a.alignment(), 4096u);
    for (AioBackend be : {AioBackend::io_uring, AioBackend::threads}) {
      std::string why;
      if (be == AioBackend::io_uring && !io_uring_available(&why)) continue;
      AioOptions o;
      o.block_size = 64 << 10;
      std::unique_ptr<AioEngine> aio = make_aio_engine(o, be, a);
      const std::vector<Region> rs = regions(a.alignment(), o.block_size);
      SwapFile& f = a.file(aio_backend_name(be), align_up(end_of(rs), a.alignment()));
      EXPECT_FALSE(f.direct());
      round_trip(*aio, f, rs, 8);
    }
  }
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string said = "no direct I/O on this file system";
  ASSERT_NE(err.find(said), std::string::npos) << err;
  EXPECT_EQ(err.find(said, err.find(said) + 1), std::string::npos) << "said twice:\n" << err;
  EXPECT_NE(err.find(ram.path()), std::string::npos) << err;
}

TEST(AioEngine, DestructionWaitsForTransfersInFlight) {
  TempDir tmp;
  SwapDir dir(tmp.path(), kKey, "dtor", 0);
  SwapFile& f = dir.file("d", 8 << 20);
  AlignedBuf buf(8 << 20);
  buf.fill_random(4);
  for (AioBackend b : {AioBackend::io_uring, AioBackend::threads}) {
    std::string why;
    if (b == AioBackend::io_uring && !io_uring_available(&why)) continue;
    AioOptions o;
    o.block_size = 256 << 10;
    o.thread_count = 2;
    auto aio = make_aio_engine(o, b, dir);
    aio->submit_write(f, buf.data(), 8 << 20, 0);  // never waited for
    aio.reset();
    const std::vector<char> on_disk = aio_test::read_file(f.path());
    ASSERT_EQ(on_disk.size(), size_t{8} << 20);
    EXPECT_EQ(std::memcmp(on_disk.data(), buf.data(), on_disk.size()), 0) << aio_backend_name(b);
  }
}

}  // namespace
}  // namespace zt
