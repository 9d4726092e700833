#include "train/nvml.hpp"

#include <dlfcn.h>

#include <cmath>
#include <type_traits>

#include "core/error.hpp"

namespace zt {
namespace {

// The few NVML declarations ztrain needs, as nvml.h has them (the header is
// part of the CUDA toolkit, which a CPU build does not have).
using nvml_return = int;  // nvmlReturn_t; 0 = NVML_SUCCESS
using nvml_device = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;  // percent
};
struct NvmlMemory {
  unsigned long long total, free, used;  // bytes
};

}  // namespace

struct Nvml::Api {
  nvml_return (*init)();
  nvml_return (*shutdown)();
  nvml_return (*by_pci_bus_id)(const char*, nvml_device*);
  nvml_return (*utilization)(nvml_device, NvmlUtilization*);
  nvml_return (*memory)(nvml_device, NvmlMemory*);
  nvml_return (*power)(nvml_device, unsigned int*);  // milliwatts
};

std::unique_ptr<Nvml> Nvml::open(const std::string& library, std::string& why) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    why = e ? e : library + ": cannot be loaded";
    return nullptr;
  }
  std::unique_ptr<Nvml> n(new Nvml());
  n->lib_ = lib;
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  const auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (fn == nullptr && why.empty()) why = library + " has no " + name;
  };
  why.clear();
  sym(a.init, "nvmlInit_v2");
  sym(a.shutdown, "nvmlShutdown");
  sym(a.by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2");
  sym(a.utilization, "nvmlDeviceGetUtilizationRates");
  sym(a.memory, "nvmlDeviceGetMemoryInfo");
  sym(a.power, "nvmlDeviceGetPowerUsage");
  if (!why.empty()) return nullptr;  // the destructor closes the library
  if (const nvml_return r = a.init(); r != 0) {
    why = detail::concat(library, ": nvmlInit_v2 returned ", r);
    return nullptr;
  }
  n->initialized_ = true;
  return n;
}

Nvml::~Nvml() {
  if (initialized_) (void)api_->shutdown();
  if (lib_ != nullptr) dlclose(lib_);
}

bool Nvml::select(const std::string& pci_bus_id, std::string& why) {
  nvml_device d = nullptr;
  if (const nvml_return r = api_->by_pci_bus_id(pci_bus_id.c_str(), &d); r != 0) {
    why = detail::concat("NVML has no GPU at PCI bus id ", pci_bus_id, " (nvmlDeviceGetHandleByPciBusId_v2 returned ",
                         r, ")");
    return false;
  }
  device_ = d;
  return true;
}

std::optional<GpuSample> Nvml::sample() const {
  if (device_ == nullptr) return std::nullopt;
  NvmlUtilization u{};
  NvmlMemory m{};
  if (api_->utilization(device_, &u) != 0 || api_->memory(device_, &m) != 0) return std::nullopt;
  GpuSample s;
  s.utilization = u.gpu / 100.0;
  s.memory_used = static_cast<double>(m.used);
  s.memory_total = static_cast<double>(m.total);
  unsigned int mw = 0;
  s.power_w = api_->power(device_, &mw) == 0 ? mw / 1000.0 : std::nan("");
  return s;
}

}  // namespace zt
