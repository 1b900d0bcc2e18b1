#include "bench/disk_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "checkpoint/durable_file.h"
#include "runtime/error.h"

namespace etr::bench {
namespace fs = std::filesystem;
namespace {

// An open file descriptor, closed on every path out.
class Fd {
 public:
  Fd(const fs::path& path, const char* what) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    if (fd_ < 0) fail(path, what);
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

  [[noreturn]] static void fail(const fs::path& path, const char* what, int err = errno) {
    throw IoError(std::string("cannot ") + what + " " + path.string() + ": " + std::strerror(err));
  }

 private:
  int fd_;
};

}  // namespace

void write_sequential(const fs::path& path, const char* data, size_t size) {
  DurableFile file(path);
  for (size_t at = 0; at < size; at += kDiskChunkBytes) {
    file.write(data + at, std::min(kDiskChunkBytes, size - at));
  }
  file.commit();
}

uint64_t read_sequential(const fs::path& path, std::vector<char>& scratch) {
  Fd f(path, "open for reading");
  scratch.resize(kDiskChunkBytes);
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::pread(f.get(), scratch.data(), scratch.size(), static_cast<off_t>(total));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fd::fail(path, "read");
    if (n == 0) return total;
    total += static_cast<uint64_t>(n);
  }
}

void evict_from_page_cache(const fs::path& path) {
  Fd f(path, "open for eviction");
  const int err = ::posix_fadvise(f.get(), 0, 0, POSIX_FADV_DONTNEED);
  if (err != 0) Fd::fail(path, "evict from the page cache (posix_fadvise)", err);
}

double resident_fraction(const fs::path& path) {
  Fd f(path, "open for mincore");
  struct stat st {};
  if (::fstat(f.get(), &st) != 0) Fd::fail(path, "stat");
  if (st.st_size == 0) return 0;
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, f.get(), 0);
  if (map == MAP_FAILED) Fd::fail(path, "mmap");
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in_core((size + page - 1) / page);
  const int rc = ::mincore(map, size, in_core.data());
  const int err = errno;
  ::munmap(map, size);
  if (rc != 0) Fd::fail(path, "query the page cache (mincore)", err);
  const auto resident =
      std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return (c & 1) != 0; });
  return static_cast<double>(resident) / static_cast<double>(in_core.size());
}

std::string file_system_name(const fs::path& path) {
  // The mount whose mount point is the longest prefix of the path decides.
  std::error_code ec;
  const std::string where = fs::weakly_canonical(fs::absolute(path), ec).string();
  std::ifstream mounts("/proc/self/mounts");
  std::string line, best_type = "unknown", best_device, best_point;
  while (std::getline(mounts, line)) {
    std::istringstream fields(line);
    std::string device, point, type;
    if (!(fields >> device >> point >> type)) continue;
    const bool inside =
        where == point || point == "/" || (where.starts_with(point) && where[point.size()] == '/');
    if (inside && point.size() >= best_point.size()) {
      best_type = type, best_device = device, best_point = point;
    }
  }
  return best_device.empty() ? best_type : best_type + " on " + best_device;
}

}  // namespace etr::bench
