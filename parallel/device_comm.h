// The communicator of data on a device (comm.device_backend): NCCL's, a GPU to every rank,
// each operation on NCCL's stream after an event of the rank's stream; or the staged one
// over a host communicator of the same group (collectives/staged_communicator.h: any
// number of ranks per GPU; with host memory standing in for a device, the tests' path).
#pragma once

#include <memory>

#include "collectives/comm_options.h"
#include "collectives/communicator.h"
#include "runtime/group.h"

namespace etr {

// `host`: a host communicator of `group`, which outlives the result (the staged one runs
// its collectives there). `stream`: the rank's stream on `device` (nullptr on the host).
// ConfigError for NCCL on the host or in a build without CUDA.
std::unique_ptr<Communicator> make_device_communicator(const Group& group, Device device, void* stream,
                                                       Communicator& host, bool nccl,
                                                       const CommOptions& options);

}  // namespace etr
