#include "comm/nccl_communicator.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

namespace zt {

// The events of one call (or of one group of calls): `begun` is recorded on
// the comm stream before the operation, `event` after it. The watchdog polls
// them from its own thread (cudaEventQuery never blocks), hence the atomics.
// With `timing`, the two events also time the call ([Note: communication
// time] in communicator.hpp).
struct NcclCompletion final : CompletionProbe {
  explicit NcclCompletion(bool timing = false) : begun(CudaEvent::create(timing)), event(CudaEvent::create(timing)) {}
  CudaEvent begun;
  CudaEvent event;
  std::atomic<bool> begun_recorded{false};
  std::atomic<bool> recorded{false};
  bool started() override { return begun_recorded.load() && cudaEventQuery(begun.get()) == cudaSuccess; }
  bool completed() override { return recorded.load() && cudaEventQuery(event.get()) == cudaSuccess; }
};

namespace {

using Clock = std::chrono::steady_clock;

void poll_pause() { std::this_thread::sleep_for(std::chrono::microseconds(20)); }

class NcclHandle final : public DeviceCommHandle {
 public:
  NcclHandle(std::shared_ptr<NcclCompletion> done, cudaStream_t compute, NcclCommunicator* owner, CommOp op)
      : done_(std::move(done)), compute_(compute), owner_(owner), op_(op) {}

  // GPU-side: the compute stream waits; the host does not.
  void wait() override {
    require_issued();
    owner_->compute_waits_for(done_->event.get(), op_);
  }
  bool test() override {
    if (!done_->recorded) return false;
    const cudaError_t rc = cudaEventQuery(done_->event.get());
    if (rc == cudaSuccess) return true;
    if (rc != cudaErrorNotReady) ZT_CUDA_CHECK(rc);
    owner_->check_async_error();
    return false;
  }
  // Polls rather than cudaEventSynchronize, so an asynchronous NCCL error (a
  // peer gone) surfaces as an exception instead of a hang.
  void wait_host() override {
    require_issued();
    while (!test()) poll_pause();
  }

 private:
  void require_issued() const {
    ZT_CHECK(done_->recorded, "waiting on a NCCL call inside an open group: call group_end() first");
  }
  std::shared_ptr<NcclCompletion> done_;
  cudaStream_t compute_;
  NcclCommunicator* owner_;
  CommOp op_;
};

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    default: ZT_THROW("NCCL reduction on ", dtype_name(t), " is not supported");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// True for host tensors (which go to MPI); throws when the pair is mixed.
bool on_host(const Tensor& a, const Tensor& b) {
  ZT_CHECK(a.device == b.device, "NcclCommunicator: input and output on different devices");
  return a.device == DeviceKind::cpu;
}

// [Note: one-rank group] A group of one rank exchanges nothing: all_reduce
// and broadcast leave the buffer as it is, reduce_scatter and all_gather
// copy `in` to `out`. NcclCommunicator runs them so, with no NCCL call: the
// copy (none in place) is queued on the compute stream, which orders it
// before everything queued there after, so the handle is complete as far as
// the compute stream and whatever is ordered after it can tell. Nothing
// reaches NCCL's stream, the flight recorder or the watchdog, and a step
// whose collectives are all local may be recorded in a CUDA graph
// (graph_safe(); [Note: step graph] in runtime/device.hpp). Inside
// group_start() / group_end() the calls still go to NCCL, whose handles
// complete together at the group's end.
class LocalHandle final : public DeviceCommHandle {
 public:
  explicit LocalHandle(cudaStream_t compute) : compute_(compute) {}
  void wait() override {}
  bool test() override { return true; }
  void wait_host() override { watched_stream_sync(compute_, "a one-rank collective"); }

 private:
  cudaStream_t compute_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MpiCommunicator& group, cudaStream_t compute)
    : group_(group), name_(group.group_name()), rank_(group.rank()), size_(group.size()) {
  compute_ = compute;
  ZT_CUDA_CHECK(cudaGetDevice(&device_));
  if (group_shares_a_gpu(group)) {
    ZT_USER_ERROR("communicator group '", name_, "' has ranks that share a GPU; NCCL needs one GPU per rank. ",
                  "Use the host-staged MPI backend (\"mpi\") or run at most one rank per GPU.");
  }
  int least = 0, greatest = 0;
  ZT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  ZT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, greatest));

