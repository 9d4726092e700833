#include "runtime/cuda/gpu_timeline_cupti.hpp"

#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "core/error.hpp"
#include "runtime/cuda/host_calls_cupti.hpp"

namespace zt {
namespace {

using RegisterFn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
using KindFn = CUptiResult (*)(CUpti_ActivityKind);
using FlushFn = CUptiResult (*)(uint32_t);
using NextFn = CUptiResult (*)(uint8_t*, size_t, CUpti_Activity**);
using DroppedFn = CUptiResult (*)(CUcontext, uint32_t, size_t*);

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

class CuptiTimeline;
CuptiTimeline* g_timeline = nullptr;  // CUPTI's buffer callbacks carry no user pointer

class CuptiTimeline final : public GpuTimelineRecorder {
 public:
  CuptiTimeline() {
    ZT_CHECK(g_timeline == nullptr, "one GPU timeline recorder per process");
    void* lib = open_cupti_library("ZTRAIN_GPU_TIMELINE");
    auto reg = reinterpret_cast<RegisterFn>(dlsym(lib, "cuptiActivityRegisterCallbacks"));
    enable_ = reinterpret_cast<KindFn>(dlsym(lib, "cuptiActivityEnable"));
    disable_ = reinterpret_cast<KindFn>(dlsym(lib, "cuptiActivityDisable"));
    flush_ = reinterpret_cast<FlushFn>(dlsym(lib, "cuptiActivityFlushAll"));
    next_ = reinterpret_cast<NextFn>(dlsym(lib, "cuptiActivityGetNextRecord"));
    dropped_ = reinterpret_cast<DroppedFn>(dlsym(lib, "cuptiActivityGetNumDroppedRecords"));
    ZT_CHECK(reg && enable_ && disable_ && flush_ && next_ && dropped_, "libcupti lacks the activity API");
    const CUptiResult r = reg(&CuptiTimeline::requested, &CuptiTimeline::completed);
    ZT_CHECK(r == CUPTI_SUCCESS, "cuptiActivityRegisterCallbacks failed (", static_cast<int>(r), ")");
    g_timeline = this;
  }
  ~CuptiTimeline() override {
    if (recording_) (void)stop();
    g_timeline = nullptr;
  }

  void start() override {
    ZT_CHECK(!recording_, "GPU timeline: already recording");
    {
      std::lock_guard<std::mutex> g(mu_);
      spans_.clear();
      dropped_records_ = 0;
    }
    for (CUpti_ActivityKind k : kKinds) {
      const CUptiResult r = enable_(k);
      ZT_CHECK(r == CUPTI_SUCCESS, "cuptiActivityEnable(", static_cast<int>(k), ") failed (", static_cast<int>(r),
               "); another CUPTI client (a profiler) may be attached");
    }
    recording_ = true;
  }

  std::vector<DeviceSpan> stop() override {
    ZT_CHECK(recording_, "GPU timeline: not recording");
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    ZT_CHECK(flush_(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) == CUPTI_SUCCESS, "cuptiActivityFlushAll failed");
    for (CUpti_ActivityKind k : kKinds) (void)disable_(k);
    recording_ = false;
    std::lock_guard<std::mutex> g(mu_);
    ZT_CHECK(dropped_records_ == 0, "GPU timeline: CUPTI dropped ", dropped_records_,
             " activity records; the timeline would have holes");
    return std::move(spans_);
  }

 private:
  static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = *buffer != nullptr ? kBufferBytes : 0;
    *max_records = 0;
  }

  static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
    CuptiTimeline* t = g_timeline;
    if (t != nullptr && buffer != nullptr) t->take(ctx, stream, buffer, valid);
    std::free(buffer);
  }

  void take(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t valid) {
    std::lock_guard<std::mutex> g(mu_);
    CUpti_Activity* rec = nullptr;
    while (next_(buffer, valid, &rec) == CUPTI_SUCCESS) {
      DeviceSpan s;
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          s = DeviceSpan{k->start, k->end, DeviceSpan::Kind::kernel};
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          s = DeviceSpan{m->start, m->end, DeviceSpan::Kind::copy};
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          s = DeviceSpan{m->start, m->end, DeviceSpan::Kind::memset};
          break;
        }
        default: continue;
      }
      spans_.push_back(s);
    }
    size_t dropped = 0;
    if (dropped_(ctx, stream, &dropped) == CUPTI_SUCCESS) dropped_records_ += dropped;
  }

  KindFn enable_ = nullptr, disable_ = nullptr;
  FlushFn flush_ = nullptr;
  NextFn next_ = nullptr;
  DroppedFn dropped_ = nullptr;
  bool recording_ = false;
  std::mutex mu_;
  std::vector<DeviceSpan> spans_;
  size_t dropped_records_ = 0;
};

}  // namespace

std::unique_ptr<GpuTimelineRecorder> make_cupti_timeline() { return std::make_unique<CuptiTimeline>(); }

}  // namespace zt
