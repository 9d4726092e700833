// Memory estimate per rank from shapes alone (no allocation): model states
// (parameters, gradients, optimizer) and activations at the configured
// micro-batch. Rough for now; the ZeRO work refines it per stage and offload.
#pragma once

#include <string>

#include "core/config.hpp"

namespace zt {

struct MemoryEstimate {
  int64_t num_params = 0;
  double params_bytes = 0;       // working copy
  double master_bytes = 0;       // fp32 master (only when the working copy is 16-bit)
  double grads_bytes = 0;        // fp32
  double optim_bytes = 0;        // Adam m and v, fp32
  double activations_bytes = 0;  // one micro-batch in flight
  double total() const { return params_bytes + master_bytes + grads_bytes + optim_bytes + activations_bytes; }
};

MemoryEstimate estimate_memory(const Config& cfg, int dp_size);
std::string format_memory_estimate(const MemoryEstimate& e);

// Opens every data file named by the config and checks its format and token
// range against the model's vocabulary (throws UserError naming the file).
void validate_data_files(const Config& cfg);

}  // namespace zt
