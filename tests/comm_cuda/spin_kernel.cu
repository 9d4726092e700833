// A kernel that keeps a stream busy for a while, so tests can tell whether
// work queued behind it is really ordered after it.
#include <cuda_runtime.h>

namespace {
__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
}  // namespace

void spin_on_stream(cudaStream_t stream, long long cycles) { spin_kernel<<<1, 1, 0, stream>>>(cycles); }

namespace {
__global__ void spin_grid_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
}  // namespace

// `blocks` blocks of 128 threads, each spinning for `cycles` clocks: a kernel
// that occupies the whole device, as a training step's kernels do.
void spin_grid_on_stream(cudaStream_t stream, long long cycles, int blocks) {
  spin_grid_kernel<<<blocks, 128, 0, stream>>>(cycles);
}
