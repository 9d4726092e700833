// Threads per rank for OpenMP and OpenBLAS.
#pragma once

namespace zt {

// OMP_NUM_THREADS when set, otherwise the cores of this node divided among
// its ranks. OpenBLAS itself runs single-threaded inside each rank.
int configure_threads(int local_ranks);

}  // namespace zt
