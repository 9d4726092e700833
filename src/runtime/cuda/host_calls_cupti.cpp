#include "runtime/cuda/host_calls_cupti.hpp"

#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "core/error.hpp"

namespace zt {
namespace {

using SubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using EnableDomainFn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
using UnsubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle);

enum class Kind { none, sync, blocking_copy, d2h_copy, allocation };

bool starts(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

// Where a pointer of a copy lives, for the generic cuMemcpyAsync.
cudaMemoryType memory_type(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaMemoryTypeUnregistered;
  }
  return a.type;
}

bool on_host(cudaMemoryType t) { return t == cudaMemoryTypeUnregistered || t == cudaMemoryTypeHost; }

// The generic cuMemcpyAsync (what cudaMemcpyAsync with cudaMemcpyDefault
// calls) by its pointers: device to host is a device-to-host copy (into
// pageable memory it also returns only when done); pageable host to device
// returns once the source is staged, a blocking copy; the rest is
// asynchronous on its stream.
Kind classify_generic_copy(const void* params) {
  const auto* a = static_cast<const cuMemcpyAsync_params*>(params);
  const cudaMemoryType dst = memory_type(reinterpret_cast<const void*>(a->dst));
  const cudaMemoryType src = memory_type(reinterpret_cast<const void*>(a->src));
  if (on_host(dst) && !on_host(src)) return Kind::d2h_copy;
  if (src == cudaMemoryTypeUnregistered && !on_host(dst)) return Kind::blocking_copy;
  return Kind::none;
}

// Driver API names (with their _v2, _ptsz, _ptds suffixes) by what they make
// the host do. Queries (cuStreamQuery, cuEventQuery) do not wait.
Kind classify(const char* name) {
  if (starts(name, "cuStreamSynchronize") || starts(name, "cuCtxSynchronize") ||
      starts(name, "cuEventSynchronize"))
    return Kind::sync;
  if (starts(name, "cuMemcpy")) {
    if (std::strstr(name, "Async") == nullptr) return Kind::blocking_copy;
    if (starts(name, "cuMemcpyDtoHAsync")) return Kind::d2h_copy;
    return Kind::none;  // asynchronous, on a stream
  }
  if (starts(name, "cuMemAlloc") || starts(name, "cuMemHostAlloc") || starts(name, "cuMemCreate") ||
      starts(name, "cuMemFree") || starts(name, "cuMemHostRegister"))
    return Kind::allocation;
  return Kind::none;
}

class CuptiProbe final : public host_calls::Probe {
 public:
  CuptiProbe() {
    lib_ = open_cupti_library("ZTRAIN_COUNT_HOST_CALLS");
    auto sub = reinterpret_cast<SubscribeFn>(dlsym(lib_, "cuptiSubscribe"));
    auto enable = reinterpret_cast<EnableDomainFn>(dlsym(lib_, "cuptiEnableDomain"));
    unsubscribe_ = reinterpret_cast<UnsubscribeFn>(dlsym(lib_, "cuptiUnsubscribe"));
    ZT_CHECK(sub && enable && unsubscribe_, "libcupti lacks cuptiSubscribe/cuptiEnableDomain/cuptiUnsubscribe");
    CUptiResult r = sub(&subscriber_, &CuptiProbe::callback, this);
    ZT_CHECK(r == CUPTI_SUCCESS, "cuptiSubscribe failed (", static_cast<int>(r),
             "); another CUPTI client (a profiler) may be attached");
    r = enable(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API);
    ZT_CHECK(r == CUPTI_SUCCESS, "cuptiEnableDomain(driver API) failed (", static_cast<int>(r), ")");
    // The probe must see what it claims to count.
    begin();
    ZT_CUDA_CHECK(cudaDeviceSynchronize());
    const host_calls::Counts c = end();
    ZT_CHECK(c.syncs >= 1, "ZTRAIN_COUNT_HOST_CALLS: CUPTI did not report a cudaDeviceSynchronize made while "
                           "counting; the counts would be meaningless");
  }
  ~CuptiProbe() override {
    if (subscriber_ != nullptr) (void)unsubscribe_(subscriber_);
  }

  void begin() override {
    std::lock_guard<std::mutex> g(mu_);
    counts_ = host_calls::Counts{};
    names_.clear();
    thread_ = std::this_thread::get_id();
    armed_.store(true, std::memory_order_release);
  }

  host_calls::Counts end() override {
    armed_.store(false, std::memory_order_release);
    std::lock_guard<std::mutex> g(mu_);
    std::ostringstream o;
    for (const auto& [name, n] : names_) o << (o.tellp() > 0 ? ", " : "") << name << " x" << n;
    counts_.detail = o.str();
    return counts_;
  }

 private:
  static void CUPTIAPI callback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
    auto* p = static_cast<CuptiProbe*>(self);
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !p->armed_.load(std::memory_order_acquire)) return;
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (cb->callbackSite != CUPTI_API_ENTER || cb->functionName == nullptr) return;
    Kind k = classify(cb->functionName);
    // The generic copy's kind depends on its pointers (asked before the lock:
    // the query is itself a driver call, which comes back here as none).
    if (k == Kind::none && cb->functionParams != nullptr &&
        (std::strcmp(cb->functionName, "cuMemcpyAsync") == 0 ||
         std::strcmp(cb->functionName, "cuMemcpyAsync_ptsz") == 0) &&
        std::this_thread::get_id() == p->thread_)
      k = classify_generic_copy(cb->functionParams);
    if (k == Kind::none) return;
    std::lock_guard<std::mutex> g(p->mu_);
    if (!p->armed_.load(std::memory_order_relaxed) || std::this_thread::get_id() != p->thread_) return;
    switch (k) {
      case Kind::sync: ++p->counts_.syncs; break;
      case Kind::blocking_copy: ++p->counts_.blocking_copies; break;
      case Kind::d2h_copy: ++p->counts_.d2h_copies; break;
      case Kind::allocation: ++p->counts_.allocations; break;
      case Kind::none: break;
    }
    ++p->names_[cb->functionName];
  }

  void* lib_ = nullptr;
  UnsubscribeFn unsubscribe_ = nullptr;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  std::atomic<bool> armed_{false};
  std::mutex mu_;
  std::thread::id thread_;
  host_calls::Counts counts_;
  std::map<std::string, int64_t> names_;
};

}  // namespace

void* open_cupti_library(const char* requester) {
  static void* lib = nullptr;  // loaded once, kept for the process
  if (lib != nullptr) return lib;
  const char* env = std::getenv("ZTRAIN_CUPTI_LIBRARY");
  for (const char* name : {env, "libcupti.so.13", "libcupti.so.12", "libcupti.so"}) {
    if (name == nullptr || *name == 0) continue;
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) return lib;
  }
  ZT_USER_ERROR(requester, ": cannot load libcupti (tried $ZTRAIN_CUPTI_LIBRARY, libcupti.so.13, libcupti.so.12, "
                "libcupti.so; it is in the CUDA toolkit's lib64: add it to LD_LIBRARY_PATH)");
}

std::unique_ptr<host_calls::Probe> make_cupti_probe() { return std::make_unique<CuptiProbe>(); }

}  // namespace zt
