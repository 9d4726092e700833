// zbench: bus bandwidth of the device communicators, as nccl-tests measure it.
//
//   NCCL_NVLS_ENABLE=0 mpirun -np N zbench [--backend nccl|mpi|auto]
//       [--min-bytes 1M] [--max-bytes 1G] [--factor 2] [--iters 20]
//       [--warmup 5] [--dtype f32|bf16] [--ops all_reduce,reduce_scatter,all_gather]
//       [--check 0|1]
//
// One rank per GPU for nccl (the GPU is picked by node-local rank); the mpi
// backend stages through pinned host memory and lets several ranks share a
// GPU. NVLink multicast (NVLS) stays off: zbench sets NCCL_NVLS_ENABLE=0
// unless the environment already sets it (NCCL_NVLS_ENABLE=1 to measure it).
// On shared multi-GPU hosts keep it off: a program using multicast can put the
// host's GPUs out of service.
//
// [Note: bus bandwidth] For a size S in bytes (the whole buffer: all_reduce's
// buffer, reduce_scatter's input, all_gather's output) and time t per call,
// algbw = S / t, and busbw = algbw * 2(n-1)/n for all_reduce and
// algbw * (n-1)/n for reduce_scatter and all_gather: the bytes each rank puts
// on its busiest link, comparable with the hardware's link bandwidth whatever
// n is. t is the slowest rank's mean over --iters calls, timed with CUDA events
// on the compute stream, each call followed by its handle's wait().
#include <boost/program_options.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <vector>

#include "comm/device_comm.hpp"
#include "runtime/cuda/cuda_device.hpp"
#include "comm/topology.hpp"

namespace po = boost::program_options;
using namespace zt;

namespace {

struct Options {
  std::string backend = "nccl";
  std::string min_bytes = "1M", max_bytes = "1G";
  int factor = 2;
  int iters = 20;
  int warmup = 5;
  std::string dtype = "f32";
  std::string ops = "all_reduce,reduce_scatter,all_gather";
  int check = 1;
};

// "64", "64K", "1M", "1G" (powers of 1024, as nccl-tests read them), the
// value of option `flag`.
size_t parse_bytes(const char* flag, const std::string& s) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    ZT_USER_ERROR(flag, ": size '", s, "': expected a number with an optional K, M or G suffix");
  }
  const std::string suffix = s.substr(pos);
  double mult = 1;
  if (suffix == "K" || suffix == "k") mult = 1024.0;
  else if (suffix == "M" || suffix == "m") mult = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g") mult = 1024.0 * 1024 * 1024;
  else if (!suffix.empty()) ZT_USER_ERROR(flag, ": size '", s, "': unknown suffix '", suffix, "'");
  if (!(v > 0) || !std::isfinite(v)) ZT_USER_ERROR(flag, ": size '", s, "' must be a positive number");
  const double bytes = v * mult;
  if (bytes < 1 || bytes > 1e15) ZT_USER_ERROR(flag, ": size '", s, "': expected 1 byte to 1 PB");
  return static_cast<size_t>(bytes);
}

std::vector<CommOp> parse_ops(const std::string& list) {
  std::vector<CommOp> ops;
  if (list.empty()) ZT_USER_ERROR("--ops: expected a comma list of all_reduce, reduce_scatter, all_gather");
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name == "all_reduce") ops.push_back(CommOp::all_reduce);
    else if (name == "reduce_scatter") ops.push_back(CommOp::reduce_scatter);
    else if (name == "all_gather") ops.push_back(CommOp::all_gather);
    else ZT_USER_ERROR("--ops: unknown collective '", name, "' (all_reduce, reduce_scatter, all_gather)");
  }
  return ops;
}

