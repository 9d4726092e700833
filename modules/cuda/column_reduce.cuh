// Deterministic column sums over the rows of a (rows, cols) matrix, for
// bias and LayerNorm parameter gradients, without atomics.
//
// [Note: deterministic column sums] Rows are cut into chunks of a size that
// depends on the row count alone (never on the GPU), a block of 32 x 8
// threads sums 32 columns of one chunk (thread row ty takes rows ty, ty+8,
// ... of the chunk, then the 8 partial sums are added in order), and a second
// kernel adds the chunks' partial sums in chunk order into the destination.
// The result is the same on every run and on every GPU. Reads are coalesced:
// a warp reads 32 consecutive values of one row.
#pragma once

#include <algorithm>

#include "modules/cuda/common.cuh"

namespace zt::cuda {

struct ColumnChunks {
  int64_t rows_per_chunk;
  int64_t chunks;
};

inline ColumnChunks column_chunks(int64_t rows) {
  int64_t r = std::max<int64_t>(64, (rows + 1023) / 1024);  // at most 1024 chunks
  r = (r + 7) / 8 * 8;
  return {r, rows <= 0 ? 0 : (rows + r - 1) / r};
}

// Floats of partial sums needed for kOut outputs of `cols` columns.
inline size_t column_partials_floats(int kOut, int64_t rows, int64_t cols) {
  return static_cast<size_t>(kOut) * static_cast<size_t>(column_chunks(rows).chunks) * static_cast<size_t>(cols);
}

// load(r, c, v) sets v[k] to output k's value at row r, column c.
template <int kOut, typename Load>
__global__ void column_partials_kernel(Load load, float* partial, int64_t rows, int64_t cols,
                                       int64_t rows_per_chunk) {
  __shared__ float sh[kOut][8][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(r0 + rows_per_chunk, rows);
  float acc[kOut] = {};
  if (c < cols) {
    for (int64_t r = r0 + ty; r < r1; r += 8) {
      float v[kOut];
      load(r, c, v);
#pragma unroll
      for (int k = 0; k < kOut; ++k) acc[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < kOut; ++k) sh[k][ty][tx] = acc[k];
  __syncthreads();
  if (ty == 0 && c < cols) {
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      float s = sh[k][0][tx];
      for (int j = 1; j < 8; ++j) s += sh[k][j][tx];
      partial[(static_cast<int64_t>(k) * gridDim.y + blockIdx.y) * cols + c] = s;
    }
  }
}

// dst_k[c] += sum over chunks of partial[k][chunk][c], in chunk order: one
// thread per (column, output). The loads of kAhead chunks are issued before
// their adds, which keep the chunk order (so the bits do not depend on
// kAhead): a thread walks up to 1024 chunks, and one dependent load at a time
// made this kernel most of a bias gradient's time (one L2 round trip per
// chunk, about 50 us for 256 chunks).
template <int kOut>
__global__ void __launch_bounds__(64) column_finish_kernel(float* dst0, float* dst1, const float* partial,
                                                           int64_t chunks, int64_t cols) {
  constexpr int kAhead = 16;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int k = static_cast<int>(blockIdx.y);
  if (c >= cols || k >= kOut) return;
  const float* p = partial + static_cast<int64_t>(k) * chunks * cols + c;
  float s = 0.0f;
  int64_t y = 0;
  for (; y + kAhead <= chunks; y += kAhead) {
    float v[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) v[j] = p[(y + j) * cols];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) s += v[j];
  }
  for (; y < chunks; ++y) s += p[y * cols];
  float* dst = k == 0 ? dst0 : dst1;
  dst[c] += s;
}

// The same sums, kVec (8) adjacent columns per thread: for cols a multiple
// of 8 and loads of whole vectors. A block of 8 warps covers 256 columns of
// one chunk; warp w takes the chunk's rows w, w+8, ... (column_partials_
// kernel's ty), and the 8 warps' sums are added in warp order, so every
// column's sum is the same as the scalar kernel's, bit for bit.
// load(r, c, v) sets v[k][i] to output k's value at row r, column c + i.
template <int kOut, typename Load>
__global__ void __launch_bounds__(256) column_vec_partials_kernel(Load load, float* partial, int64_t rows,
                                                                  int64_t cols, int64_t rows_per_chunk) {
  __shared__ float sh[kOut][8][256];
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 256 + lane * kVec;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = min(r0 + rows_per_chunk, rows);
  float acc[kOut][kVec] = {};
  if (c < cols) {
#pragma unroll 4
    for (int64_t r = r0 + w; r < r1; r += 8) {
      float v[kOut][kVec];
      load(r, c, v);
#pragma unroll
      for (int k = 0; k < kOut; ++k)
#pragma unroll
        for (int i = 0; i < kVec; ++i) acc[k][i] += v[k][i];
    }
  }
#pragma unroll
  for (int k = 0; k < kOut; ++k)
#pragma unroll
    for (int i = 0; i < kVec; ++i) sh[k][w][lane * kVec + i] = acc[k][i];
  __syncthreads();
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  if (col < cols) {
#pragma unroll
    for (int k = 0; k < kOut; ++k) {
      float s = sh[k][0][threadIdx.x];
      for (int j = 1; j < 8; ++j) s += sh[k][j][threadIdx.x];
      partial[(static_cast<int64_t>(k) * gridDim.y + blockIdx.y) * cols + col] = s;
    }
  }
}

// Adds the chunks' partial sums into the destinations (the second kernel).
template <int kOut>
void column_finish(float* dst0, float* dst1, const float* partial, int64_t chunks, int64_t cols,
                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols + 63) / 64), static_cast<unsigned>(kOut));
  column_finish_kernel<kOut><<<grid, 64, 0, stream>>>(dst0, dst1, partial, chunks, cols);
  ZT_CUDA_CHECK_LAUNCH();
}

// Column sums into dst0 (and dst1); partial holds column_partials_floats(kOut,
// rows, cols).
template <int kOut, typename Load>
void column_sums_into(const Load& load, float* dst0, float* dst1, float* partial, int64_t rows, int64_t cols,
                      cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const ColumnChunks ch = column_chunks(rows);
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(ch.chunks));
  column_partials_kernel<kOut><<<grid, dim3(32, 8), 0, stream>>>(load, partial, rows, cols, ch.rows_per_chunk);
  ZT_CUDA_CHECK_LAUNCH();
  column_finish<kOut>(dst0, dst1, partial, ch.chunks, cols, stream);
}

// The same sums, by column_vec_partials_kernel with vec_load when `vec`
// (cols a multiple of kVec and every vector the loads read aligned, which
// the caller checks), else as above with load.
template <int kOut, typename VecLoad, typename Load>
void column_sums_into(bool vec, const VecLoad& vec_load, const Load& load, float* dst0, float* dst1, float* partial,
                      int64_t rows, int64_t cols, cudaStream_t stream) {
  if (!vec) return column_sums_into<kOut>(load, dst0, dst1, partial, rows, cols, stream);
  if (rows <= 0 || cols <= 0) return;
  const ColumnChunks ch = column_chunks(rows);
  const dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(ch.chunks));
  column_vec_partials_kernel<kOut><<<grid, 256, 0, stream>>>(vec_load, partial, rows, cols, ch.rows_per_chunk);
  ZT_CUDA_CHECK_LAUNCH();
  column_finish<kOut>(dst0, dst1, partial, ch.chunks, cols, stream);
}

}  // namespace zt::cuda
