#include "checkpoint/peer_read.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <memory>

#include "checkpoint/agreement.h"
#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"

namespace etr {
namespace {

// A shard file mapped read-only for sending, unmapped at the end (or never, when a send
// may still be in flight: see read_with_peers).
struct Mapping {
  char* data = nullptr;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data != nullptr) ::munmap(data, size);
  }
};

// Maps `path` (read-only, whole); "" or why not.
std::string map_file(const std::filesystem::path& path, Mapping& m) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open " + path.string() + " to send it: " + std::strerror(errno);
  struct stat st {};
  std::string error;
  if (::fstat(fd, &st) != 0) {
    error = "cannot stat " + path.string() + ": " + std::strerror(errno);
  } else if (st.st_size > 0) {
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      error = "cannot map " + path.string() + ": " + std::strerror(errno);
    } else {
      m.data = static_cast<char*>(p);
      m.size = static_cast<size_t>(st.st_size);
    }
  }
  ::close(fd);
  return error;
}

// Everything the posted messages read or write besides the callers' destinations: kept
// alive (leaked) when a wait times out.
struct Exchange {
  std::vector<int> send_counts, recv_counts, send_displs, recv_displs;  // in uint64s
  std::vector<uint64_t> asked, asked_of_me;  // (file, offset, bytes) triples
  std::map<int, Mapping> mapped;             // file -> its mapping (a holder's)
  std::vector<MPI_Request> requests;
};

// Step 1: this rank's requests to each holder, and the requests made of this rank.
void exchange_requests(Exchange& x, const std::vector<std::vector<const ShardRead*>>& remote,
                       const Group& group) {
  const size_t ranks = static_cast<size_t>(group.size());
  x.send_counts.assign(ranks, 0);
  x.recv_counts.assign(ranks, 0);
  x.send_displs.assign(ranks, 0);
  x.recv_displs.assign(ranks, 0);
  for (size_t p = 0; p < ranks; ++p) {
    x.send_counts[p] = static_cast<int>(remote[p].size() * 3);
    for (const ShardRead* r : remote[p]) {
      x.asked.insert(x.asked.end(), {static_cast<uint64_t>(r->file), r->offset, r->bytes});
    }
    if (p > 0) x.send_displs[p] = x.send_displs[p - 1] + x.send_counts[p - 1];
  }
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ialltoall(x.send_counts.data(), 1, MPI_INT, x.recv_counts.data(), 1, MPI_INT,
                          group.comm(), &request));
  wait_with_timeout(request, "the memory checkpoint's read requests (counts)");
  for (size_t p = 1; p < ranks; ++p) x.recv_displs[p] = x.recv_displs[p - 1] + x.recv_counts[p - 1];
  x.asked_of_me.assign(static_cast<size_t>(x.recv_displs[ranks - 1] + x.recv_counts[ranks - 1]), 0);
  MPI_CHECK(MPI_Ialltoallv(x.asked.data(), x.send_counts.data(), x.send_displs.data(),
                           MPI_UINT64_T, x.asked_of_me.data(), x.recv_counts.data(),
                           x.recv_displs.data(), MPI_UINT64_T, group.comm(), &request));
  wait_with_timeout(request, "the memory checkpoint's read requests");
}

// Step 2: a holder maps what it was asked for and checks each request; "" or why not.
std::string map_asked(Exchange& x, const CheckpointReader& reader) {
  const ckpt::Manifest& m = reader.manifest();
  for (size_t i = 0; i + 2 < x.asked_of_me.size(); i += 3) {
    const uint64_t file = x.asked_of_me[i], offset = x.asked_of_me[i + 1], bytes = x.asked_of_me[i + 2];
    if (file >= static_cast<uint64_t>(m.files_size())) return "a read request names no file of the manifest";
    const auto path = reader.dir() / m.files(static_cast<int>(file)).name();
    Mapping& map = x.mapped[static_cast<int>(file)];
    if (map.data == nullptr) {
      if (std::string e = map_file(path, map); !e.empty()) return e;
    }
    if (offset > map.size || bytes > map.size - offset) {
      return path.string() + " is " + std::to_string(map.size) + " bytes, too short for the " +
             std::to_string(bytes) + " asked for at offset " + std::to_string(offset);
    }
  }
  return "";
}

// Step 3: every send and receive posted, in request order on both sides of each pair.
void post_transfers(Exchange& x, const std::vector<std::vector<const ShardRead*>>& remote,
                    const Group& group, PeerReadResult& result) {
  for (size_t p = 0; p < remote.size(); ++p) {
    const size_t end = static_cast<size_t>(x.recv_displs[p] + x.recv_counts[p]);
    for (size_t i = static_cast<size_t>(x.recv_displs[p]); i < end; i += 3) {
      const Mapping& map = x.mapped.at(static_cast<int>(x.asked_of_me[i]));
      post_pieces(x.requests, map.data + x.asked_of_me[i + 1], x.asked_of_me[i + 2],
                  static_cast<int>(p), group.comm(), /*send=*/true);
      result.sent_bytes += x.asked_of_me[i + 2];
    }
    for (const ShardRead* r : remote[p]) {
      post_pieces(x.requests, r->dest, r->bytes, static_cast<int>(p), group.comm(), /*send=*/false);
      result.received_bytes += r->bytes;
    }
  }
}

}  // namespace

std::string read_with_peers(CheckpointReader& reader, const PeerFiles& files,
                            std::span<const ShardRead> reads, const Group& group,
                            PeerReadResult& result) {
  std::vector<const ShardRead*> local;
  std::vector<std::vector<const ShardRead*>> remote(static_cast<size_t>(group.size()));
  for (const ShardRead& r : reads) {
    const size_t f = static_cast<size_t>(r.file);
    if (files.here[f] != 0) {
      local.push_back(&r);
    } else {
      remote[static_cast<size_t>(files.holder[f])].push_back(&r);
    }
  }
  auto x = std::make_shared<Exchange>();
  std::string error;
  try {
    exchange_requests(*x, remote, group);
    error = first_error(group, map_asked(*x, reader));
    if (!error.empty()) return error;
    post_transfers(*x, remote, group, result);
    try {  // this host's files while the messages travel (MPI advanced between reads)
      for (const ShardRead* r : local) {
        reader.read(std::span<const ShardRead>(r, 1));
        result.local_bytes += r->bytes;
        int done = 0;
        MPI_CHECK(MPI_Testall(static_cast<int>(x->requests.size()), x->requests.data(), &done,
                              MPI_STATUSES_IGNORE));
      }
    } catch (const std::exception& e) {
      error = e.what();  // after the waits: the peers still need this rank's sends
    }
    for (MPI_Request& r : x->requests) {
      wait_with_timeout(r, "the memory checkpoint's byte ranges between hosts");
    }
  } catch (...) {
    // A timeout, or a failure while messages were being posted: they may still be
    // active, so their buffers and mappings stay (leaked on purpose).
    if (!x->requests.empty()) static_cast<void>(new std::shared_ptr<Exchange>(x));
    throw;
  }
  return error;
}

}  // namespace etr
