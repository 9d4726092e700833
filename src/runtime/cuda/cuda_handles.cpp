#include "runtime/cuda/cuda_handles.hpp"

#include "core/error.hpp"
#include "runtime/host_wait.hpp"

namespace zt {

CudaStream CudaStream::create(bool non_blocking, int priority) {
  CudaStream s;
  ZT_CUDA_CHECK(cudaStreamCreateWithPriority(&s.s_, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault,
                                             priority));
  return s;
}
void watched_stream_sync(cudaStream_t s, const char* what) {
  if (cudaStreamQuery(s) == cudaSuccess) return;  // nothing to wait for (errors surface below)
  host_wait::Scope watched(what, [s] { return cudaStreamQuery(s) != cudaErrorNotReady; });
  ZT_CUDA_CHECK(cudaStreamSynchronize(s));
}

void watched_event_sync(cudaEvent_t e, const char* what) {
  host_wait::Scope watched(what, [e] { return cudaEventQuery(e) != cudaErrorNotReady; });
  ZT_CUDA_CHECK(cudaEventSynchronize(e));
}

void CudaStream::synchronize(const char* what) const { watched_stream_sync(s_, what); }
void CudaStream::wait(cudaEvent_t event) const { ZT_CUDA_CHECK(cudaStreamWaitEvent(s_, event, 0)); }
void CudaStream::reset() noexcept {
  if (s_ != nullptr) {
    (void)cudaStreamDestroy(s_);
    s_ = nullptr;
  }
}

CudaEvent CudaEvent::create(bool timing) {
  CudaEvent e;
  ZT_CUDA_CHECK(cudaEventCreateWithFlags(&e.e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}
namespace {
thread_local bool t_step_capture = false;
}  // namespace
bool step_capture_active() { return t_step_capture; }
void set_step_capture_active(bool on) { t_step_capture = on; }

void CudaEvent::record(cudaStream_t stream) const {
  if (t_step_capture) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    ZT_CUDA_CHECK(cudaStreamIsCapturing(stream, &st));
    if (st == cudaStreamCaptureStatusActive) {
      ZT_CUDA_CHECK(cudaEventRecordWithFlags(e_, stream, cudaEventRecordExternal));
      return;
    }
  }
  ZT_CUDA_CHECK(cudaEventRecord(e_, stream));
}
// A query first: waiting on work that is done is no wait, and the host-call
// probe ([Note: host round trips]) counts only the calls that block.
void CudaEvent::synchronize(const char* what) const {
  if (ready()) return;
  watched_event_sync(e_, what);
}
bool CudaEvent::ready() const {
  const cudaError_t st = cudaEventQuery(e_);
  if (st == cudaErrorNotReady) return false;  // not an error, and not recorded as one
  ZT_CUDA_CHECK(st);
  return true;
}
float CudaEvent::elapsed_ms(const CudaEvent& start, const CudaEvent& stop) {
  float ms = 0;
  ZT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, stop.e_));
  return ms;
}
void CudaEvent::reset() noexcept {
  if (e_ != nullptr) {
    (void)cudaEventDestroy(e_);
    e_ = nullptr;
  }
}

CublasLtHandle CublasLtHandle::create() {
  CublasLtHandle h;
  ZT_CUBLAS_CHECK(cublasLtCreate(&h.h_));
  return h;
}
void CublasLtHandle::reset() noexcept {
  if (h_ != nullptr) {
    (void)cublasLtDestroy(h_);
    h_ = nullptr;
  }
}

}  // namespace zt
