#include "train/threads.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <cblas.h>

namespace zt {

int configure_threads(int local_ranks) {
  int threads = 0;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env != nullptr && std::atoi(env) > 0) {
    threads = std::atoi(env);
  } else {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    threads = std::max(1, cores / std::max(1, local_ranks));
  }
  omp_set_num_threads(threads);
  // OpenBLAS runs single-threaded inside each rank: OpenMP threads spinning
  // after a parallel region starve its own pool (measured 2.5x slower).
  openblas_set_num_threads(1);
  return threads;
}

}  // namespace zt
