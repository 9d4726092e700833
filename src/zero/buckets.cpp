#include "zero/buckets.hpp"

#include <algorithm>
#include <cstring>

namespace zt {

void PendingCollective::finish() {
  wait(request);
  if (accumulate_into != nullptr) {
    const float* src = staging.as<float>();
    for (int64_t i = 0; i < count; ++i) accumulate_into[i] += src[i];
  }
  if (unpack_into != nullptr) {
    const size_t es = dtype_size(dtype);
    const char* src = staging.as<char>();
    char* dst = static_cast<char*>(unpack_into);
    for (int r = 0; r < dp; ++r)
      std::memcpy(dst + static_cast<size_t>(r * unpack_stride) * es, src + static_cast<size_t>(r * count) * es,
                  static_cast<size_t>(count) * es);
  }
  staging.reset();
}

void finish_all(std::vector<PendingCollective>& pending) {
  for (PendingCollective& p : pending) p.finish();
  pending.clear();
}

void reduce_scatter_unit(Communicator& comm, Device& dev, const float* full, float* shard, int64_t S,
                         int64_t bucket_elems, std::vector<PendingCollective>& out) {
  const int dp = comm.size();
  const int rank = comm.rank();
  const int64_t piece = std::max<int64_t>(1, std::min<int64_t>(S, bucket_elems / dp));
  for (int64_t k = 0; k < S; k += piece) {
    const int64_t c = std::min(piece, S - k);
    PendingCollective p;
    p.count = c;
    p.accumulate_into = shard + k;
    p.staging = Buffer(dev, DType::f32, Shape{c}, MemTag::comm);
    if (c == S) {  // the whole unit in one call, straight from its buffer
      p.request = comm.reduce_scatter(Tensor(const_cast<float*>(full), DType::f32, Shape{dp * S}),
                                      p.staging.tensor(), ReduceOp::sum);
      out.push_back(std::move(p));
      continue;
    }
    Buffer packed(dev, DType::f32, Shape{dp * c}, MemTag::comm);
    for (int r = 0; r < dp; ++r) std::memcpy(packed.as<float>() + r * c, full + r * S + k, c * sizeof(float));
    p.request = comm.reduce_scatter(packed.tensor(), p.staging.tensor(), ReduceOp::sum);
    // MPI reads `packed` until completion: finish this piece before freeing it.
    p.finish();
    (void)rank;
  }
}

void all_gather_unit(Communicator& comm, Device& dev, const void* shard, void* full, int64_t S, DType dtype,
                     int64_t bucket_elems, std::vector<PendingCollective>& out) {
  const int dp = comm.size();
  const size_t es = dtype_size(dtype);
  const int64_t piece = std::max<int64_t>(1, std::min<int64_t>(S, bucket_elems / dp));
  for (int64_t k = 0; k < S; k += piece) {
    const int64_t c = std::min(piece, S - k);
    PendingCollective p;
    const Tensor in(const_cast<char*>(static_cast<const char*>(shard)) + static_cast<size_t>(k) * es, dtype, Shape{c});
    if (c == S) {
      p.request = comm.all_gather(in, Tensor(full, dtype, Shape{dp * S}));
      out.push_back(std::move(p));
      continue;
    }
    p.staging = Buffer(dev, dtype, Shape{dp * c}, MemTag::comm);
    p.count = c;
    p.dtype = dtype;
    p.dp = dp;
    p.unpack_stride = S;
    p.unpack_into = static_cast<char*>(full) + static_cast<size_t>(k) * es;
    p.request = comm.all_gather(in, p.staging.tensor());
    out.push_back(std::move(p));
  }
}

}  // namespace zt
