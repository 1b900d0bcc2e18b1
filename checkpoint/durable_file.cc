// DurableFile: write to "<path>.tmp.<pid>", fsync, rename over <path>, fsync the
// directory (see durable_file.h for the guarantees).
#include "checkpoint/durable_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/mapping_cache.h"
#include "runtime/error.h"

namespace etr {

namespace {

std::filesystem::path directory_of(const std::filesystem::path& p) {
  std::filesystem::path dir = p.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

}  // namespace

DurableFile::DurableFile(std::filesystem::path path, bool direct_io)
    : path_(std::move(path)), temp_path_(path_.string() + ".tmp." + std::to_string(::getpid())) {
  const int flags = O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC;
  if (direct_io) {
    fd_ = ::open(temp_path_.c_str(), flags | O_DIRECT, 0644);
    direct_ = fd_ >= 0;
  }
  if (fd_ < 0) fd_ = ::open(temp_path_.c_str(), flags, 0644);  // (tmpfs has no O_DIRECT)
  if (fd_ >= 0) {
    temp_exists_ = true;
  } else {
    int err = errno;
    throw IoError("cannot create the temporary file " + in_quotes(temp_path_) + " for " +
                  in_quotes(path_) + ": " + std::strerror(err) +
                  "; check that the directory exists and is writable");
  }
}

DurableFile::DurableFile(std::filesystem::path path, const std::filesystem::path& reuse)
    : path_(std::move(path)), temp_path_(path_.string() + ".tmp." + std::to_string(::getpid())) {
  if (!reuse.empty() && ::rename(reuse.c_str(), temp_path_.c_str()) == 0) {
    fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CLOEXEC);  // (read too: map() needs it)
    truncate_at_commit_ = fd_ >= 0;
  }
  if (fd_ < 0) fd_ = ::open(temp_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    int err = errno;
    throw IoError("cannot create the temporary file " + in_quotes(temp_path_) + " for " +
                  in_quotes(path_) + ": " + std::strerror(err) +
                  "; check that the directory exists and is writable");
  }
  temp_exists_ = true;
}

DurableFile::~DurableFile() {
  if (owns_mapping_) ::munmap(mapped_.data(), mapped_.size());
  discard();
}

std::span<char> DurableFile::map(size_t size, MappingCache* cache) {
  if (committed_ || fd_ < 0 || written_ != 0 || !mapped_.empty()) {
    throw InvalidArgument("DurableFile::map for " + in_quotes(path_) +
                          " needs a new file that nothing was written to");
  }
  if (size == 0) return {};
  if (direct_) stop_direct();
  // Allocated before any store: a full tmpfs fails here, not with SIGBUS in the copy.
  if (int err = ::posix_fallocate(fd_, 0, static_cast<off_t>(size)); err != 0)
    fail("reserve space for", err);
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) fail("size", errno);
  if (cache) {
    mapped_ = cache->map(fd_, size);
    if (mapped_.empty()) fail("map", errno);
  } else {
    void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
    if (at == MAP_FAILED) fail("map", errno);
    mapped_ = std::span<char>(static_cast<char*>(at), size);
    owns_mapping_ = true;
  }
  written_ = size;
  return mapped_;
}

void DurableFile::fail(const std::string& what, int error_number) {
  discard();
  throw IoError("cannot " + what + " " + in_quotes(path_) + " (temporary file " +
                in_quotes(temp_path_) + "): " + std::strerror(error_number) +
                "; check free space, quotas and file size limits of the file system");
}

void DurableFile::write(const void* data, size_t size) {
  if (committed_) {
    throw InvalidArgument("DurableFile for " + in_quotes(path_) +
                          " was already committed; create a new one to write the file again");
  }
  if (fd_ < 0) {
    throw InvalidArgument("DurableFile for " + in_quotes(path_) +
                          " failed earlier and has no file left; create a new one");
  }
  const char* p = static_cast<const char*>(data);
  if (direct_ && (reinterpret_cast<uintptr_t>(p) % kDirectAlignment != 0 ||
                  size % kDirectAlignment != 0 || written_ % kDirectAlignment != 0)) {
    stop_direct();
  }
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EINVAL && direct_) {  // the file system refuses it after all
        stop_direct();
        continue;
      }
      fail("write", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<size_t>(n);
  }
}

void DurableFile::write(std::span<const iovec> pieces) {
  if (direct_ && fd_ >= 0 && !committed_) stop_direct();  // writev pieces are not aligned
  std::vector<iovec> left(pieces.begin(), pieces.end());
  size_t first = 0;
  while (first < left.size()) {
    if (committed_ || fd_ < 0) {
      write(nullptr, 0);  // throws the right sentence
      return;
    }
    const int count = static_cast<int>(std::min<size_t>(left.size() - first, IOV_MAX));
    ssize_t n = ::writev(fd_, left.data() + first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", errno);
    }
    written_ += static_cast<size_t>(n);
    // Skip what was written; a partly written piece continues where it stopped.
    size_t done = static_cast<size_t>(n);
    while (first < left.size() && done >= left[first].iov_len) done -= left[first++].iov_len;
    if (first < left.size()) {
      left[first].iov_base = static_cast<char*>(left[first].iov_base) + done;
      left[first].iov_len -= done;
    }
  }
}

void DurableFile::stop_direct() {
  direct_ = false;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) fail("clear O_DIRECT", errno);
}

void DurableFile::close_fd() {
  int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0 && errno != EINTR) fail("close", errno);
}

void DurableFile::commit() {
  if (committed_) return;
  if (fd_ < 0) {
    throw InvalidArgument("DurableFile for " + in_quotes(path_) +
                          " failed earlier and has nothing to commit; create a new one");
  }
  if (truncate_at_commit_ && ::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
    fail("truncate the reused file", errno);
  }
  while (::fsync(fd_) != 0) {
    if (errno != EINTR) fail("flush (fsync)", errno);
  }
  close_fd();
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) fail("rename into place", errno);
  temp_exists_ = false;
  committed_ = true;

  // The rename is durable only once the directory entry is: fsync the directory.
  try {
    fsync_directory(directory_of(path_));
  } catch (const IoError& e) {
    throw IoError("wrote " + in_quotes(path_) + " but " + e.what() +
                  "; the file may not survive a crash, check the file system");
  }
}

void fsync_directory(const std::filesystem::path& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = 0;
  if (dfd < 0) {
    err = errno;
  } else {
    while (::fsync(dfd) != 0) {
      if (errno == EINTR) continue;
      // Some file systems cannot fsync a directory; they have nothing more to flush.
      if (errno != EINVAL && errno != EROFS) err = errno;
      break;
    }
    ::close(dfd);
  }
  if (err != 0) {
    throw IoError("cannot flush the directory " + in_quotes(dir) + ": " + std::strerror(err));
  }
}

void DurableFile::discard() noexcept {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  // Only a file this object created: a later DurableFile for the same path reuses the name.
  if (std::exchange(temp_exists_, false)) ::unlink(temp_path_.c_str());
}

void write_file_durably(const std::filesystem::path& path, const void* data, size_t size) {
  DurableFile file(path);
  file.write(data, size);
  file.commit();
}

}  // namespace etr