  // Rank 0 makes the id and sends it with a status, so a failure there is an
  // error on every rank instead of a hang in ncclCommInitRank.
  struct {
    ncclUniqueId id;
    int ok;
  } boot{};
  if (rank_ == 0) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess ? 1 : 0;
  try {
    ZT_MPI_CHECK(MPI_Bcast(&boot, sizeof boot, MPI_BYTE, 0, group.comm()));
    ZT_CHECK(boot.ok == 1, "ncclGetUniqueId failed on rank 0 of group '", name_, "': ", ncclGetLastError(nullptr));
    // Some MPIs defer a broadcast's progress to a later call; the barrier makes
    // sure every rank holds the id before anyone blocks in ncclCommInitRank.
    ZT_MPI_CHECK(MPI_Barrier(group.comm()));
    ZT_NCCL_CHECK(ncclCommInitRank(&comm_, size_, boot.id, rank_));
  } catch (...) {
    cudaStreamDestroy(stream_);
    throw;
  }
  recorder_ = std::make_unique<FlightRecorder>(name_, "nccl", group.recorder().world_ranks(), rank_);
  // The watchdog's abort of a hung job (its thread; the process ends right after).
  recorder_->set_abort([c = comm_] { ncclCommAbort(c); });
}

NcclCommunicator::~NcclCommunicator() {
  if (recorder_) recorder_->set_abort(nullptr);
  if (comm_ != nullptr && std::uncaught_exceptions() == 0) {
    // See [Note: NCCL teardown].
    if (drain(teardown_timeout_s_)) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void NcclCommunicator::abort() noexcept {
  if (recorder_) recorder_->set_abort(nullptr);
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
}

void NcclCommunicator::check_async_error() {
  ZT_CHECK(comm_ != nullptr, "NCCL communicator of group '", name_, "' was aborted after an earlier error");
  ncclResult_t async = ncclSuccess;
  ZT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
  if (async != ncclSuccess && async != ncclInProgress) {
    const std::string detail = ncclGetLastError(comm_);
    abort();
    ZT_THROW("NCCL asynchronous error in group '", name_, "': ", ncclGetErrorString(async), " (", detail,
             "); the communicator was aborted");
  }
}

bool NcclCommunicator::drain(double timeout_s) noexcept {
  const auto start = Clock::now();
  for (;;) {
    const cudaError_t rc = cudaStreamQuery(stream_);
    if (rc == cudaSuccess) return true;
    if (rc != cudaErrorNotReady) return false;
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) return false;
    if (async != ncclSuccess && async != ncclInProgress) return false;
    if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_s) return false;
    poll_pause();
  }
}

void NcclCommunicator::synchronize() {
  for (;;) {
    check_async_error();
    const cudaError_t rc = cudaStreamQuery(stream_);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) ZT_CUDA_CHECK(rc);
    poll_pause();
  }
}

std::shared_ptr<NcclCompletion> NcclCommunicator::begin_call() {
  check_async_error();
  // The call's events are polled by the watchdog and released with the
  // flight recorder's entries, which an event recorded into the step's CUDA
  // graph does not allow ([Note: step graph] in runtime/device.hpp).
  ZT_CHECK(!step_capture_active(), "an NCCL call in group '", name_, "' while the step's CUDA graph is recorded: "
           "this layout cannot run in a graph (ZTRAIN_CUDA_GRAPH=0 runs it without)");
  ZT_CUDA_CHECK(cudaEventRecord(input_ready_.get(), compute_));
  ZT_CUDA_CHECK(cudaStreamWaitEvent(stream_, input_ready_.get(), 0));
  if (group_depth_ > 0) return group_done_;
  auto done = std::make_shared<NcclCompletion>(timing_);
  ZT_CUDA_CHECK(cudaEventRecord(done->begun.get(), stream_));
  done->begun_recorded.store(true);
  return done;
}

