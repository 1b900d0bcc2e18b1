#include "collectives/in_process_transport.h"

#include <cstring>
#include <string>
#include <unordered_map>

#include "runtime/error.h"

namespace etr {

class InProcessTransport final : public Transport {
 public:
  InProcessTransport(InProcessFabric& fabric, int rank) : fabric_(fabric), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return fabric_.size(); }

  Request isend(const void* data, size_t bytes, int peer, int tag) override {
    check_peer(peer);
    InProcessFabric::Message m;
    m.bytes.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + bytes);
    {
      std::lock_guard<std::mutex> lock(fabric_.mutex_);
      fabric_.messages_[{rank_, peer, tag}].push_back(std::move(m));
    }
    const Request id = next_++;
    sends_.emplace(id, true);
    return id;
  }

  Request irecv(void* data, size_t bytes, int peer, int tag) override {
    check_peer(peer);
    const Request id = next_++;
    receives_.emplace(id, Pending{data, bytes, peer, tag});
    // Receives from one peer with one tag complete in posting order: a later one waits
    // behind an earlier one still open.
    order_[{peer, rank_, tag}].push_back(id);
    return id;
  }

  bool test(Request request) override {
    if (sends_.erase(request)) return true;
    auto it = receives_.find(request);
    if (it == receives_.end()) throw InvalidArgument("in-process transport: unknown request");
    const Pending& p = it->second;
    auto& queue = order_[{p.peer, rank_, p.tag}];
    if (queue.front() != request) return false;  // an earlier receive comes first
    {
      std::lock_guard<std::mutex> lock(fabric_.mutex_);
      auto& box = fabric_.messages_[{p.peer, rank_, p.tag}];
      if (box.empty()) return false;
      const InProcessFabric::Message& m = box.front();
      if (m.bytes.size() > p.bytes) {
        throw InvalidArgument("in-process transport: a message of " + std::to_string(m.bytes.size()) +
                              " bytes for a receive of " + std::to_string(p.bytes));
      }
      if (!m.bytes.empty()) std::memcpy(p.data, m.bytes.data(), m.bytes.size());
      box.pop_front();
    }
    queue.pop_front();
    receives_.erase(it);
    return true;
  }

  void cancel(Request request) override {
    sends_.erase(request);
    auto it = receives_.find(request);
    if (it == receives_.end()) return;
    auto& queue = order_[{it->second.peer, rank_, it->second.tag}];
    for (auto q = queue.begin(); q != queue.end(); ++q) {
      if (*q == request) {
        queue.erase(q);
        break;
      }
    }
    receives_.erase(it);
  }

 private:
  struct Pending {
    void* data;
    size_t bytes;
    int peer, tag;
  };
  void check_peer(int peer) const {
    if (peer < 0 || peer >= fabric_.size()) {
      throw InvalidArgument("in-process transport: peer " + std::to_string(peer) + " of " +
                            std::to_string(fabric_.size()) + " ranks");
    }
  }

  InProcessFabric& fabric_;
  int rank_;
  Request next_ = 0;
  std::unordered_map<Request, bool> sends_;
  std::unordered_map<Request, Pending> receives_;
  std::map<InProcessFabric::Key, std::deque<Request>> order_;
};

InProcessFabric::InProcessFabric(int size) : size_(size) {
  if (size < 1) throw InvalidArgument("in-process fabric: size " + std::to_string(size));
  for (int r = 0; r < size; ++r) transports_.push_back(std::make_unique<InProcessTransport>(*this, r));
}

Transport& InProcessFabric::transport(int rank) { return *transports_.at(static_cast<size_t>(rank)); }

}  // namespace etr
