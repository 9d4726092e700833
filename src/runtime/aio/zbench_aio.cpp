// zbench_aio: write then read a swap file with each aio back end and print
// the throughput, as NVMe offload streams optimizer states through pinned
// buffers: the file is moved in chunks (one submit each), several in flight.
//
//   zbench_aio --dir /local_nvme/ztrain_swap --size-gib 4
//   zbench_aio --dir /tmp --backend threads --queue-depth 32 --threads 4
#include <unistd.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "runtime/aio/aio.hpp"

namespace zt {
namespace {

struct Args {
  std::string dir = "/tmp";
  double size_gib = 1.0;
  std::string backend = "both";
  AioOptions aio;
  int64_t chunk_mib = 64;
  int in_flight = 4;
  int repeat = 3;
  bool verify = false;
};

// The command line, through Boost.Program_options as the other tools read
// theirs: a value that is not a number of the option's type, or trailing
// text after it, is an error naming the option.
Args parse(int argc, char** argv) {
  namespace po = boost::program_options;
  Args a;
  bool no_overlap = false;
  po::options_description opts(
      "zbench_aio [options]: writes then reads --size-gib GiB in --dir with each back end, in chunks of --chunk-mib "
      "MiB, --in-flight chunks in flight, --repeat times; prints GB/s (1e9 B/s)");
  opts.add_options()("help,h", "this help")
      ("dir", po::value(&a.dir)->default_value(a.dir), "directory of the swap file")
      ("size-gib", po::value(&a.size_gib)->default_value(a.size_gib), "GiB written and read")
      ("backend", po::value(&a.backend)->default_value(a.backend), "both, auto, io_uring or threads")
      ("block-size", po::value(&a.aio.block_size)->default_value(a.aio.block_size), "aio.block_size")
      ("queue-depth", po::value(&a.aio.queue_depth)->default_value(a.aio.queue_depth), "aio.queue_depth")
      ("threads", po::value(&a.aio.thread_count)->default_value(a.aio.thread_count), "aio.thread_count")
      ("single-submit", po::bool_switch(&a.aio.single_submit), "aio.single_submit true")
      ("no-overlap", po::bool_switch(&no_overlap), "aio.overlap_events false")
      ("chunk-mib", po::value(&a.chunk_mib)->default_value(a.chunk_mib), "MiB per submit")
      ("in-flight", po::value(&a.in_flight)->default_value(a.in_flight), "chunks in flight")
      ("repeat", po::value(&a.repeat)->default_value(a.repeat), "passes (the best is printed)")
      ("verify", po::bool_switch(&a.verify), "read back and compare what was written");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    ZT_USER_ERROR(e.what(), " (zbench_aio --help)");
  }
  if (vm.count("help")) {
    std::cout << opts;
    std::exit(0);
  }
  a.aio.overlap_events = !no_overlap;
  if (a.chunk_mib < 1 || a.in_flight < 1 || a.repeat < 1 || !(a.size_gib > 0) || !std::isfinite(a.size_gib))
    ZT_USER_ERROR("--chunk-mib, --in-flight, --repeat and --size-gib must be positive");
  if (a.aio.block_size < 1 || a.aio.queue_depth < 1 || a.aio.thread_count < 1)
    ZT_USER_ERROR("--block-size, --queue-depth and --threads must be positive");
  return a;
}

using Clock = std::chrono::steady_clock;

struct Pass {
  double write_s = 0, read_s = 0;
};

// Moves the whole file once in `chunk`-byte submits, `slots` in flight.
double move_file(AioEngine& aio, SwapFile& f, std::vector<char*>& slots, int64_t chunk, bool write,
                 const std::vector<std::vector<char>>* expect) {
  const auto t0 = Clock::now();
  const int64_t chunks = f.size() / chunk;
  std::vector<AioHandle> handles(slots.size());
  std::vector<int64_t> owner(slots.size(), -1);
  auto retire = [&](size_t s) {
    if (owner[s] < 0) return;
    aio.wait(handles[s]);
    if (expect && std::memcmp(slots[s], (*expect)[s].data(), static_cast<size_t>(chunk)) != 0)
      ZT_THROW("verify: chunk ", owner[s], " read back differs from what was written");
    owner[s] = -1;
  };
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t s = static_cast<size_t>(c) % slots.size();
    retire(s);
    handles[s] = write ? aio.submit_write(f, slots[s], static_cast<size_t>(chunk), c * chunk)
                       : aio.submit_read(f, slots[s], static_cast<size_t>(chunk), c * chunk);
    owner[s] = c;
  }
  for (size_t s = 0; s < slots.size(); ++s) retire(s);
  if (write && !f.direct()) ::fdatasync(f.fd());  // buffered: count the flush
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void bench(const Args& a, AioBackend backend) {
  SwapDir dir(a.dir, "--dir", detail::concat("zbench-", ::getpid()), 0);
  const int64_t chunk = align_up(a.chunk_mib << 20, dir.alignment());
  const int64_t total = std::max<int64_t>(1, static_cast<int64_t>(a.size_gib * (1 << 30)) / chunk) * chunk;
  dir.check_free_space(total, "the benchmark file");
  std::unique_ptr<AioEngine> aio = make_aio_engine(a.aio, backend, dir);
  SwapFile& f = dir.file("bench", total);

  std::vector<std::unique_ptr<char, decltype(&std::free)>> owned;
  std::vector<char*> slots;
  std::vector<std::vector<char>> patterns;
  std::mt19937_64 rng(42);
  for (int s = 0; s < a.in_flight; ++s) {
    void* p = std::aligned_alloc(4096, static_cast<size_t>(chunk));
    if (!p) ZT_THROW("cannot allocate ", chunk, " bytes");
    owned.emplace_back(static_cast<char*>(p), &std::free);
    slots.push_back(static_cast<char*>(p));
    auto* w = static_cast<uint64_t*>(p);
    for (int64_t i = 0; i < chunk / 8; ++i) w[i] = rng();
    if (a.verify) patterns.emplace_back(static_cast<char*>(p), static_cast<char*>(p) + chunk);
  }

  std::printf("%s: %s (%s), %.2f GiB in %lld MiB chunks, %d in flight; block_size %lld, queue_depth %d, "
              "thread_count %d, single_submit %d, overlap_events %d; alignment %zu\n",
              aio_backend_name(aio->backend()), a.dir.c_str(), f.direct() ? "O_DIRECT" : "buffered",
              static_cast<double>(total) / (1 << 30), static_cast<long long>(chunk >> 20), a.in_flight,
              static_cast<long long>(a.aio.block_size), a.aio.queue_depth, a.aio.thread_count,
              a.aio.single_submit ? 1 : 0, a.aio.overlap_events ? 1 : 0, dir.alignment());
  double best_w = 1e30, best_r = 1e30;
  for (int r = 0; r < a.repeat; ++r) {
    Pass p;
    p.write_s = move_file(*aio, f, slots, chunk, true, nullptr);
    p.read_s = move_file(*aio, f, slots, chunk, false, a.verify ? &patterns : nullptr);
    best_w = std::min(best_w, p.write_s);
    best_r = std::min(best_r, p.read_s);
    std::printf("  pass %d: write %.2f GB/s, read %.2f GB/s\n", r + 1, total / p.write_s / 1e9,
                total / p.read_s / 1e9);
  }
  std::printf("  best:   write %.2f GB/s, read %.2f GB/s%s\n", total / best_w / 1e9, total / best_r / 1e9,
              a.verify ? " (read back verified)" : "");
  const AioStats st = aio->stats();
  std::printf("  engine: %lld transfers, %lld slices, %lld requests, %lld hand-overs, %lld refills, "
              "at most %d in flight per lane\n",
              static_cast<long long>(st.transfers), static_cast<long long>(st.slices),
              static_cast<long long>(st.requests), static_cast<long long>(st.handovers),
              static_cast<long long>(st.refills), st.max_in_flight);
  std::fflush(stdout);
}

}  // namespace
}  // namespace zt

int main(int argc, char** argv) {
  try {
    const zt::Args a = zt::parse(argc, argv);
    if (a.backend == "both") {
      std::string why;
      if (zt::io_uring_available(&why))
        zt::bench(a, zt::AioBackend::io_uring);
      else
        std::printf("io_uring: skipped (%s)\n", why.c_str());
      zt::bench(a, zt::AioBackend::threads);
    } else if (a.backend == "auto") {
      zt::bench(a, zt::AioBackend::automatic);
    } else if (a.backend == "io_uring") {
      zt::bench(a, zt::AioBackend::io_uring);
    } else if (a.backend == "threads") {
      zt::bench(a, zt::AioBackend::threads);
    } else {
      ZT_USER_ERROR("--backend ", a.backend, ": both, auto, io_uring or threads");
    }
  } catch (const zt::UserError& e) {
    std::fprintf(stderr, "zbench_aio: %s\n", e.what());
    return zt::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zbench_aio: %s\n", e.what());
    return 1;
  }
  return 0;
}
