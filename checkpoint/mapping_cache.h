// MappingCache: the memory tier's tmpfs files stay mapped between saves. A save writes
// over a recycled file (checkpoint/memory_restore.h, recycled_shard), the same inode each
// time or two; mapping it afresh costs MAP_POPULATE (a page-table entry per 4 KiB page)
// and munmap every save, a fifth of the writer's CPU (docs/architecture.md, "The memory
// tier"). The cache keeps each inode's mapping and gives it back when the same inode is
// mapped again at the same size.
//
//   MappingCache cache;
//   DurableFile f(path, recycled);
//   std::span<char> bytes = f.map(size, &cache);   // cached, or mapped and kept
//
// A cached mapping holds its file's pages: mappings of files that no longer exist (link
// count 0) are dropped at every map(), and at most `capacity` are kept (the least recently
// used goes). Not thread-safe: one writer thread uses one cache.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace etr {

class MappingCache {
 public:
  // `capacity`: more than the files one save maps through this cache, which then all stay
  // mapped until it returns (a buddy receives a file from each rank it is the buddy of).
  explicit MappingCache(size_t capacity = 16) : capacity_(capacity) {}
  ~MappingCache();
  MappingCache(const MappingCache&) = delete;
  MappingCache& operator=(const MappingCache&) = delete;

  // `size` bytes of the open file `fd` (already that size, its space allocated), mapped
  // shared and writable. Returns the cached mapping of its inode when there is one of
  // that size; errno-style failure: an empty span with errno set (the caller words it).
  std::span<char> map(int fd, size_t size);
  size_t size() const { return entries_.size(); }
  // Cache hits since construction (for tests and logs).
  uint64_t hits() const { return hits_; }

 private:
  struct Entry {
    dev_t dev;
    ino_t ino;
    int fd;  // a duplicate: the link count is checked through it
    std::span<char> bytes;
    uint64_t used;
  };
  void drop(size_t i);
  void drop_unlinked();

  size_t capacity_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0, hits_ = 0;
};

}  // namespace etr
