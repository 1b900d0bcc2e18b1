#include "checkpoint/buddy_link.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>

#include "checkpoint/agreement.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/memory_restore.h"
#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"

namespace etr {
namespace fs = std::filesystem;
namespace {

std::array<char, 64> this_host_name() {
  std::array<char, 64> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) std::strcpy(name.data(), "?");
  name.back() = '\0';
  return name;
}

}  // namespace

std::vector<int> gather_hosts(const Group& group, std::vector<std::string>* names) {
  const std::vector<std::array<char, 64>> all = all_gather(group, this_host_name());
  std::map<std::string, int> number;
  std::vector<int> host_of;
  for (const auto& n : all) {
    const std::string name(n.data());
    auto [it, fresh] = number.emplace(name, static_cast<int>(number.size()));
    if (fresh && names) names->push_back(name);
    host_of.push_back(it->second);
  }
  return host_of;
}

std::vector<int> buddy_ranks(const std::vector<int>& host_of) {
  const int hosts = host_of.empty() ? 0 : *std::max_element(host_of.begin(), host_of.end()) + 1;
  std::vector<int> out(host_of.size(), -1);
  if (hosts < 2) return out;
  std::vector<std::vector<int>> ranks(static_cast<size_t>(hosts));  // [host]: its ranks, ascending
  for (size_t q = 0; q < host_of.size(); ++q) {
    ranks[static_cast<size_t>(host_of[q])].push_back(static_cast<int>(q));
  }
  for (int h = 0; h < hosts; ++h) {
    const auto& next = ranks[static_cast<size_t>((h + 1) % hosts)];
    const auto& mine = ranks[static_cast<size_t>(h)];
    for (size_t i = 0; i < mine.size(); ++i) out[static_cast<size_t>(mine[i])] = next[i % next.size()];
  }
  return out;
}

BuddyLink::BuddyLink(const Group& group) : comm_(group.dup(group.name() + ".buddy")) {
  host_of_ = gather_hosts(comm_, &host_names_);
  const int me = comm_.rank();
  leader_ = std::find(host_of_.begin(), host_of_.end(), host_of(me)) - host_of_.begin() == me;
  if (hosts() < 2) return;
  const std::vector<int> buddies = buddy_ranks(host_of_);
  buddy_ = buddies[static_cast<size_t>(me)];
  for (int r = 0; r < comm_.size(); ++r) {
    if (buddies[static_cast<size_t>(r)] == me) senders_.push_back(r);
  }
  received_.resize(senders_.size());
}

BuddyLink::~BuddyLink() = default;

std::string BuddyLink::exchange(std::span<const char> mine, const ShardPlan& plan,
                                const fs::path& dir) {
  if (buddy_ < 0) return "";
  std::vector<MPI_Request> requests;
  std::string error;
  try {
    incoming_.clear();  // the previous save's files (unmapped; committed or removed)
    for (size_t i = 0; i < senders_.size(); ++i) {
      const std::string name = plan.file_name(senders_[i]);
      const size_t size = plan.file_bytes(senders_[i]);
      std::span<char> into;
      try {  // received straight into the file in the tmpfs (over a recycled file's pages)
        auto file = std::make_unique<DurableFile>(dir / name, recycled_shard(dir.parent_path(), name));
        into = file->map(size, &mappings_);
        incoming_.push_back(std::move(file));
      } catch (const IoError& e) {  // the sender is not kept waiting: taken all the same
        if (error.empty()) error = e.what();
        incoming_.push_back(nullptr);
        received_[i].resize(size);
        into = received_[i];
      }
      post_pieces(requests, into.data(), size, senders_[i], comm_.comm(), false);
    }
    post_pieces(requests, const_cast<char*>(mine.data()), mine.size(), buddy_, comm_.comm(), true);
    const std::string what = "the memory tier's copy to and from the buddy ranks";
    for (MPI_Request& r : requests) wait_with_timeout(r, what.c_str());
    for (size_t i = 0; i < senders_.size(); ++i) {
      if (!incoming_[i]) continue;
      incoming_[i]->commit();
      write_file_durably(dir / (plan.file_name(senders_[i]) + kBuddyMarkerSuffix), nullptr, 0);
    }
  } catch (const std::exception& e) {
    // A request still active after a timeout keeps its buffer: incoming_ and received_ live
    // as long as the writer, and a later save replaces them only after its own waits.
    return std::string("the buddy copy failed: ") + e.what();
  }
  return error.empty() ? "" : "the buddy copy failed: " + error;
}

}  // namespace etr
