// Disk I/O references for `etr-bench ckpt`: the disk's own sequential bandwidth, measured
// with the same system calls a checkpoint makes but none of its work (no packing, no
// checksum, no manifest), and control of the page cache so that a read measures the disk.
//
//   write_sequential(path, data, n);   // 8 MiB write()s, fsync, rename, fsync dir
//   evict_from_page_cache(path);       // posix_fadvise(DONTNEED): the next read is cold
//   resident_fraction(path);           // mincore(): 0 once evicted, 1 when all cached
//   read_sequential(path, scratch);    // 8 MiB pread()s into `scratch`
//
// Eviction drops clean pages only, so a file must be durable (fsync) first; every file
// this benchmark evicts is. Failures are IoErrors naming the path and the reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace etr::bench {

// The size of one write() or pread() of the references: the checkpoint writer's staging
// size (checkpoint/shard_sink.h), so both hand the kernel the same pieces.
inline constexpr size_t kDiskChunkBytes = size_t{8} << 20;

// Writes data[0, size) to `path` through DurableFile (checkpoint/durable_file.h): write()
// in kDiskChunkBytes pieces, fsync, rename into place, fsync the directory.
void write_sequential(const std::filesystem::path& path, const char* data, size_t size);

// Reads the whole file with pread() in kDiskChunkBytes pieces into `scratch` (resized to
// one piece; the bytes are overwritten, as a loader's destination would be). Returns the
// bytes read.
uint64_t read_sequential(const std::filesystem::path& path, std::vector<char>& scratch);

// Asks the kernel to drop the file's pages from the page cache (posix_fadvise
// POSIX_FADV_DONTNEED); dirty pages are not dropped, so fsync first.
void evict_from_page_cache(const std::filesystem::path& path);

// The fraction of the file's pages in the page cache (mmap + mincore); 0 for an empty file.
double resident_fraction(const std::filesystem::path& path);

// The file system holding `path`, by statfs magic: "ext4", "xfs", "tmpfs", ... or
// "unknown (0x...)".
std::string file_system_name(const std::filesystem::path& path);

}  // namespace etr::bench
