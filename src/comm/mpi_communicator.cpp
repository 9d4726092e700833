#include "comm/mpi_communicator.hpp"

#include <sched.h>

#include <cstdlib>
#include <limits>
#include <vector>

#include "core/clock.hpp"

namespace zt {
namespace {

// Waits for `r` in a loop of MPI_Test (yielding the core after the first
// tests, for oversubscribed ranks) instead of MPI_Wait, and marks it complete
// in the recorder: the watchdog sees how long it has been in flight.
int wait_testing(MPI_Request* r, FlightRecorder& rec, uint64_t id) {
  for (int tests = 0;; ++tests) {
    int done = 0;
    const int rc = MPI_Test(r, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    if (done) {
      rec.complete(id);
      return MPI_SUCCESS;
    }
    if (tests > 100) sched_yield();
  }
}

// Adds its time to `owner`'s counters when it completes ([Note:
// communication time]): from `issued` (the host's clock at the call) to the
// completion seen by test() or wait(), and wait()'s own time as waited.
class MpiRequest final : public CommHandle {
 public:
  MpiRequest(MPI_Request r, FlightRecorder& rec, uint64_t id, Communicator& owner, CommOp op, double issued)
      : req_(r), rec_(rec), id_(id), owner_(owner), op_(op), issued_(issued) {}
  ~MpiRequest() override {
    // A request dropped without wait is completed here: MPI requires it and
    // freeing the buffer underneath an active request would corrupt memory.
    if (req_ != MPI_REQUEST_NULL) {
      const double t = now_s();
      if (wait_testing(&req_, rec_, id_) == MPI_SUCCESS) completed(now_s() - t);
    }
  }
  void wait() override {
    if (req_ == MPI_REQUEST_NULL) return;
    const double t = now_s();
    ZT_MPI_CHECK(wait_testing(&req_, rec_, id_));
    completed(now_s() - t);
  }
  bool test() override {
    if (req_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    ZT_MPI_CHECK(MPI_Test(&req_, &done, MPI_STATUS_IGNORE));
    if (done) {
      rec_.complete(id_);
      completed(0);
    }
    return done != 0;
  }

 private:
  void completed(double waited) { owner_.add_time(op_, now_s() - issued_, waited); }

  MPI_Request req_;
  FlightRecorder& rec_;
  uint64_t id_;
  Communicator& owner_;
  CommOp op_;
  double issued_;
};

// The members' ranks in MPI_COMM_WORLD, in group order.
std::vector<int> world_ranks_of(MPI_Comm comm, int size) {
  std::vector<int> mine(static_cast<size_t>(size)), world(static_cast<size_t>(size));
  for (int i = 0; i < size; ++i) mine[static_cast<size_t>(i)] = i;
  MPI_Group g, wg;
  ZT_MPI_CHECK(MPI_Comm_group(comm, &g));
  ZT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
  ZT_MPI_CHECK(MPI_Group_translate_ranks(g, size, mine.data(), wg, world.data()));
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  return world;
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::u16: return MPI_UINT16_T;
    default: ZT_THROW("MPI reduction on ", dtype_name(t), " is not supported (reduce in f32)");
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int checked_count(int64_t n) {
  ZT_CHECK(n <= std::numeric_limits<int>::max(), "MPI message of ", n, " elements exceeds INT_MAX; split it");
  return static_cast<int>(n);
}

void require_host(const Tensor& t) {
  ZT_CHECK(t.device == DeviceKind::cpu, "MpiCommunicator needs host memory");
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  ZT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  char host[MPI_MAX_PROCESSOR_NAME];
  int len = 0;
  MPI_Get_processor_name(host, &len);
  set_process_identity(rank_, std::string(host, static_cast<size_t>(len)));
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void abort_job(int exit_code) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::exit(exit_code);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string group_name)
    : comm_(comm), name_(std::move(group_name)) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  ZT_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  ZT_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  recorder_ = std::make_unique<FlightRecorder>(name_, "mpi", world_ranks_of(comm_, size_), rank_);
}

CommRequest MpiCommunicator::post(CommOp op, double issued, uint64_t id, MPI_Request r) {
  return std::make_unique<MpiRequest>(r, *recorder_, id, *this, op, issued);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

CommRequest MpiCommunicator::all_reduce(Tensor buf, ReduceOp op) {
  const double issued = now_s();
  require_host(buf);
  count(CommOp::all_reduce, buf.bytes());
  MPI_Request r;
  const uint64_t id = recorder_->record(CommOp::all_reduce, -1, buf.numel(), buf.dtype, OpState::started);
  ZT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf.data, checked_count(buf.numel()), mpi_type(buf.dtype),
                              mpi_op(op), comm_, &r));
  return post(CommOp::all_reduce, issued, id, r);
}

CommRequest MpiCommunicator::reduce_scatter(Tensor in, Tensor out, ReduceOp op) {
  const double issued = now_s();
  require_host(in);
  require_host(out);
  ZT_CHECK(in.dtype == out.dtype && in.numel() == out.numel() * size_, "reduce_scatter: in has ", in.numel(),
           " elements, out ", out.numel(), ", group size ", size_);
  count(CommOp::reduce_scatter, in.bytes());
  MPI_Request r;
  const uint64_t id = recorder_->record(CommOp::reduce_scatter, -1, in.numel(), in.dtype, OpState::started);
  ZT_MPI_CHECK(MPI_Ireduce_scatter_block(in.data, out.data, checked_count(out.numel()), mpi_type(out.dtype),
                                         mpi_op(op), comm_, &r));
  return post(CommOp::reduce_scatter, issued, id, r);
}

CommRequest MpiCommunicator::all_gather(Tensor in, Tensor out) {
  const double issued = now_s();
  require_host(in);
  require_host(out);
  ZT_CHECK(in.dtype == out.dtype && out.numel() == in.numel() * size_, "all_gather: in has ", in.numel(),
           " elements, out ", out.numel(), ", group size ", size_);
  count(CommOp::all_gather, out.bytes());
  MPI_Request r;
  const uint64_t id = recorder_->record(CommOp::all_gather, -1, out.numel(), out.dtype, OpState::started);
  ZT_MPI_CHECK(MPI_Iallgather(in.data, checked_count(static_cast<int64_t>(in.bytes())), MPI_BYTE, out.data,
                              checked_count(static_cast<int64_t>(in.bytes())), MPI_BYTE, comm_, &r));
  return post(CommOp::all_gather, issued, id, r);
}

CommRequest MpiCommunicator::broadcast(Tensor buf, int root) {
  const double issued = now_s();
  require_host(buf);
  count(CommOp::broadcast, buf.bytes());
  MPI_Request r;
  const uint64_t id = recorder_->record(CommOp::broadcast, root, buf.numel(), buf.dtype, OpState::started);
  ZT_MPI_CHECK(MPI_Ibcast(buf.data, checked_count(static_cast<int64_t>(buf.bytes())), MPI_BYTE, root, comm_, &r));
  return post(CommOp::broadcast, issued, id, r);
}

CommRequest MpiCommunicator::send(Tensor buf, int peer, int tag) {
  const double issued = now_s();
  require_host(buf);
  count(CommOp::send, buf.bytes());
  MPI_Request r;
  const uint64_t id = recorder_->record(CommOp::send, peer, buf.numel(), buf.dtype, OpState::started);
  ZT_MPI_CHECK(MPI_Isend(buf.data, checked_count(static_cast<int64_t>(buf.bytes())), MPI_BYTE, peer, tag, comm_, &r));
  return post(CommOp::send, issued, id, r);
}

CommRequest MpiCommunicator::recv(Tensor buf, int peer, int tag) {
  const double issued = now_s();
  require_host(buf);
  count(CommOp::recv, buf.bytes());
  MPI_Request r;
  const uint64_t id = recorder_->record(CommOp::recv, peer, buf.numel(), buf.dtype, OpState::started);
  ZT_MPI_CHECK(MPI_Irecv(buf.data, checked_count(static_cast<int64_t>(buf.bytes())), MPI_BYTE, peer, tag, comm_, &r));
  return post(CommOp::recv, issued, id, r);
}

void MpiCommunicator::barrier() {
  count(CommOp::barrier, 0);
  MPI_Request r;
  const uint64_t id = recorder_->record(CommOp::barrier, -1, 0, DType::f32, OpState::started);
  ZT_MPI_CHECK(MPI_Ibarrier(comm_, &r));
  ZT_MPI_CHECK(wait_testing(&r, *recorder_, id));
}

}  // namespace zt
