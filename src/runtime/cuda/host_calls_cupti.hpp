// The CUDA probe of [Note: host round trips] (runtime/host_calls.hpp):
// CUPTI's driver-API callbacks, with libcupti loaded at run time (the CUDA
// toolkit's lib64; LD_LIBRARY_PATH or ZTRAIN_CUPTI_LIBRARY finds it).
#pragma once

#include <memory>

#include "runtime/host_calls.hpp"

namespace zt {

// Subscribes and checks itself: a synchronize made while counting must be
// seen, or this throws (a probe that cannot count would report zeros).
// A missing libcupti is a UserError naming the library.
std::unique_ptr<host_calls::Probe> make_cupti_probe();

// libcupti, loaded once ($ZTRAIN_CUPTI_LIBRARY, else libcupti.so.13, .12, or
// the unversioned name); a UserError naming `requester` when it is missing.
void* open_cupti_library(const char* requester);

}  // namespace zt