CommRequest NcclCommunicator::end_call(std::shared_ptr<NcclCompletion> done, CommOp op) {
  if (group_depth_ == 0) {
    ZT_CUDA_CHECK(cudaEventRecord(done->event.get(), stream_));
    done->recorded.store(true);
    if (timing_) timed_.push_back(TimedCall{op, done});
  }
  return std::make_unique<NcclHandle>(std::move(done), compute_, this, op);
}

void NcclCommunicator::compute_waits_for(cudaEvent_t done, CommOp op) {
  // A graph's events are not timing records of this step; graphs hold no
  // NCCL calls of more than one rank anyway (begin_call).
  if (!timing_ || step_capture_active()) {
    ZT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done, 0));
    return;
  }
  if (wait_events_.size() < 2 * (wait_ops_.size() + 1)) {
    wait_events_.push_back(CudaEvent::create(true));
    wait_events_.push_back(CudaEvent::create(true));
  }
  const size_t i = 2 * wait_ops_.size();
  ZT_CUDA_CHECK(cudaEventRecord(wait_events_[i].get(), compute_));
  ZT_CUDA_CHECK(cudaStreamWaitEvent(compute_, done, 0));
  ZT_CUDA_CHECK(cudaEventRecord(wait_events_[i + 1].get(), compute_));
  wait_ops_.push_back(op);
}

void NcclCommunicator::set_timing(bool on) {
  timing_ = on;
  drop_timing();
}

void NcclCommunicator::reset_counters() {
  Communicator::reset_counters();
  drop_timing();
}

void NcclCommunicator::drop_timing() {
  timed_.clear();
  wait_ops_.clear();
  held_ = false;
}

void NcclCommunicator::hold_device_times() {
  held_ = true;
  held_calls_ = timed_.size();
  held_waits_ = wait_ops_.size();
}

namespace {
double elapsed_s(const CudaEvent& from, const CudaEvent& to) {
  watched_event_sync(to.get(), "a communication timing event");
  float ms = 0;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, from.get(), to.get()));
  return ms * 1e-3;
}
}  // namespace

void NcclCommunicator::add_device_times(CommCounters& into) {
  const size_t calls = held_ ? held_calls_ : timed_.size(), waits = held_ ? held_waits_ : wait_ops_.size();
  for (size_t k = 0; k < calls; ++k)
    into.seconds[static_cast<int>(timed_[k].op)] += elapsed_s(timed_[k].done->begun, timed_[k].done->event);
  for (size_t k = 0; k < waits; ++k)
    into.waited[static_cast<int>(wait_ops_[k])] += elapsed_s(wait_events_[2 * k], wait_events_[2 * k + 1]);
  drop_timing();
}

void NcclCommunicator::group_start() {
  check_async_error();
  ZT_NCCL_CHECK(ncclGroupStart());
  if (group_depth_++ == 0) {
    group_done_ = std::make_shared<NcclCompletion>();
    ZT_CUDA_CHECK(cudaEventRecord(group_done_->begun.get(), stream_));
    group_done_->begun_recorded.store(true);
  }
}

void NcclCommunicator::group_end() {
  ZT_CHECK(group_depth_ > 0, "group_end() without group_start()");
  --group_depth_;
  ZT_NCCL_CHECK(ncclGroupEnd());
  if (group_depth_ == 0) {
    ZT_CUDA_CHECK(cudaEventRecord(group_done_->event.get(), stream_));
    group_done_->recorded.store(true);
    group_done_.reset();
  }
}

CommRequest NcclCommunicator::local_copy(const Tensor& in, const Tensor& out) {
  if (in.data != out.data)
    ZT_CUDA_CHECK(cudaMemcpyAsync(out.data, in.data, out.bytes(), cudaMemcpyDeviceToDevice, compute_));
  return std::make_unique<LocalHandle>(compute_);
}

