// zbench_host: the host side of ZeRO-Offload in one process, no GPU, no MPI.
//
//   zbench_host [--numel N] [--threads T] [--rounds R] [--copy none,bf16] [--grad fp32,bf16] [--isa all]
//               [--stagger B]
//
// 1. Host memory bandwidth, STREAM triad a = b + s*c over N floats per array:
//    GB/s as STREAM counts it (12 B per fp32 element: two reads, one write)
//    and with the write-allocate read of `a` that ordinary stores cause
//    (16 B).
// 2. The AdamW memory pattern without the arithmetic (p, m, v read and
//    written, grad read: 28 B per element; +2 B with a 16-bit copy): the
//    bandwidth ceiling of the update.
// 3. ztrain's CPU AdamW (optim/adamw.hpp) over N parameters, per vector ISA
//    and working-copy type: parameters/s and GB/s for the bytes it moves,
//    28 B per parameter (fp32 p, m, v read and written, fp32 grad read),
//    30 B with a bf16 or f16 copy written in the same pass; --grad bf16
//    reads bf16 gradients (offload.grad_dtype), 2 B less.
//    --tile runs it tile by tile, as the offload step does; --pages and
//    --touch change how the arrays' pages are made (what pinned allocations
//    may get instead of the defaults here).
// 4. The same AdamW on arrays that stay in each core's L2 (16Ki parameters
//    per thread, each thread on its own): its arithmetic ceiling, to tell memory-bound from
//    compute-bound (the two divisions and the square root per element
//    bound it; they cannot be traded for reciprocals without changing bits).
//
// Every array is 64-byte aligned, --stagger bytes further from a 2 MiB
// boundary than the one before (transparent huge pages are asked for with
// madvise), and first-touched by the threads with the
// static schedule the AdamW loop uses, so that on a NUMA host every thread
// updates memory of its own node (pin threads: OMP_PROC_BIND=close
// OMP_PLACES=cores). Each measurement prints one line; the last line is
// `RESULT {json}` with every number. The best round counts (as in STREAM);
// the mean is reported too.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "optim/adamw.hpp"

namespace po = boost::program_options;

namespace {

constexpr size_t kAlign = size_t{2} << 20;

// An uninitialised array starting `stagger` bytes past a 2 MiB boundary (no
// first touch here).
template <typename T>
class HostArray {
 public:
  HostArray(int64_t n, size_t stagger, bool huge) : n_(n) {
    const size_t bytes = (static_cast<size_t>(n) * sizeof(T) + stagger + kAlign - 1) / kAlign * kAlign;
    base_ = std::aligned_alloc(kAlign, std::max(bytes, kAlign));
    if (base_ == nullptr) throw std::runtime_error("out of memory allocating " + std::to_string(bytes) + " B");
#if defined(MADV_HUGEPAGE)
    madvise(base_, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);  // advice only; without THP it changes nothing
#endif
    data_ = reinterpret_cast<T*>(static_cast<char*>(base_) + stagger);
  }
  ~HostArray() { std::free(base_); }
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;
  T* data() { return data_; }
  int64_t size() const { return n_; }

 private:
  void* base_ = nullptr;
  T* data_ = nullptr;
  int64_t n_ = 0;
};

// A value in [-1, 1) from the index (splitmix64), cheap and thread-independent.
inline float hashed(uint64_t i, uint64_t seed) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull + seed;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<int64_t>(z >> 40) - (int64_t{1} << 23)) * (1.0f / (1 << 23));
}

// Array k starts k * stagger bytes past a 2 MiB boundary (stagger a multiple
// of 64): with 0 every array has the same address bits below 2 MiB, which
// some memory systems serve worse (STREAM's OFFSET).
struct State {
  HostArray<float> p, g, m, v;
  HostArray<uint16_t> copy;  // bf16 or f16 bits
  HostArray<uint16_t> g16;   // the gradients in bf16 (--grad bf16), else empty
  State(int64_t n, size_t stagger, bool huge, bool bf16_grads = false)
      : p(n, 0, huge), g(n, stagger, huge), m(n, 2 * stagger, huge), v(n, 3 * stagger, huge),
        copy(n, 4 * stagger, huge), g16(bf16_grads ? n : 0, 5 * stagger, huge) {}
};

