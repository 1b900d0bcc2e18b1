// CudaGraphCache: a unit of GPU work whose shapes and buffers repeat (a micro-batch's
// forward and backward once its activations are planned) captured into a CUDA graph and
// replayed, so that its hundreds of kernel launches cost one.
//
//   CudaGraphCache graphs(device, stream);
//   graphs.run(key, [&] { stack.forward_accumulate(...); stack.backward(...); });
//
// run(key, work): the first time a key is seen, `work` runs as it is (eagerly: it may
// allocate, create handles and workspaces, which a capture may not); the second time it
// is captured on the stream (cudaStreamCaptureModeThreadLocal) into a graph, which is
// instantiated and launched; from then on the graph is launched and `work` is not called.
// A replay runs the same kernels with the same arguments on the same pointers, so it
// writes bitwise what an eager run would. The key must therefore name everything the
// work's launches depend on: every pointer and size it passes that may change (the
// token slot, the micro-batch's size, the activations' plan: LayerStack::plan may move
// them); the caller's host-side effects inside `work` (hooks) run at the capture only.
// clear() forgets every graph; more than kMaxGraphs keys (buffers that keep moving) clear
// the cache too. On the host, and in a build without
// CUDA, run() always calls `work` (there is nothing to capture).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "runtime/device.h"

namespace etr {

class CudaGraphCache {
 public:
  using Key = std::vector<int64_t>;
  static constexpr size_t kMaxGraphs = 16;
  CudaGraphCache(Device device, void* stream) : device_(device), stream_(stream) {}
  ~CudaGraphCache() { clear(); }
  CudaGraphCache(const CudaGraphCache&) = delete;
  CudaGraphCache& operator=(const CudaGraphCache&) = delete;

  void run(const Key& key, const std::function<void()>& work);
  void clear();
  // Graphs launched so far (TrainSession::graph_launches: the tests).
  int64_t launches() const { return launches_; }

 private:
  struct Entry {
    int seen = 0;
    void* exec = nullptr;  // cudaGraphExec_t
  };
  Device device_;
  void* stream_;
  std::map<Key, Entry> entries_;
  int64_t launches_ = 0;
};

}  // namespace etr
