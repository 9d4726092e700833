// NVML (the NVIDIA Management Library), loaded at run time with dlopen so that
// ztrain neither links against the driver nor needs it on CPU machines: the
// GPU's utilisation, memory and power for the Prometheus export
// (train/prometheus_export.hpp).
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace zt {

struct GpuSample {
  double utilization = 0;   // fraction of the last sample period a kernel ran, 0..1
  double memory_used = 0;   // bytes, as the driver counts them (every process)
  double memory_total = 0;  // bytes
  double power_w = 0;       // watts; NaN when the GPU does not report power
};

class Nvml {
 public:
  // dlopen(`library`) and the symbols ztrain calls, then nvmlInit. Null, with
  // the reason in `why` ("libnvidia-ml.so.1: cannot open shared object file",
  // "... has no nvmlDeviceGetPowerUsage", "nvmlInit_v2 returned 9"), when any
  // of that fails.
  static std::unique_ptr<Nvml> open(const std::string& library, std::string& why);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Selects the GPU by its PCI bus id ("0000:3b:00.0", as CUDA reports it);
  // false, with the reason in `why`, when NVML does not know it.
  bool select(const std::string& pci_bus_id, std::string& why);
  // The selected GPU now; nullopt when a query fails (a GPU that fell off the
  // bus) or none is selected.
  std::optional<GpuSample> sample() const;

 private:
  struct Api;
  Nvml() = default;
  void* lib_ = nullptr;
  std::unique_ptr<Api> api_;
  bool initialized_ = false;  // nvmlInit succeeded: nvmlShutdown on destruction
  void* device_ = nullptr;   // nvmlDevice_t
};

}  // namespace zt