double bus_factor(CommOp op, int n) {
  return op == CommOp::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

class Bench {
 public:
  Bench(DeviceCommunicator& comm, cudaStream_t stream, DType dtype, size_t max_bytes)
      : comm_(comm), stream_(stream), dtype_(dtype), es_(dtype_size(dtype)) {
    ZT_CUDA_CHECK(cudaMalloc(&in_, max_bytes));
    ZT_CUDA_CHECK(cudaMalloc(&out_, max_bytes));
    ZT_CUDA_CHECK(cudaEventCreate(&start_));
    ZT_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Bench() {
    cudaFree(in_);
    cudaFree(out_);
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }

  // Elements per rank-block for `bytes` of the whole buffer (0: too small).
  size_t block_count(CommOp op, size_t bytes) const {
    const size_t n = static_cast<size_t>(comm_.size());
    return op == CommOp::all_reduce ? bytes / es_ : bytes / (es_ * n);
  }
  size_t total_bytes(CommOp op, size_t count) const {
    return op == CommOp::all_reduce ? count * es_ : count * es_ * comm_.size();
  }

  CommRequest issue(CommOp op, size_t count) {
    const int64_t c = static_cast<int64_t>(count), full = c * comm_.size();
    switch (op) {
      case CommOp::all_reduce: return comm_.all_reduce(tensor(in_, c), ReduceOp::sum);
      case CommOp::reduce_scatter: return comm_.reduce_scatter(tensor(in_, full), tensor(out_, c), ReduceOp::sum);
      default: return comm_.all_gather(tensor(in_, c), tensor(out_, full));
    }
  }

  // Seconds per call on the slowest rank.
  double time(CommOp op, size_t count, int warmup, int iters) {
    for (int i = 0; i < warmup; ++i) {
      CommRequest r = issue(op, count);
      wait(r);
    }
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    comm_.barrier();
    ZT_CUDA_CHECK(cudaEventRecord(start_, stream_));
    for (int i = 0; i < iters; ++i) {
      CommRequest r = issue(op, count);
      wait(r);
    }
    ZT_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    ZT_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return all_reduce_scalar(comm_, ms * 1e-3 / iters, ReduceOp::max);
  }

  // One call on data = rank + 1; returns the number of wrong elements summed
  // over ranks (small integers, exact in f32 and bf16).
  int64_t check(CommOp op, size_t count) {
    const int n = comm_.size(), r = comm_.rank();
    const size_t in_count = op == CommOp::reduce_scatter ? count * n : count;
    const size_t out_count = op == CommOp::all_gather ? count * n : count;
    std::vector<float> v(in_count, static_cast<float>(r + 1));
    std::vector<char> host(std::max(in_count, out_count) * es_);
    convert(v.data(), DType::f32, host.data(), dtype_, in_count);
    ZT_CUDA_CHECK(cudaMemcpyAsync(in_, host.data(), in_count * es_, cudaMemcpyHostToDevice, stream_));
    CommRequest req = issue(op, count);
    wait(req);
    void* result = op == CommOp::all_reduce ? in_ : out_;
    ZT_CUDA_CHECK(cudaMemcpyAsync(host.data(), result, out_count * es_, cudaMemcpyDeviceToHost, stream_));
    ZT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    v.resize(out_count);
    convert(host.data(), dtype_, v.data(), DType::f32, out_count);
    int64_t wrong = 0;
    for (size_t i = 0; i < out_count; ++i) {
      const float expect = op == CommOp::all_gather ? static_cast<float>(i / count + 1) : n * (n + 1) / 2.0f;
      wrong += v[i] != expect;
    }
    return static_cast<int64_t>(all_reduce_scalar(comm_, static_cast<double>(wrong)));
  }

 private:
  Tensor tensor(void* p, int64_t n) const { return Tensor(p, dtype_, Shape{n}, DeviceKind::cuda); }
  DeviceCommunicator& comm_;
  cudaStream_t stream_;
  DType dtype_;
  size_t es_;
  void* in_ = nullptr;
  void* out_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

int run(const Options& o) {
  const size_t min_bytes = parse_bytes("--min-bytes", o.min_bytes), max_bytes = parse_bytes("--max-bytes", o.max_bytes);
  if (min_bytes > max_bytes) ZT_USER_ERROR("--min-bytes exceeds --max-bytes");
  if (o.factor < 2) ZT_USER_ERROR("--factor must be at least 2");
  if (o.check != 0 && o.check != 1) ZT_USER_ERROR("--check: expected 0 or 1, found ", o.check);
  if (o.iters < 1 || o.warmup < 0) ZT_USER_ERROR("--iters must be >= 1 and --warmup >= 0");
  if (o.dtype != "f32" && o.dtype != "bf16") ZT_USER_ERROR("--dtype: expected f32 or bf16, found '", o.dtype, "'");
  const DType dtype = dtype_from_name(o.dtype);
  const std::vector<CommOp> ops = parse_ops(o.ops);

  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // before NCCL reads it
  Topology topo(1);
  const int gpu = select_cuda_device(topo.local_rank());
  cudaStream_t stream = nullptr;
  ZT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    std::unique_ptr<DeviceCommunicator> comm = make_device_communicator(topo.world_mpi(), o.backend, stream);
    Bench bench(*comm, stream, dtype, max_bytes);
    const int n = comm->size();
    const bool lead = comm->rank() == 0;
    if (lead) {
      std::printf("# zbench: backend %s, %d ranks (%d per node), dtype %s, warmup %d, iters %d, GPU %d on rank 0, "
                  "NCCL_NVLS_ENABLE=%s\n",
                  comm->backend(), n, topo.local_size(), dtype_name(dtype), o.warmup, o.iters, gpu,
                  std::getenv("NCCL_NVLS_ENABLE"));
      std::printf("# %-15s %14s %12s %12s %12s %12s %8s\n", "op", "size(B)", "count", "time(us)", "algbw(GB/s)",
                  "busbw(GB/s)", "#wrong");
    }
    for (CommOp op : ops) {
      double busbw_sum = 0;
      int rows = 0;
      for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= static_cast<size_t>(o.factor)) {
        const size_t count = bench.block_count(op, bytes);
        if (count == 0) continue;
        const size_t size = bench.total_bytes(op, count);
        const int64_t wrong = o.check ? bench.check(op, count) : -1;
        const double t = bench.time(op, count, o.warmup, o.iters);
        const double algbw = static_cast<double>(size) / t * 1e-9, busbw = algbw * bus_factor(op, n);
        busbw_sum += busbw;
        ++rows;
        if (lead) {
          std::printf("  %-15s %14zu %12zu %12.1f %12.2f %12.2f %8s\n", comm_op_name(op), size, count, t * 1e6, algbw,
                      busbw, o.check ? std::to_string(wrong).c_str() : "-");
          std::fflush(stdout);
        }
      }
      if (lead && rows > 0) std::printf("# %s: average busbw %.2f GB/s\n", comm_op_name(op), busbw_sum / rows);
    }
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession mpi(&argc, &argv);
  Options o;
  po::options_description desc("zbench options");
  desc.add_options()("help,h", "show this help")(
      "backend", po::value(&o.backend)->default_value(o.backend), "nccl, mpi (host-staged) or auto")(
      "min-bytes", po::value(&o.min_bytes)->default_value(o.min_bytes), "smallest buffer (suffix K, M, G)")(
      "max-bytes", po::value(&o.max_bytes)->default_value(o.max_bytes), "largest buffer (suffix K, M, G)")(
      "factor", po::value(&o.factor)->default_value(o.factor), "size multiplier between rows (2 or 4)")(
      "iters", po::value(&o.iters)->default_value(o.iters), "timed calls per size")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed calls per size")(
      "dtype", po::value(&o.dtype)->default_value(o.dtype), "f32 or bf16")(
      "ops", po::value(&o.ops)->default_value(o.ops), "comma-separated collectives")(
      "check", po::value(&o.check)->default_value(o.check), "validate one call per size (0 or 1)");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      if (mpi.world_rank() == 0) std::cout << desc << "\n";
      return 0;
    }
    return run(o);
  } catch (const po::error& e) {
    if (mpi.world_rank() == 0) std::cerr << "zbench: " << e.what() << "\n" << desc << "\n";
    return 2;
  } catch (const UserError& e) {
    if (mpi.world_rank() == 0) std::cerr << "zbench: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zbench: " << e.what() << std::endl;
    abort_job(1);
  }
}
