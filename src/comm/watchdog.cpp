#include "comm/watchdog.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "comm/flight_recorder.hpp"
#include "core/log.hpp"
#include "runtime/host_wait.hpp"

namespace zt {
namespace {

// One datagram: a heartbeat, a goodbye (the sender ends normally) or an end
// of the job (the sender found a hang or failed; every rank dumps and exits).
enum MsgKind : uint32_t { kHeartbeat = 1, kGoodbye = 2, kEnd = 3 };
constexpr uint32_t kMagic = 0x7a77646bu;  // "zwdk"

struct Msg {
  uint32_t magic = kMagic;
  uint32_t kind = 0;
  uint64_t job = 0;  // rank 0's random token: datagrams of another job are ignored
  int32_t rank = -1;
  int32_t exit_code = 0;
  char reason[400] = {};
};

// The address a rank publishes: its host name (peers on the same host use the
// loopback address) and its first non-loopback IPv4 address.
struct Endpoint {
  char host[64] = {};
  uint32_t ip = 0;    // network order
  uint16_t port = 0;  // network order
  int32_t pid = 0;
  uint64_t start_ticks = 0;  // the process's start time (/proc/PID/stat), so a reused pid is never killed
};

std::atomic<bool> g_dump_requested{false};
extern "C" void on_sigusr2(int) { g_dump_requested.store(true); }

class Watchdog;
Watchdog* g_watchdog = nullptr;  // set while running

// The host's waits for its own device ([Note: watched host waits]) in a
// flight recorder of their own, named 'device', which the watchdog polls
// with the communicators'.
struct ProbeFn final : CompletionProbe {
  explicit ProbeFn(std::function<bool()> f) : done(std::move(f)) {}
  bool started() override { return true; }
  bool completed() override { return done(); }
  std::function<bool()> done;
};

class DeviceWaits final : public host_wait::Watcher {
 public:
  explicit DeviceWaits(int world_rank) : recorder_("device", "device", {world_rank}, 0) {}
  uint64_t begin(const char* what, std::function<bool()> done) override {
    return recorder_.record_wait(what, std::make_shared<ProbeFn>(std::move(done)));
  }
  void end(uint64_t id) override { recorder_.complete(id); }

 private:
  FlightRecorder recorder_;
};
std::atomic<bool> g_in_fatal{false};

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << text << "\n";
    if (!f) throw std::runtime_error("cannot write '" + tmp + "'");
  }
  std::filesystem::rename(tmp, path);
}

// Field 22 of /proc/PID/stat: the process's start time in clock ticks since
// boot (0 when it cannot be read, e.g. the process is gone).
uint64_t start_ticks(int32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(f, stat);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  return 0;
}

uint32_t first_ipv4() {
  ifaddrs* ifs = nullptr;
  uint32_t ip = htonl(INADDR_LOOPBACK);
  if (getifaddrs(&ifs) != 0) return ip;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    ip = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    break;
  }
  freeifaddrs(ifs);
  return ip;
}

class Watchdog {
 public:
  Watchdog(MpiCommunicator& world, const WatchdogOptions& opts)
      : opts_(opts), rank_(world.rank()), size_(world.size()) {
    interval_s_ = std::min(1.0, opts_.timeout_s / 5);
    sock_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ZT_CHECK(sock_ >= 0, "watchdog: socket: ", std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = 0;
    ZT_CHECK(::bind(sock_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, "watchdog: bind: ", std::strerror(errno));
    socklen_t len = sizeof a;
    ZT_CHECK(::getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &len) == 0, "watchdog: getsockname");
    Endpoint me;
    std::snprintf(me.host, sizeof me.host, "%s", process_host().c_str());
    me.ip = first_ipv4();
    me.port = a.sin_port;
    me.pid = static_cast<int32_t>(::getpid());
    me.start_ticks = start_ticks(me.pid);
    std::vector<Endpoint> all(static_cast<size_t>(size_));
    ZT_MPI_CHECK(MPI_Allgather(&me, sizeof me, MPI_BYTE, all.data(), sizeof me, MPI_BYTE, world.comm()));
    if (rank_ == 0) job_ = std::random_device{}() * 0x100000001ull + static_cast<uint64_t>(::getpid());
    ZT_MPI_CHECK(MPI_Bcast(&job_, 1, MPI_UINT64_T, 0, world.comm()));
    for (const Endpoint& e : all) {
      sockaddr_in p{};
      p.sin_family = AF_INET;
      p.sin_port = e.port;
      const bool local = std::strncmp(e.host, me.host, sizeof me.host) == 0;
      p.sin_addr.s_addr = local ? htonl(INADDR_LOOPBACK) : e.ip;
      peers_.push_back(p);
      local_pid_.push_back(local && e.start_ticks != 0 ? e.pid : 0);
      start_ticks_.push_back(e.start_ticks);
    }
    if (size_ > 1) {
      neighbours_.push_back((rank_ + 1) % size_);
      if (size_ > 2) neighbours_.push_back((rank_ + size_ - 1) % size_);
    }
    const double now = flight_clock();
    for (int n : neighbours_) last_seen_[n] = now;
    thread_ = std::thread([this] { loop(); });
  }

  ~Watchdog() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    // Goodbye: the neighbours stop expecting this rank's heartbeat.
    for (int n : neighbours_) send(n, kGoodbye, 0, "");
    ::close(sock_);
  }

