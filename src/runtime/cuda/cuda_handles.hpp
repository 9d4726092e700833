// Move-only RAII owners of CUDA streams, events and the cuBLASLt handle.
// Functions take the raw handle (get()) as a cheap non-owning view.
// Destructors never throw: a failure to destroy is ignored (the context may
// already be gone at process exit).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <utility>

namespace zt {

// The blocking waits of the CUDA code outside these classes, watched the same
// way ([Note: watched host waits]).
void watched_stream_sync(cudaStream_t s, const char* what);
void watched_event_sync(cudaEvent_t e, const char* what);

// Whether this thread is recording the step's graph ([Note: step graph] in
// runtime/device.hpp): set by the CUDA StepGraph between begin() and
// end_and_launch().
bool step_capture_active();
void set_step_capture_active(bool on);

class CudaStream {
 public:
  CudaStream() = default;  // empty: owns nothing
  // A stream on the current device; non-blocking streams do not synchronise
  // with the legacy default stream.
  static CudaStream create(bool non_blocking = true, int priority = 0);
  ~CudaStream() { reset(); }
  CudaStream(CudaStream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  CudaStream& operator=(CudaStream&& o) noexcept {
    if (this != &o) {
      reset();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }
  // Blocks until the stream's work is done; a watched wait ([Note: watched
  // host waits]) named `what` (a string with static storage).
  void synchronize(const char* what = "a stream synchronize") const;
  // Work later queued on this stream waits for `event`.
  void wait(cudaEvent_t event) const;
  void reset() noexcept;

 private:
  cudaStream_t s_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent() = default;
  // timing=false gives the cheaper cudaEventDisableTiming event for ordering.
  static CudaEvent create(bool timing = false);
  ~CudaEvent() { reset(); }
  CudaEvent(CudaEvent&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return e_; }
  explicit operator bool() const { return e_ != nullptr; }
  // While the step's graph is recorded from `stream`, the record becomes a
  // node of the graph that records the event when the graph runs there (an
  // external record), so the host and other streams see the event as they
  // would without the graph, once the graph is launched.
  void record(cudaStream_t stream) const;
  // Blocks until the recorded work is done; a watched wait ([Note: watched
  // host waits]) named `what` (a string with static storage).
  void synchronize(const char* what = "an event") const;
  bool ready() const;  // cudaEventQuery: true when the recorded work is done
  // Milliseconds between two recorded timing events.
  static float elapsed_ms(const CudaEvent& start, const CudaEvent& stop);
  void reset() noexcept;

 private:
  cudaEvent_t e_ = nullptr;
};

class CublasLtHandle {
 public:
  CublasLtHandle() = default;
  static CublasLtHandle create();
  ~CublasLtHandle() { reset(); }
  CublasLtHandle(CublasLtHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CublasLtHandle& operator=(CublasLtHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  CublasLtHandle(const CublasLtHandle&) = delete;
  CublasLtHandle& operator=(const CublasLtHandle&) = delete;

  cublasLtHandle_t get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }
  void reset() noexcept;

 private:
  cublasLtHandle_t h_ = nullptr;
};

}  // namespace zt