// Writes AdamW-like values (moments normal floats, never subnormal) with the
// static schedule of the AdamW loop: the first touch places the pages.
void init_state(State& s, int64_t n, bool one_thread = false) {
  float* p = s.p.data();
  float* g = s.g.data();
  float* m = s.m.data();
  float* v = s.v.data();
  uint16_t* c = s.copy.data();
  uint16_t* g16 = s.g16.size() > 0 ? s.g16.data() : nullptr;
#pragma omp parallel if (!one_thread)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t u = static_cast<uint64_t>(i);
      p[i] = 0.02f * hashed(u, 1);
      g[i] = 1e-3f * hashed(u, 2);
      m[i] = 1e-4f * hashed(u, 3);
      v[i] = 1e-7f * (1.5f + hashed(u, 4));
      c[i] = 0;
      if (g16 != nullptr) g16[i] = zt::f32_to_bf16(g[i]).bits;
    }
  }
}

// ztrain's AdamW over elements [off, off + k) of `s`, writing the working
// copy named by `copy` (none, bf16 or f16), from the fp32 gradients or
// (`grad` "bf16") the bf16 ones.
void adamw_at(State& s, int64_t off, int64_t k, const std::string& copy, const zt::AdamWParams& hp, int64_t step,
              const std::string& grad = "fp32") {
  float* p = s.p.data() + off;
  const float* g = s.g.data() + off;
  float* m = s.m.data() + off;
  float* v = s.v.data() + off;
  uint16_t* h = s.copy.data() + off;
  if (grad == "bf16") {
    const auto* gb = reinterpret_cast<const zt::bf16*>(s.g16.data() + off);
    const std::vector<zt::DecayRange> all{{0, k, true}};
    if (copy == "none") {
      zt::adamw_update_ranges(p, gb, m, v, k, all, hp, step, 1.0f);
    } else if (copy == "bf16") {
      zt::adamw_update_ranges(p, gb, m, v, k, all, hp, step, 1.0f, reinterpret_cast<zt::bf16*>(h));
    } else {
      zt::adamw_update_ranges(p, gb, m, v, k, all, hp, step, 1.0f, reinterpret_cast<zt::f16*>(h));
    }
    return;
  }
  if (copy == "none") {
    zt::adamw_update(p, g, m, v, k, hp, step, 1.0f, true);
  } else if (copy == "bf16") {
    zt::adamw_update(p, g, m, v, k, hp, step, 1.0f, true, reinterpret_cast<zt::bf16*>(h));
  } else {
    zt::adamw_update(p, g, m, v, k, hp, step, 1.0f, true, reinterpret_cast<zt::f16*>(h));
  }
}

double now() { return omp_get_wtime(); }

struct Timing {
  double best = 0.0;
  double mean = 0.0;
};

template <typename F>
Timing time_rounds(int rounds, F&& f) {
  f(0);  // warm-up: page faults, frequency, caches
  Timing t;
  t.best = 1e300;
  double sum = 0.0;
  for (int r = 1; r <= rounds; ++r) {
    const double t0 = now();
    f(r);
    const double dt = now() - t0;
    t.best = std::min(t.best, dt);
    sum += dt;
  }
  t.mean = sum / rounds;
  return t;
}

// STREAM triad, same static schedule as the first touch.
void triad(float* a, const float* b, const float* c, float scalar, int64_t n) {
#pragma omp parallel
  {
#pragma omp for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + scalar * c[i];
  }
}

// One element of the AdamW memory pattern with almost no arithmetic; the
// copy (if any) gets the upper half of p's bits.
template <bool kCopy>
inline void pattern_element(float& p, float& m, float& v, float g, uint16_t* copy) {
  m = m * 0.5f + g;
  v = v * 0.5f + g;
  p = p * 0.5f + g;
  if constexpr (kCopy) {
    uint32_t u;
    std::memcpy(&u, &p, 4);
    *copy = static_cast<uint16_t>(u >> 16);
  }
}

