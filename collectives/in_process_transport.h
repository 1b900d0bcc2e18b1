// InProcessTransport: ranks as threads of one process over shared queues (gloo's test
// pattern), so that the host algorithms (ring, recursive doubling, hierarchical,
// reduce-scatter) can be swept over many world sizes, odd counts and every dtype in one
// unit test in seconds, also under TSan. The mpirun tests stay for the real transport.
//
// An InProcessFabric is one group of `size` ranks; each thread takes the transport of its
// rank. A send is copied when posted (buffered, as MPI may do) and completes at once; a
// receive completes when a message from its peer with its tag is there, oldest first, so
// the ordering contract of transport.h (per pair and tag, in posting order) holds.
// Thread-safe: one mutex guards the queues. A message larger than the receive is an
// InvalidArgument (a bug in an algorithm), as MPI's truncation error would be.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "collectives/transport.h"

namespace etr {

class InProcessFabric {
 public:
  explicit InProcessFabric(int size);
  int size() const { return size_; }
  // Rank `rank`'s transport (owned by the fabric; one per rank, for one thread at a time).
  Transport& transport(int rank);

 private:
  friend class InProcessTransport;
  struct Message {
    std::vector<uint8_t> bytes;
  };
  struct Receive {
    void* data = nullptr;
    size_t bytes = 0;
    bool done = false;
  };
  using Key = std::tuple<int, int, int>;  // from, to, tag

  int size_;
  std::mutex mutex_;
  std::map<Key, std::deque<Message>> messages_;  // posted, not yet received
  std::vector<std::unique_ptr<Transport>> transports_;
};

}  // namespace etr
