#include "zero/buckets.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "modules/cpu_kernels.hpp"
#include "zero/grad_landing.hpp"

namespace zt {

void PendingCollective::finish() {
  wait(request);
  if (landing != nullptr) {
    if (pre_add != nullptr) {  // staging = this micro-batch + the earlier ones (float adds commute: the host's bits)
      const Tensor s = staging.tensor();
      kernels->add(s, s, Tensor(const_cast<float*>(pre_add), DType::f32, Shape{count}, s.device));
    }
    if (land_dtype != DType::f32) {  // [Note: bf16 gradients on the host]
      Buffer rounded(*dev, land_dtype, Shape{count}, MemTag::comm);
      kernels->cast(rounded.tensor(), staging.tensor());
      staging = std::move(rounded);
    }
    if (sq_into != nullptr) kernels->sum_squares(staging.tensor(), Tensor(sq_into, DType::f64, Shape{1}, staging.tensor().device));
    landing->land(accumulate_into, std::move(staging), count, host_sq_into, host_sq_parts);
    return;
  }
  const DeviceKind where = staging.tensor().device;
  if (accumulate_into != nullptr) {
    const Tensor acc(accumulate_into, DType::f32, Shape{count}, where);
    kernels->add(acc, acc, staging.tensor());
  }
  if (unpack_into != nullptr) {
    const size_t es = dtype_size(dtype);
    for (int r = 0; r < dp; ++r)
      kernels->cast(Tensor(static_cast<char*>(unpack_into) + static_cast<size_t>(r * unpack_stride) * es, dtype,
                           Shape{count}, where),
                    Tensor(staging.as<char>() + static_cast<size_t>(r * count) * es, dtype, Shape{count}, where));
  }
  staging.reset();
}

void finish_all(std::vector<PendingCollective>& pending) {
  for (PendingCollective& p : pending) p.finish();
  pending.clear();
}

bool reduce_scatter_unit(Communicator& comm, Device& dev, Kernels& k, const float* full, void* shard, int64_t S,
                         int64_t bucket_elems, std::vector<PendingCollective>& out, GradLanding* landing,
                         const float* pre_add, double* sq_into, double* host_sq_into, DType shard_dtype) {
  ZT_CHECK(shard_dtype == DType::f32 || landing != nullptr, "a reduce-scatter adds into an fp32 shard on the device, not ",
           dtype_name(shard_dtype));
  const size_t shard_es = dtype_size(shard_dtype);
  const int dp = comm.size();
  if (dp == 1 && landing == nullptr) {
    // One rank's reduction is its own gradient: added into the shard as
    // finish() would add the staging copy ([Note: one-rank group] in
    // comm/nccl_communicator.cpp), without the copy.
    const Tensor acc(shard, DType::f32, Shape{S}, dev.kind());
    k.add(acc, acc, Tensor(const_cast<float*>(full), DType::f32, Shape{S}, dev.kind()));
    return false;
  }
  const int64_t piece = std::max<int64_t>(1, std::min<int64_t>(S, bucket_elems / dp));
  const bool whole = piece >= S && landing != nullptr && (sq_into != nullptr || host_sq_into != nullptr);
  for (int64_t off = 0; off < S; off += piece) {
    const int64_t c = std::min(piece, S - off);
    PendingCollective p;
    p.kernels = &k;
    p.dev = &dev;
    p.count = c;
    p.accumulate_into = static_cast<char*>(shard) + static_cast<size_t>(off) * shard_es;
    p.landing = landing;
    p.land_dtype = shard_dtype;
    p.pre_add = pre_add == nullptr ? nullptr : pre_add + off;
    p.staging = Buffer(dev, DType::f32, Shape{c}, MemTag::comm);
    if (whole) {
      p.sq_into = sq_into;
      p.host_sq_into = host_sq_into;
      if (host_sq_into != nullptr) p.host_sq_parts = sum_squares_parts(S);
    }
    if (c == S) {  // the whole unit in one call, straight from its buffer
      p.request = comm.reduce_scatter(Tensor(const_cast<float*>(full), DType::f32, Shape{dp * S}, dev.kind()),
                                      p.staging.tensor(), ReduceOp::sum);
      out.push_back(std::move(p));
      continue;
    }
    Buffer packed(dev, DType::f32, Shape{dp * c}, MemTag::comm);
    for (int r = 0; r < dp; ++r)
      k.cast(Tensor(packed.as<float>() + r * c, DType::f32, Shape{c}, dev.kind()),
             Tensor(const_cast<float*>(full) + r * S + off, DType::f32, Shape{c}, dev.kind()));
    p.request = comm.reduce_scatter(packed.tensor(), p.staging.tensor(), ReduceOp::sum);
    // The collective reads `packed` until completion: finish this piece
    // before freeing it.
    p.finish();
  }
  return whole;
}

void all_gather_unit(Communicator& comm, Device& dev, Kernels& k, const void* shard, void* full, int64_t S, DType dtype,
                     int64_t bucket_elems, std::vector<PendingCollective>& out) {
  const int dp = comm.size();
  const size_t es = dtype_size(dtype);
  const int64_t piece = std::max<int64_t>(1, std::min<int64_t>(S, bucket_elems / dp));
  for (int64_t off = 0; off < S; off += piece) {
    const int64_t c = std::min(piece, S - off);
    PendingCollective p;
    p.kernels = &k;
    const Tensor in(const_cast<char*>(static_cast<const char*>(shard)) + static_cast<size_t>(off) * es, dtype,
                    Shape{c}, dev.kind());
    if (c == S) {
      p.request = comm.all_gather(in, Tensor(full, dtype, Shape{dp * S}, dev.kind()));
      out.push_back(std::move(p));
      continue;
    }
    p.staging = Buffer(dev, dtype, Shape{dp * c}, MemTag::comm);
    p.count = c;
    p.dtype = dtype;
    p.dp = dp;
    p.unpack_stride = S;
    p.unpack_into = static_cast<char*>(full) + static_cast<size_t>(off) * es;
    p.request = comm.all_gather(in, p.staging.tensor());
    // One piece in flight at a time, so staging stays one bucket.
    p.finish();
  }
}

}  // namespace zt
