// DurableFile: writes one file so that its path names either the previous file (or
// nothing) or the complete new one, and the new one is on disk once commit() returns
// (docs/design.md, "Checkpoints": write, fsync, rename).
//
//   DurableFile f(dir / "shard-00003.bin");   // creates "<path>.tmp.<pid>"
//   f.write(data, n);                          // any number of times
//   f.commit();                                // fsync, rename over <path>, fsync dir
//
// Invariants: until commit() has renamed the temporary file, `path` is untouched; a
// DurableFile destroyed without a successful commit() (an exception, a failed write)
// removes its temporary file. One writer per path per process (the temporary name is
// made unique by the process id only). Every failure is an IoError naming the path,
// the operation and the system's reason (strerror).
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

#include <sys/uio.h>

namespace etr {

class MappingCache;

class DurableFile {
 public:
  // Creates (or truncates) the temporary file beside `path`; the directory must exist.
  // direct_io: write around the page cache (O_DIRECT) while the writes are aligned
  // (address, size and file offset multiples of kDirectAlignment); the first write that
  // is not, and any file system without O_DIRECT, continues through the page cache. The
  // bytes are the same either way; a background writer spends far less CPU (no copy into
  // the page cache), which is what it shares with training.
  explicit DurableFile(std::filesystem::path path, bool direct_io = false);
  // The same, writing over the pages of the file `reuse` (renamed to the temporary name;
  // truncated to what was written at commit) when it exists: a tmpfs file written again
  // this way costs no fresh pages (the memory tier recycles its pruned shards this way).
  DurableFile(std::filesystem::path path, const std::filesystem::path& reuse);
  static constexpr size_t kDirectAlignment = 4096;
  ~DurableFile();
  DurableFile(const DurableFile&) = delete;
  DurableFile& operator=(const DurableFile&) = delete;

  // Appends `size` bytes; partial writes and EINTR are retried.
  void write(const void* data, size_t size);
  // Appends the pieces in order with writev (one system call for many small pieces).
  void write(std::span<const iovec> pieces);
  // Instead of write(): the whole file as `size` writable bytes of memory, mapped
  // MAP_SHARED and faulted in at once (the memory tier copies its snapshot straight into
  // its tmpfs file this way, with no second copy through write()). The space is
  // allocated first, so a full file system is an IoError here rather than a SIGBUS on
  // a store. The mapping stays valid after commit(), until this object is destroyed;
  // with `cache`, it is the cache's (kept for the next save over the same file, and valid
  // as long as the cache keeps it: until the cache's next map()).
  std::span<char> map(size_t size, MappingCache* cache = nullptr);
  // fsync the file, rename it over path(), fsync the directory. When only the last step
  // fails the new file is in place but may not survive a crash; it still throws.
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temp_path() const { return temp_path_; }
  size_t bytes_written() const { return written_; }
  bool committed() const { return committed_; }

 private:
  [[noreturn]] void fail(const std::string& what, int error_number);
  void close_fd();
  void discard() noexcept;  // closes and removes our temporary file, ignoring errors
  void stop_direct();       // clears O_DIRECT: later writes go through the page cache

  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  int fd_ = -1;
  size_t written_ = 0;
  bool temp_exists_ = false;  // this object created temp_path_ and has not renamed it
  bool direct_ = false;       // the descriptor has O_DIRECT
  bool committed_ = false;
  bool truncate_at_commit_ = false;  // written over a reused file
  std::span<char> mapped_;            // map()
  bool owns_mapping_ = false;         // unmapped by the destructor (no cache)
};

// fsync a directory, so that renames and creations inside it survive a crash (file
// systems that cannot fsync a directory count as done). IoError naming it on failure.
void fsync_directory(const std::filesystem::path& dir);

// The whole of data[0, size) into `path`, durably, in one call.
void write_file_durably(const std::filesystem::path& path, const void* data, size_t size);

}  // namespace etr