  std::string dump(const std::string& reason, const std::vector<int>& suspects, bool try_only = false) {
    std::unique_lock<std::mutex> lock(dump_mu_, std::defer_lock);
    if (try_only ? !lock.try_lock() : (lock.lock(), false)) return "";
    nlohmann::json h;
    h["rank"] = rank_;
    h["world_size"] = size_;
    h["host"] = process_host();
    h["pid"] = static_cast<int64_t>(::getpid());
    h["reason"] = reason;
    h["time"] = flight_clock_epoch() + flight_clock();
    h["timeout_s"] = opts_.timeout_s;
    h["suspects"] = suspects;
    nlohmann::json hb = nlohmann::json::object();
    const double now = flight_clock();
    for (const auto& [n, t] : last_seen_snapshot()) hb[std::to_string(n)] = t < 0 ? -1.0 : now - t;
    h["heartbeat_age_s"] = hb;
    const std::string path = opts_.dump_dir + "/rank_" + std::to_string(rank_) + ".json";
    try {
      std::filesystem::create_directories(opts_.dump_dir);
      write_file_atomically(path, flight_dump_json(h, try_only).dump(1));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ztrain: rank %d: cannot write the flight recorder '%s': %s\n", rank_, path.c_str(),
                   e.what());
      return "";
    }
    return path;
  }

  // Dumps, tells every rank to dump and exit, and waits `grace_s` for them.
  // announce: print the reason (the caller has not printed it already).
  void end_job(const std::string& reason, const std::vector<int>& suspects, int code, double grace_s,
               bool announce, const std::vector<int32_t>& doomed = {}) {
    if (ending_.exchange(true)) return;
    const std::string path = dump(reason, suspects);
    const std::string where = (path.empty() ? std::string("(not written)") : path) + " (zdiag flight " +
                              opts_.dump_dir + ")";
    if (announce)
      std::fprintf(stderr, "ztrain: error on rank %d: %s; flight recorder in %s\n", rank_, reason.c_str(),
                   where.c_str());
    else
      std::fprintf(stderr, "ztrain: rank %d: flight recorder in %s\n", rank_, where.c_str());
    std::fflush(stderr);
    for (int32_t r : doomed) {
      const int32_t pid = local_pid_[static_cast<size_t>(r)];
      if (pid > 0 && start_ticks(pid) == start_ticks_[static_cast<size_t>(r)]) ::kill(pid, SIGKILL);
    }
    tell_all_to_end(reason, code);
    std::this_thread::sleep_for(std::chrono::duration<double>(grace_s));
  }

  void tell_all_to_end(const std::string& reason, int code) {
    const std::string short_reason = "rank " + std::to_string(rank_) + ": " + reason;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) send(r, kEnd, code, short_reason);
  }

  [[noreturn]] void abort_job_now(int code) {
    // The reaper first: ncclCommAbort may free device memory, which waits for
    // the device, and a stalled stream never lets it.
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      std::_Exit(code);
    }).detach();
    for_each_flight_recorder([](FlightRecorder& r) { r.abort_now(); });
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  std::map<int, double> last_seen_snapshot() {
    std::lock_guard<std::mutex> lock(seen_mu_);
    return last_seen_;
  }

  void send(int to, uint32_t kind, int code, const std::string& reason) {
    Msg m;
    m.kind = kind;
    m.job = job_;
    m.rank = rank_;
    m.exit_code = code;
    std::snprintf(m.reason, sizeof m.reason, "%s", reason.c_str());
    const sockaddr_in& p = peers_[static_cast<size_t>(to)];
    ::sendto(sock_, &m, sizeof m, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&p), sizeof p);
  }

  void receive() {
    Msg m;
    for (;;) {
      const ssize_t n = ::recv(sock_, &m, sizeof m, MSG_DONTWAIT);
      if (n < 0) return;
      if (n != static_cast<ssize_t>(sizeof m) || m.magic != kMagic || m.job != job_) continue;
      m.reason[sizeof m.reason - 1] = '\0';
      if (m.kind == kHeartbeat) {
        std::lock_guard<std::mutex> lock(seen_mu_);
        if (auto it = last_seen_.find(m.rank); it != last_seen_.end() && it->second >= 0) it->second = flight_clock();
      } else if (m.kind == kGoodbye) {
        std::lock_guard<std::mutex> lock(seen_mu_);
        if (auto it = last_seen_.find(m.rank); it != last_seen_.end()) it->second = -1;  // no longer expected
      } else if (m.kind == kEnd) {
        if (ending_.exchange(true)) return;
        const std::string path = dump(std::string("ended by ") + m.reason, {});
        std::fprintf(stderr, "ztrain: rank %d: ending with the job (%s); flight recorder in %s\n", rank_, m.reason,
                     path.empty() ? "(not written)" : path.c_str());
        std::fflush(stderr);
        abort_job_now(m.exit_code);
      }
    }
  }

  void loop() {
    double last_sent = -1;
    while (!stop_.load()) {
      pollfd pfd{sock_, POLLIN, 0};
      ::poll(&pfd, 1, 100);
      receive();
      const double now = flight_clock();
      if (g_dump_requested.exchange(false)) {
        const std::string path = dump("SIGUSR2 (on request; the run goes on)", {});
        if (!path.empty()) log_info("flight recorder written to ", path, " (SIGUSR2)");
      }
      if (ending_.load()) continue;
      if (now - last_sent >= interval_s_) {
        for (int n : neighbours_) send(n, kHeartbeat, 0, "");
        last_sent = now;
      }
      std::vector<int> silent;
      double worst = 0;
      for (const auto& [n, t] : last_seen_snapshot())
        if (t >= 0 && now - t > opts_.timeout_s) {
          silent.push_back(n);
          worst = std::max(worst, now - t);
        }
      if (!silent.empty()) {
        std::string who;
        for (int n : silent) who += (who.empty() ? "" : ", ") + std::to_string(n);
        // A silent rank on this host is killed: a stopped process (SIGSTOP, a
        // debugger) ignores everything but SIGKILL, and the launcher may
        // wait long before it sends one (odls_base_sigkill_timeout).
        std::vector<int32_t> doomed;
        for (int n : silent)
          if (local_pid_[static_cast<size_t>(n)] > 0) doomed.push_back(n);
        fail(detail::concat("no heartbeat from rank ", who, " for ", static_cast<int>(worst),
                            " s (comm.timeout = ", opts_.timeout_s, " s): the process stopped or died",
                            local_pid_[static_cast<size_t>(silent[0])] > 0 ? " (killed: it is on this host)" : ""),
             silent, doomed);
      }
      FlightEntry oldest;
      std::string where;
      int peer_world = -1;  // the transfer's peer (or the broadcast's root) in MPI_COMM_WORLD
      double age = 0;
      for_each_flight_recorder([&](FlightRecorder& r) {
        FlightEntry e;
        if (r.poll(&e) && now - e.t_queued > age) {
          age = now - e.t_queued;
          oldest = e;
          where = r.name();
          const auto& members = r.world_ranks();
          peer_world = e.peer >= 0 && e.peer < static_cast<int>(members.size()) ? members[e.peer] : -1;
        }
      });
      if (age > opts_.timeout_s) {
        // Neighbours silent for a few heartbeats are named too: a stopped
        // peer is usually why a collective never ends.
        std::vector<int> quiet;
        std::vector<int32_t> doomed;
        for (const auto& [n, t] : last_seen_snapshot()) {
          if (t < 0 || now - t <= 3 * interval_s_ + 0.5) continue;
          quiet.push_back(n);
          // Silent for half the timeout: stopped or dead; see the heartbeat case.
          if (now - t > opts_.timeout_s / 2 && local_pid_[static_cast<size_t>(n)] > 0) doomed.push_back(n);
        }
        const std::string ctx = detail::concat(
            " at step ", oldest.ctx.step, ", phase ", run_phase_name(oldest.ctx.phase),
            oldest.ctx.instr ? ", instruction " + format_instr(oldest.ctx) : std::string());
        if (oldest.op == CommOp::device_wait)
          fail(detail::concat("this rank has waited ", static_cast<int>(age), " s for its device (",
                              oldest.what ? oldest.what : "?", "; comm.timeout = ", opts_.timeout_s, " s)", ctx,
                              ": a kernel or a copy on the device does not finish (a stuck GPU or stream)"),
               {}, {});
        const std::string what =
            oldest.seq >= 0 ? detail::concat("collective #", oldest.seq, " ", comm_op_name(oldest.op))
                            : detail::concat(comm_op_name(oldest.op), " #", oldest.p2p_seq,
                                             oldest.op == CommOp::send ? " to" : " from", " rank ", peer_world);
        fail(detail::concat(what, " (", oldest.count, " x ", dtype_name(oldest.dtype), ") on communicator '", where,
                            "' has not completed after ", static_cast<int>(age), " s (comm.timeout = ",
                            opts_.timeout_s, " s)", ctx),
             quiet, doomed);
      }
    }
  }

  // doomed: silent ranks on this host, killed once the reason is out.
  [[noreturn]] void fail(const std::string& reason, const std::vector<int>& suspects,
                         const std::vector<int32_t>& doomed) {
    end_job(reason, suspects, kExitHang, 2.0, /*announce=*/true, doomed);
    abort_job_now(kExitHang);
  }

  WatchdogOptions opts_;
  int rank_, size_;
  double interval_s_ = 1;
  int sock_ = -1;
  uint64_t job_ = 0;
  std::vector<sockaddr_in> peers_;
  std::vector<int32_t> local_pid_;     // per rank: its pid when on this host, else 0
  std::vector<uint64_t> start_ticks_;  // per rank: its process's start time
  std::vector<int> neighbours_;
  std::mutex seen_mu_;
  std::map<int, double> last_seen_;  // neighbour -> flight_clock() of its last heartbeat; -1 after goodbye
  std::mutex dump_mu_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> ending_{false};
  std::thread thread_;
};