CommRequest NcclCommunicator::all_reduce(Tensor buf, ReduceOp op) {
  count(CommOp::all_reduce, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.all_reduce(buf, op);
  if (local()) return local_copy(buf, buf);  // [Note: one-rank group]
  auto done = begin_call();
  recorder_->record(CommOp::all_reduce, -1, buf.numel(), buf.dtype, OpState::queued, done);
  ZT_NCCL_CHECK(ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()), nccl_type(buf.dtype),
                              nccl_op(op), comm_, stream_));
  return end_call(std::move(done), CommOp::all_reduce);
}

CommRequest NcclCommunicator::reduce_scatter(Tensor in, Tensor out, ReduceOp op) {
  ZT_CHECK(in.dtype == out.dtype && in.numel() == out.numel() * size_, "reduce_scatter: in has ", in.numel(),
           " elements, out ", out.numel(), ", group size ", size_);
  count(CommOp::reduce_scatter, in.bytes());
  if (on_host(in, out)) return group_.reduce_scatter(in, out, op);
  if (local()) return local_copy(in, out);
  auto done = begin_call();
  recorder_->record(CommOp::reduce_scatter, -1, in.numel(), in.dtype, OpState::queued, done);
  ZT_NCCL_CHECK(ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()), nccl_type(out.dtype),
                                  nccl_op(op), comm_, stream_));
  return end_call(std::move(done), CommOp::reduce_scatter);
}

CommRequest NcclCommunicator::all_gather(Tensor in, Tensor out) {
  ZT_CHECK(in.dtype == out.dtype && out.numel() == in.numel() * size_, "all_gather: in has ", in.numel(),
           " elements, out ", out.numel(), ", group size ", size_);
  count(CommOp::all_gather, out.bytes());
  if (on_host(in, out)) return group_.all_gather(in, out);
  if (local()) return local_copy(in, out);
  auto done = begin_call();
  recorder_->record(CommOp::all_gather, -1, out.numel(), out.dtype, OpState::queued, done);
  // Bytes: gathering moves data without arithmetic, so any dtype (u16 too) works.
  ZT_NCCL_CHECK(ncclAllGather(in.data, out.data, in.bytes(), ncclUint8, comm_, stream_));
  return end_call(std::move(done), CommOp::all_gather);
}

CommRequest NcclCommunicator::broadcast(Tensor buf, int root) {
  ZT_CHECK(root >= 0 && root < size_, "broadcast root ", root, " outside group of ", size_);
  count(CommOp::broadcast, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.broadcast(buf, root);
  if (local()) return local_copy(buf, buf);
  auto done = begin_call();
  recorder_->record(CommOp::broadcast, root, buf.numel(), buf.dtype, OpState::queued, done);
  ZT_NCCL_CHECK(ncclBroadcast(buf.data, buf.data, buf.bytes(), ncclUint8, root, comm_, stream_));
  return end_call(std::move(done), CommOp::broadcast);
}

CommRequest NcclCommunicator::send(Tensor buf, int peer, int tag) {
  ZT_CHECK(peer >= 0 && peer < size_, "send to peer ", peer, " in group of ", size_);
  count(CommOp::send, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.send(buf, peer, tag);
  auto done = begin_call();
  recorder_->record(CommOp::send, peer, buf.numel(), buf.dtype, OpState::queued, done);
  ZT_NCCL_CHECK(ncclSend(buf.data, buf.bytes(), ncclUint8, peer, comm_, stream_));
  return end_call(std::move(done), CommOp::send);
}

CommRequest NcclCommunicator::recv(Tensor buf, int peer, int tag) {
  ZT_CHECK(peer >= 0 && peer < size_, "recv from peer ", peer, " in group of ", size_);
  count(CommOp::recv, buf.bytes());
  if (buf.device == DeviceKind::cpu) return group_.recv(buf, peer, tag);
  auto done = begin_call();
  recorder_->record(CommOp::recv, peer, buf.numel(), buf.dtype, OpState::queued, done);
  ZT_NCCL_CHECK(ncclRecv(buf.data, buf.bytes(), ncclUint8, peer, comm_, stream_));
  return end_call(std::move(done), CommOp::recv);
}

void NcclCommunicator::barrier() {
  count(CommOp::barrier, 0);
  group_.barrier();
}

}  // namespace zt
