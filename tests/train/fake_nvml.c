/* A stand-in for libnvidia-ml.so.1 with the entry points ztrain calls, for the
 * tests of train/nvml.hpp and of the Prometheus export's GPU series on machines
 * without a GPU (ZT_NVML_LIBRARY=path/to/this). Every GPU it knows reads
 * 37% busy, 3 GiB of 80 GiB used, 250 W; a bus id of "missing" is unknown. */
#include <string.h>

typedef struct {
  unsigned int gpu, memory;
} Utilization;
typedef struct {
  unsigned long long total, free, used;
} Memory;

static int initialized;
static int device_token;

int nvmlInit_v2(void) {
  initialized = 1;
  return 0;
}
int nvmlShutdown(void) {
  if (!initialized) return 1; /* NVML_ERROR_UNINITIALIZED */
  initialized = 0;
  return 0;
}
int nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** device) {
  if (!initialized) return 1;
  if (strcmp(bus, "missing") == 0) return 6; /* NVML_ERROR_NOT_FOUND */
  *device = &device_token;
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* device, Utilization* u) {
  if (device != &device_token) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  u->gpu = 37;
  u->memory = 12;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void* device, Memory* m) {
  if (device != &device_token) return 2;
  m->total = 80ull << 30;
  m->used = 3ull << 30;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(void* device, unsigned int* milliwatts) {
  if (device != &device_token) return 2;
  *milliwatts = 250000;
  return 0;
}