void adamw_pattern(float* p, const float* g, float* m, float* v, uint16_t* copy, int64_t n) {
#pragma omp parallel
  {
    if (copy == nullptr) {
#pragma omp for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) pattern_element<false>(p[i], m[i], v[i], g[i], nullptr);
    } else {
#pragma omp for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) pattern_element<true>(p[i], m[i], v[i], g[i], copy + i);
    }
  }
}

// The same pattern with p, m and v interleaved in blocks of B elements
// (p[B] m[B] v[B], then the next block): the state is one stream read and
// written in place, the gradient one read stream, the copy one write stream.
void aos_pattern(float* st, const float* g, uint16_t* copy, int64_t n, int64_t B) {
  const int64_t blocks = n / B;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    float* p = st + 3 * B * b;
    float* m = p + B;
    float* v = m + B;
    const float* gb = g + B * b;
    uint16_t* cb = copy + B * b;
#pragma omp simd
    for (int64_t i = 0; i < B; ++i) pattern_element<true>(p[i], m[i], v[i], gb[i], cb + i);
  }
}

// ztrain's AdamW (bf16 copy) over the interleaved blocks: one serial update
// per block in each thread.
void aos_adamw(float* st, const float* g, uint16_t* copy, int64_t n, int64_t B, const zt::AdamWParams& hp,
               int64_t step) {
  const int64_t blocks = n / B;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    float* p = st + 3 * B * b;
    zt::adamw_update(p, g + B * b, p + B, p + 2 * B, B, hp, step, 1.0f, true,
                     reinterpret_cast<zt::bf16*>(copy + B * b));
  }
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

