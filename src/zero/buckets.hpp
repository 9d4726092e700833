// Bucketed reduce-scatter and all-gather of one unit's flat buffer.
//
// [Note: buckets inside a unit] A unit's padded flat buffer is dp blocks of S
// elements, block r owned by rank r, which is exactly the layout of
// reduce_scatter's input and all_gather's output, so a unit that fits in a
// bucket moves with one call and no copy. A unit larger than the bucket is cut
// into pieces of c = bucket/dp elements of every rank's block; a piece's
// elements are strided in the unit buffer, so they are packed into (or
// unpacked from) a contiguous staging buffer of dp*c elements. A bucket never
// spans two units.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.hpp"
#include "modules/kernels.hpp"
#include "runtime/device.hpp"

namespace zt {

// One collective in flight with the buffers it needs until it completes.
class GradLanding;

struct PendingCollective {
  Kernels* kernels = nullptr;  // adds and copies on the buffers' device
  Device* dev = nullptr;       // the buffers' device (for a bf16 landing's rounded copy)
  CommRequest request;
  Buffer staging;       // packed input/output of a piece, or the shard-sized output
  void* accumulate_into = nullptr;  // reduce-scatter: add `staging` (count fp32 elements) here
  // [Note: gradients on the host]: accumulate_into is host memory, and the
  // piece lands there through `landing` instead, in `land_dtype` (bf16:
  // rounded on the device first, [Note: bf16 gradients on the host]).
  GradLanding* landing = nullptr;
  DType land_dtype = DType::f32;
  // With landing: device memory (count floats) added into `staging` before
  // it lands (offload.grad_accumulation "device": the earlier micro-batches).
  const float* pre_add = nullptr;
  // With landing: device memory (one double) the piece's sum of squares is
  // added to before it lands ([Note: norm on the device] in zero_engine.hpp).
  double* sq_into = nullptr;
  // With landing, for a piece that is added on the host: host memory that
  // receives the sum of squares after the add (GradLanding::land), in
  // `host_sq_parts` parts.
  double* host_sq_into = nullptr;
  int host_sq_parts = 1;
  int64_t count = 0;
  // all-gather of a piece: unpack `staging` into dp strided blocks.
  void* unpack_into = nullptr;
  int64_t unpack_stride = 0;  // elements between rank blocks (S)
  DType dtype = DType::f32;
  int dp = 1;
  void finish();  // waits, then accumulates or unpacks
  bool test() { return !request || request->test(); }
};

// Reduce-scatter (sum) the fp32 unit buffer `full` (dp*S elements) and add the
// result for this rank into `shard` (S fp32 elements). Appends the calls it
// issued. With `landing`, `shard` is host memory of S `shard_dtype` elements
// and the pieces land there ([Note: gradients on the host]; bf16: [Note:
// bf16 gradients on the host], whose sums of squares are those of the
// rounded values); `pre_add` (S device floats), when given,
// is added to each piece before it lands. With `sq_into` (one device double)
// and the shard reduced in one piece, the piece's sum of squares is added
// there before it lands; with `host_sq_into` (one host double; a piece that
// lands on values already there) and one piece, the landing's add writes
// there the sum of squares of the shard after it (the bits of
// CpuKernels::sum_squares called from this thread, [Note: host sums of
// squares] in modules/cpu_kernels.hpp). Returns whether either was taken.
bool reduce_scatter_unit(Communicator& comm, Device& dev, Kernels& k, const float* full, void* shard, int64_t S,
                         int64_t bucket_elems, std::vector<PendingCollective>& out, GradLanding* landing = nullptr,
                         const float* pre_add = nullptr, double* sq_into = nullptr, double* host_sq_into = nullptr,
                         DType shard_dtype = DType::f32);

// All-gather every rank's `shard` (S elements of `dtype`) into `full` (dp*S).
void all_gather_unit(Communicator& comm, Device& dev, Kernels& k, const void* shard, void* full, int64_t S, DType dtype,
                     int64_t bucket_elems, std::vector<PendingCollective>& out);

void finish_all(std::vector<PendingCollective>& pending);

}  // namespace zt