std::unique_ptr<Watchdog>& instance() {
  static std::unique_ptr<Watchdog> w;
  return w;
}

// Best effort (see [Note: watchdog]): this rank's dump, then every other rank
// is told to write its own and exit 1, so a crash in a desynchronised
// collective leaves every side's sequence behind.
extern "C" void on_fatal_signal(int sig) {
  if (!g_in_fatal.exchange(true) && g_watchdog != nullptr) {
    const std::string reason = std::string("fatal signal ") + strsignal(sig);
    g_watchdog->dump(reason, {}, /*try_only=*/true);
    g_watchdog->tell_all_to_end(reason, 1);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void start_watchdog(MpiCommunicator& world, const WatchdogOptions& opts) {
  if (instance()) return;
  instance() = std::make_unique<Watchdog>(world, opts);
  g_watchdog = instance().get();
  // Never destroyed: a wait may still be in its scope when the watchdog stops.
  static DeviceWaits* device_waits = new DeviceWaits(world.rank());
  host_wait::install(device_waits);
  struct sigaction sa {};
  sa.sa_handler = on_sigusr2;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, nullptr);
  struct sigaction fatal {};
  fatal.sa_handler = on_fatal_signal;
  sigemptyset(&fatal.sa_mask);
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGILL}) sigaction(sig, &fatal, nullptr);
}

void stop_watchdog() {
  g_watchdog = nullptr;
  instance().reset();
}

std::string write_flight_dump(const std::string& reason) {
  return instance() ? instance()->dump(reason, {}) : std::string();
}

void flight_dump_job(const std::string& reason, int exit_code) {
  if (instance()) instance()->end_job(reason, {}, exit_code, 2.0, /*announce=*/false);
}

}  // namespace zt
