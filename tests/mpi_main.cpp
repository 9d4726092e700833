// main() for MPI test binaries: initialises MPI, runs the tests on every rank
// with output from rank 0 only, and fails the process on every rank when any
// rank failed, so mpirun reports the failure.
#include <gtest/gtest.h>
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int local = RUN_ALL_TESTS();
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && local == 0 && global != 0) std::fprintf(stderr, "a test failed on another rank\n");
  MPI_Finalize();
  return global;
}
