#include "checkpoint/mapping_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace etr {

MappingCache::~MappingCache() {
  while (!entries_.empty()) drop(entries_.size() - 1);
}

void MappingCache::drop(size_t i) {
  ::munmap(entries_[i].bytes.data(), entries_[i].bytes.size());
  ::close(entries_[i].fd);
  entries_.erase(entries_.begin() + static_cast<long>(i));
}

// A mapping of a deleted file is all that holds its pages: let them go.
void MappingCache::drop_unlinked() {
  for (size_t i = entries_.size(); i-- > 0;) {
    struct stat st {};
    if (::fstat(entries_[i].fd, &st) != 0 || st.st_nlink == 0) drop(i);
  }
}

std::span<char> MappingCache::map(int fd, size_t size) {
  drop_unlinked();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return {};
  ++clock_;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.dev != st.st_dev || e.ino != st.st_ino) continue;
    if (e.bytes.size() == size) {
      e.used = clock_;
      ++hits_;
      return e.bytes;
    }
    drop(i);  // the same file at another size: mapped again
    break;
  }
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (at == MAP_FAILED) return {};
  const int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    const int err = errno;
    ::munmap(at, size);
    errno = err;
    return {};
  }
  if (entries_.size() >= capacity_) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.used < b.used; });
    drop(static_cast<size_t>(oldest - entries_.begin()));
  }
  entries_.push_back(Entry{st.st_dev, st.st_ino, copy, {static_cast<char*>(at), size}, clock_});
  return entries_.back().bytes;
}

}  // namespace etr