int run(int argc, char** argv) {
  int64_t numel = 400'000'000;
  int threads = 0;
  int rounds = 10;
  std::string copies = "none,bf16";
  std::string grads = "fp32";
  std::string isas = "all";
  size_t stagger = 4160;
  std::string pages = "huge";
  std::string touch = "threads";
  int64_t tile = 0;
  std::string aos_blocks;
  po::options_description opts("zbench_host options");
  opts.add_options()("help,h", "this help")(
      "numel", po::value(&numel)->default_value(numel), "elements per array (parameters)")(
      "threads", po::value(&threads)->default_value(0), "OpenMP threads (0: OMP default, all cores)")(
      "rounds", po::value(&rounds)->default_value(rounds), "timed rounds per measurement (after one warm-up)")(
      "copy", po::value(&copies)->default_value(copies),
      "working copies to measure, comma list of none, bf16, f16")(
      "grad", po::value(&grads)->default_value(grads),
      "gradient dtypes the AdamW reads, comma list of fp32, bf16 (offload.grad_dtype)")(
      "isa", po::value(&isas)->default_value(isas),
      "AdamW ISAs, comma list of avx512f, avx2, sse2, auto; all: every ISA this CPU has")(
      "stagger", po::value(&stagger)->default_value(stagger),
      "bytes between the arrays' offsets from 2 MiB boundaries (a multiple of 64; 0: all alike)")(
      "pages", po::value(&pages)->default_value(pages),
      "huge: transparent huge pages asked for (MADV_HUGEPAGE); small: refused (MADV_NOHUGEPAGE)")(
      "touch", po::value(&touch)->default_value(touch),
      "threads: the arrays first touched by the AdamW's static schedule; one: by one thread (pages on its node)")(
      "tile", po::value(&tile)->default_value(tile),
      "AdamW over tiles of this many elements, one parallel update each, as the offload step runs it (0: one "
      "update over all)")(
      "aos", po::value(&aos_blocks)->default_value(""),
      "also measure p, m, v interleaved in blocks of these many elements (comma list), pattern and AdamW with a bf16 "
      "copy");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, opts), vm);
  if (vm.count("help")) {
    std::cout << "usage: zbench_host [options]\n" << opts;
    return 0;
  }
  po::notify(vm);
  if (numel < 1 || rounds < 1) throw std::invalid_argument("--numel and --rounds must be >= 1");
  if (threads < 0) throw std::invalid_argument("--threads must be >= 0 (0: the OpenMP default)");
  if (stagger % 64 != 0 || stagger * 4 >= kAlign) throw std::invalid_argument("--stagger: a multiple of 64 below 512 KiB");
  if (pages != "huge" && pages != "small") throw std::invalid_argument("--pages: huge or small");
  if (touch != "threads" && touch != "one") throw std::invalid_argument("--touch: threads or one");
  if (tile < 0) throw std::invalid_argument("--tile must be >= 0");
  if (threads > 0) omp_set_num_threads(threads);
  threads = omp_get_max_threads();
  const std::vector<std::string> copy_list = split(copies);
  if (copy_list.empty()) throw std::invalid_argument("--copy: expected a comma list of none, bf16, f16");
  for (const std::string& c : copy_list) {
    if (c != "none" && c != "bf16" && c != "f16") throw std::invalid_argument("--copy: unknown copy " + c);
  }
  const std::vector<std::string> grad_list = split(grads);
  if (grad_list.empty()) throw std::invalid_argument("--grad: expected a comma list of fp32, bf16");
  for (const std::string& g : grad_list) {
    if (g != "fp32" && g != "bf16") throw std::invalid_argument("--grad: unknown gradient dtype " + g);
  }
  std::vector<std::string> isa_list = isas == "all" ? zt::adamw_cpu_isas() : split(isas);
  if (isa_list.empty()) throw std::invalid_argument("--isa: expected all or a comma list of avx512f, avx2, sse2, auto");
  for (const std::string& isa : isa_list) {  // before any measurement, named by the flag
    try {
      zt::adamw_set_cpu_isa(isa);  // its own check: a known ISA that this CPU has
    } catch (const zt::UserError& e) {
      throw std::invalid_argument(std::string("--isa: ") + e.what());
    }
  }
  zt::adamw_set_cpu_isa("");
  std::vector<int64_t> aos_list;  // checked before any measurement
  for (const std::string& bs : split(aos_blocks)) {
    size_t used = 0;
    int64_t B = 0;
    try {
      B = std::stoll(bs, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != bs.size() || B < 16 || numel % B != 0)
      throw std::invalid_argument("--aos: '" + bs + "': expected blocks of >= 16 elements dividing --numel");
    aos_list.push_back(B);
  }

  const double gb = 1e-9;
  const int64_t n = numel;
  std::printf("zbench_host: %s, %d threads (OMP_PROC_BIND=%s OMP_PLACES=%s), numel %lld, %d rounds, stagger %zu B, "
              "%s pages, touched by %s, tile %lld\n",
              cpu_model().c_str(), threads, env_or("OMP_PROC_BIND", "unset").c_str(),
              env_or("OMP_PLACES", "unset").c_str(), static_cast<long long>(n), rounds, stagger, pages.c_str(),
              touch.c_str(), static_cast<long long>(tile));
  std::fflush(stdout);

  State s(n, stagger, pages == "huge",
          std::find(grad_list.begin(), grad_list.end(), "bf16") != grad_list.end());
  init_state(s, n, touch == "one");

  nlohmann::json result;
  result["numel"] = n;
  result["threads"] = threads;
  result["rounds"] = rounds;
  result["stagger_bytes"] = stagger;
  result["pages"] = pages;
  result["touch"] = touch;
  result["tile"] = tile;
  result["cpu"] = cpu_model();
  result["omp_proc_bind"] = env_or("OMP_PROC_BIND", "");
  result["omp_places"] = env_or("OMP_PLACES", "");
  result["isas_available"] = zt::adamw_cpu_isas();

  // 1. STREAM triad over p = g + s*m (the state is re-initialised after).
  const Timing tt = time_rounds(rounds, [&](int) { triad(s.p.data(), s.g.data(), s.m.data(), 3.0f, n); });
  // Bytes per element for fp32 arrays (STREAM's 24 and 32 are for doubles).
  constexpr double kTriadBytes = 3 * sizeof(float), kTriadWaBytes = 4 * sizeof(float);
  const double triad_stream = kTriadBytes * n / tt.best * gb;
  const double triad_wa = kTriadWaBytes * n / tt.best * gb;
  std::printf("triad      : %8.3f s best, %8.3f s mean, %7.1f GB/s STREAM (12 B/elem), %7.1f GB/s with write-allocate (16 B/elem)\n",
              tt.best, tt.mean, triad_stream, triad_wa);
  std::fflush(stdout);
  result["triad"] = {{"best_s", tt.best},
                     {"mean_s", tt.mean},
                     {"gbps_stream", triad_stream},
                     {"gbps_write_allocate", triad_wa},
                     {"gbps_stream_mean", kTriadBytes * n / tt.mean * gb},
                     {"gbps_write_allocate_mean", kTriadWaBytes * n / tt.mean * gb}};
  init_state(s, n);

  // 2. The AdamW memory pattern, no arithmetic to speak of.
  result["pattern"] = nlohmann::json::array();
  for (const std::string& c : copy_list) {
    uint16_t* copy = c == "none" ? nullptr : s.copy.data();
    const double bytes = c == "none" ? 28.0 : 30.0;
    const Timing t = time_rounds(rounds, [&](int) {
      adamw_pattern(s.p.data(), s.g.data(), s.m.data(), s.v.data(), copy, n);
    });
    const double gbps = bytes * n / t.best * gb;
    std::printf("pattern %-4s: %8.3f s best, %8.3f s mean, %7.3f Gparam/s, %7.1f GB/s (%2.0f B/param), %5.1f%% of triad+WA\n",
                c.c_str(), t.best, t.mean, n / t.best * 1e-9, gbps, bytes, 100.0 * gbps / triad_wa);
    std::fflush(stdout);
    result["pattern"].push_back({{"copy", c},
                                 {"best_s", t.best},
                                 {"mean_s", t.mean},
                                 {"params_per_s", n / t.best},
                                 {"gbps", gbps},
                                 {"bytes_per_param", bytes},
                                 {"frac_of_triad_write_allocate", gbps / triad_wa}});
  }
  init_state(s, n);

  // 2b. p, m, v interleaved in blocks.
  result["aos"] = nlohmann::json::array();
  for (const int64_t B : aos_list) {
    HostArray<float> st(3 * n, 0, pages == "huge");
    float* sp = st.data();
    const float* g = s.g.data();
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < n / B; ++b) {
      for (int64_t i = 0; i < B; ++i) {
        const uint64_t u = static_cast<uint64_t>(b * B + i);
        sp[3 * B * b + i] = 0.02f * hashed(u, 1);
        sp[3 * B * b + B + i] = 1e-4f * hashed(u, 3);
        sp[3 * B * b + 2 * B + i] = 1e-7f * (1.5f + hashed(u, 4));
      }
    }
    const Timing tp = time_rounds(rounds, [&](int) { aos_pattern(sp, g, s.copy.data(), n, B); });
    zt::AdamWParams ahp;
    ahp.lr = 1e-4;
    ahp.weight_decay = 0.1;
    int64_t step = 0;
    const Timing ta = time_rounds(rounds, [&](int) { aos_adamw(sp, g, s.copy.data(), n, B, ahp, ++step); });
    const double gp = 30.0 * n / tp.best * gb, ga = 30.0 * n / ta.best * gb;
    std::printf("interleaved %6lld: pattern %7.1f GB/s (%5.1f%% of triad+WA), adamw bf16 %7.3f Gparam/s %7.1f GB/s (%5.1f%%)\n",
                static_cast<long long>(B), gp, 100.0 * gp / triad_wa, n / ta.best * 1e-9, ga, 100.0 * ga / triad_wa);
    std::fflush(stdout);
    result["aos"].push_back({{"block", B},
                             {"pattern_gbps", gp},
                             {"adamw_params_per_s", n / ta.best},
                             {"adamw_gbps", ga},
                             {"pattern_frac_of_triad_write_allocate", gp / triad_wa},
                             {"adamw_frac_of_triad_write_allocate", ga / triad_wa}});
  }

  // 3. ztrain's CPU AdamW.
  zt::AdamWParams hp;
  hp.lr = 1e-4;
  hp.weight_decay = 0.1;
  result["adamw"] = nlohmann::json::array();
  for (const std::string& isa : isa_list) {
    zt::adamw_set_cpu_isa(isa);
    const std::string picked = zt::adamw_cpu_isa();
    for (const std::string& gt : grad_list)
    for (const std::string& c : copy_list) {
      int64_t step = 0;
      const double bytes = (c == "none" ? 28.0 : 30.0) - (gt == "bf16" ? 2.0 : 0.0);
      const int64_t piece = tile > 0 ? tile : n;
      const Timing t = time_rounds(rounds, [&](int) {
        ++step;
        for (int64_t o = 0; o < n; o += piece) adamw_at(s, o, std::min(piece, n - o), c, hp, step, gt);
      });
      const double gbps = bytes * n / t.best * gb;
      std::printf("adamw %-7s %-4s grad %-4s: %8.3f s best, %8.3f s mean, %7.3f Gparam/s, %7.1f GB/s (%2.0f B/param), %5.1f%% of triad+WA\n",
                  picked.c_str(), c.c_str(), gt.c_str(), t.best, t.mean, n / t.best * 1e-9, gbps, bytes,
                  100.0 * gbps / triad_wa);
      std::fflush(stdout);
      result["adamw"].push_back({{"isa", picked},
                                 {"copy", c},
                                 {"grad", gt},
                                 {"best_s", t.best},
                                 {"mean_s", t.mean},
                                 {"params_per_s", n / t.best},
                                 {"params_per_s_mean", n / t.mean},
                                 {"gbps", gbps},
                                 {"bytes_per_param", bytes},
                                 {"frac_of_triad_write_allocate", gbps / triad_wa},
                                 {"frac_of_triad_stream", gbps / triad_stream}});
    }
  }

  // 4. The arithmetic ceiling: in one parallel region each thread updates its
  //    own 16Ki-parameter slice (256 KiB of fp32 state, L2-resident) again and
  //    again; below the AdamW's parallel threshold each call runs serially in
  //    its thread, so no fork or join is timed. Each thread keeps its fastest
  //    call (robust to a thread losing its core for a while); the ceiling is
  //    the sum of the threads' rates.
  const int64_t per = 16384;
  const int reps = 1000;
  State c(per * threads, stagger, pages == "huge");
  init_state(c, per * threads);
  result["adamw_in_cache"] = nlohmann::json::array();
  for (const std::string& isa : isa_list) {
    zt::adamw_set_cpu_isa(isa);
    const std::string picked = zt::adamw_cpu_isa();
    for (const std::string& cp : copy_list) {
      std::vector<double> best(static_cast<size_t>(threads), 1e300);
#pragma omp parallel
      {
        const int id = omp_get_thread_num();
        double mine = 1e300;
        for (int r = 1; r <= reps; ++r) {
          const double t0 = now();
          adamw_at(c, per * id, per, cp, hp, r);
          mine = std::min(mine, now() - t0);
        }
        best[static_cast<size_t>(id)] = mine;
      }
      double rate = 0.0;
      for (const double b : best) rate += static_cast<double>(per) / b;
      std::printf("in-cache %-7s %-4s: %7.3f Gparam/s (%6.3f per thread), the arithmetic ceiling\n",
                  picked.c_str(), cp.c_str(), rate * 1e-9, rate * 1e-9 / threads);
      std::fflush(stdout);
      result["adamw_in_cache"].push_back({{"isa", picked},
                                          {"copy", cp},
                                          {"params_per_thread", per},
                                          {"params_per_s", rate},
                                          {"params_per_s_per_thread", rate / threads}});
    }
  }
  zt::adamw_set_cpu_isa("");
  std::printf("RESULT %s\n", result.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const po::error& e) {
    std::fprintf(stderr, "zbench_host: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "zbench_host: %s\n", e.what());
    return 2;
  } catch (const zt::UserError& e) {
    std::fprintf(stderr, "zbench_host: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zbench_host: %s\n", e.what());
    return 1;
  }
}
