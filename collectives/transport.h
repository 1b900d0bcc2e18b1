// Transport: how the collective algorithms move bytes (gloo's split, CONTRIBUTING.md, style 1).
// An algorithm posts non-blocking sends and receives and tests them; it never knows
// whether MPI, shared memory or a socket carries the bytes.
//
// Ordering contract: messages between one pair of ranks with the same tag are matched
// in the order they were posted on both sides (MPI's non-overtaking rule). Every
// algorithm relies on it to pipeline chunks without per-chunk tags.
#pragma once

#include <cstddef>

namespace etr {

class Transport {
 public:
  using Request = int;  // valid until test() has returned true, or cancel()

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Request isend(const void* data, size_t bytes, int peer, int tag) = 0;
  virtual Request irecv(void* data, size_t bytes, int peer, int tag) = 0;
  // Drives progress; true once the request has completed (it is then released).
  virtual bool test(Request request) = 0;
  // Abandons a request after a failure (receives are cancelled; sends are released).
  virtual void cancel(Request request) = 0;
};

}  // namespace etr
