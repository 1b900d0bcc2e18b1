#include "parallel/device_comm.h"

#include "collectives/staged_communicator.h"
#include "runtime/error.h"

#ifdef ETR_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "collectives/nccl_communicator.h"
#endif

namespace etr {

std::unique_ptr<Communicator> make_device_communicator(const Group& group, Device device, void* stream,
                                                       Communicator& host, bool nccl,
                                                       const CommOptions& options) {
  if (!nccl) return std::make_unique<StagedCommunicator>(host, make_staged_copier(device, stream));
#ifdef ETR_HAVE_CUDA
  if (!device.is_cuda()) {
    throw ConfigError("comm.device_backend = nccl sums on GPUs; this state is on " + device.str());
  }
  auto comm = std::make_unique<NcclCommunicator>(group, device.index, options);
  comm->set_compute_stream(static_cast<cudaStream_t>(stream));
  return comm;
#else
  (void)group;
  (void)options;
  throw ConfigError("comm.device_backend = nccl in a build without CUDA (" + device.str() + ")");
#endif
}

}  // namespace etr
