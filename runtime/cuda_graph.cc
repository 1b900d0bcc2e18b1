#include "runtime/cuda_graph.h"

#ifdef ETR_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"
#endif

namespace etr {

#ifdef ETR_HAVE_CUDA
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Captures `work` on `stream` into an instantiated graph. An error inside `work` ends the
// capture (discarding its graph) before it propagates.
cudaGraphExec_t capture(void* stream, const std::function<void()>& work) {
  CUDA_CHECK(cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeThreadLocal));
  try {
    work();
  } catch (...) {
    cudaGraph_t broken = nullptr;
    (void)cudaStreamEndCapture(as_stream(stream), &broken);
    if (broken) (void)cudaGraphDestroy(broken);
    throw;
  }
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(as_stream(stream), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  CUDA_CHECK(made);
  return exec;
}

}  // namespace
#endif

void CudaGraphCache::run(const Key& key, const std::function<void()>& work) {
#ifdef ETR_HAVE_CUDA
  if (device_.is_cuda()) {
    if (entries_.size() >= kMaxGraphs && entries_.find(key) == entries_.end()) clear();
    Entry& e = entries_[key];
    if (e.exec == nullptr && e.seen == 0) {
      work();  // eagerly, the first time (counted once it finished: its lazy allocations made)
      e.seen = 1;
      return;
    }
    if (e.exec == nullptr) {
      e.exec = capture(stream_, work);
    }
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(e.exec), as_stream(stream_)));
    ++launches_;
    return;
  }
#endif
  (void)key;
  work();
}

void CudaGraphCache::clear() {
#ifdef ETR_HAVE_CUDA
  for (auto& [key, e] : entries_) {
    if (e.exec) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e.exec));
  }
#endif
  entries_.clear();
}

}  // namespace etr
