#include "checkpoint/agreement.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"

namespace etr {
namespace detail {

void wait_agreement(const Group& group, const char* op, MPI_Request& request,
                    std::shared_ptr<void> buffers) {
  const std::string what = std::string("checkpoint agreement ") + op + " on group '" +
                           group.name() + "' (rank " + std::to_string(group.rank()) + " of " +
                           std::to_string(group.size()) + ")";
  try {
    wait_with_timeout(request, what.c_str());
  } catch (const CommError&) {
    // Leaked on purpose: the request is still active (see agreement.h).
    static_cast<void>(new std::shared_ptr<void>(std::move(buffers)));
    throw;
  }
}

}  // namespace detail

std::string first_error(const Group& group, const std::string& local) {
  // Three collectives in turn: the lowest failing rank (MIN over rank, or size for "no
  // error"), the length of its sentence, the sentence.
  struct Buffers {
    int mine = 0, first = 0;
    uint64_t length = 0;
    std::string text;
  };
  auto b = std::make_shared<Buffers>();
  b->mine = local.empty() ? group.size() : group.rank();
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&b->mine, &b->first, 1, MPI_INT, MPI_MIN, group.comm(), &request));
  detail::wait_agreement(group, "first_error", request, b);
  const int first = b->first;
  if (first == group.size()) return "";
  if (group.rank() == first) b->length = local.size();
  MPI_CHECK(MPI_Ibcast(&b->length, 1, MPI_UINT64_T, first, group.comm(), &request));
  detail::wait_agreement(group, "first_error", request, b);
  b->text = group.rank() == first ? local : std::string(b->length, '\0');
  MPI_CHECK(MPI_Ibcast(b->text.data(), static_cast<int>(b->length), MPI_CHAR, first, group.comm(),
                       &request));
  detail::wait_agreement(group, "first_error", request, b);
  return std::move(b->text);
}

bool all_true(const Group& group, bool flag) {
  struct Buffers {
    int mine = 0, all = 0;
  };
  auto b = std::make_shared<Buffers>();
  b->mine = flag ? 1 : 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&b->mine, &b->all, 1, MPI_INT, MPI_MIN, group.comm(), &request));
  detail::wait_agreement(group, "all_true", request, b);
  return b->all == 1;
}

std::string broadcast_bytes(const Group& group, const std::string& bytes, int root) {
  const uint64_t length = broadcast<uint64_t>(group, bytes.size(), root);
  auto text = std::make_shared<std::string>(group.rank() == root ? bytes : std::string(length, '\0'));
  constexpr uint64_t kPiece = uint64_t{64} << 20;
  for (uint64_t at = 0; at < length; at += kPiece) {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_CHECK(MPI_Ibcast(text->data() + at, static_cast<int>(std::min(kPiece, length - at)),
                         MPI_CHAR, root, group.comm(), &request));
    detail::wait_agreement(group, "broadcast_bytes", request, text);
  }
  return std::move(*text);
}

std::vector<int64_t> all_min(const Group& group, const std::vector<int64_t>& values) {
  struct Buffers {
    std::vector<int64_t> mine, min;
  };
  auto b = std::make_shared<Buffers>(Buffers{values, values});
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(b->mine.data(), b->min.data(), static_cast<int>(values.size()),
                           MPI_INT64_T, MPI_MIN, group.comm(), &request));
  detail::wait_agreement(group, "all_min", request, b);
  return std::move(b->min);
}

std::vector<uint8_t> all_gather_bytes(const Group& group, const std::vector<uint8_t>& values) {
  struct Buffers {
    std::vector<uint8_t> mine, all;
  };
  auto b = std::make_shared<Buffers>(
      Buffers{values, std::vector<uint8_t>(values.size() * static_cast<size_t>(group.size()))});
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(b->mine.data(), static_cast<int>(values.size()), MPI_BYTE,
                           b->all.data(), static_cast<int>(values.size()), MPI_BYTE, group.comm(),
                           &request));
  detail::wait_agreement(group, "all_gather_bytes", request, b);
  return std::move(b->all);
}

void post_pieces(std::vector<MPI_Request>& requests, char* bytes, size_t size, int peer,
                 MPI_Comm comm, bool send) {
  constexpr size_t kPiece = size_t{64} << 20;
  const size_t pieces = std::max<size_t>(1, (size + kPiece - 1) / kPiece);
  for (size_t k = 0; k < pieces; ++k) {
    const size_t at = std::min(size, k * kPiece);
    const int n = static_cast<int>(std::min(kPiece, size - at));
    const int tag = static_cast<int>(k);
    MPI_Request r = MPI_REQUEST_NULL;
    if (send) {
      MPI_CHECK(MPI_Isend(bytes + at, n, MPI_BYTE, peer, tag, comm, &r));
    } else {
      MPI_CHECK(MPI_Irecv(bytes + at, n, MPI_BYTE, peer, tag, comm, &r));
    }
    requests.push_back(r);
  }
}

}  // namespace etr
