// Checksum: XXH3-64 through libxxhash's streaming API (see checksum.h).
#include "checkpoint/checksum.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "runtime/error.h"

namespace etr {

namespace {

XXH3_state_t* new_state() {
  XXH3_state_t* s = XXH3_createState();
  if (!s) throw std::bad_alloc();
  XXH3_64bits_reset(s);
  return s;
}

}  // namespace

Checksum::Checksum() : state_(new_state()) {}

Checksum::~Checksum() {
  if (state_) XXH3_freeState(state_);
}

Checksum::Checksum(Checksum&& other) noexcept : state_(std::exchange(other.state_, nullptr)) {}

Checksum& Checksum::operator=(Checksum&& other) noexcept {
  if (this != &other) {
    if (state_) XXH3_freeState(state_);
    state_ = std::exchange(other.state_, nullptr);
  }
  return *this;
}

void Checksum::update(const void* data, size_t size) {
  if (size == 0) return;
  if (!state_) state_ = new_state();  // a moved-from Checksum starts again, empty
  XXH3_64bits_update(state_, data, size);
}

uint64_t Checksum::digest() const {
  return state_ ? XXH3_64bits_digest(state_) : XXH3_64bits(nullptr, 0);
}

void Checksum::reset() {
  if (!state_) state_ = new_state();
  XXH3_64bits_reset(state_);
}

uint64_t Checksum::of(const void* data, size_t size) {
  return XXH3_64bits(data, size);
}

uint64_t Checksum::of_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw IoError("cannot open '" + path.string() + "' to checksum it: " + std::strerror(err) +
                  "; check that the file exists and is readable");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  constexpr size_t kPiece = size_t{1} << 20;
  std::vector<char> buf(kPiece);
  Checksum sum;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      throw IoError("cannot read '" + path.string() + "' to checksum it: " + std::strerror(err) +
                    "; check the file and the disk");
    }
    sum.update(buf.data(), static_cast<size_t>(n));
  }
  return sum.digest();
}

std::string format_checksum(uint64_t digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, digest >>= 4) s[static_cast<size_t>(i)] = kDigits[digest & 0xf];
  return s;
}

uint64_t parse_checksum(std::string_view text) {
  uint64_t v = 0;
  bool ok = text.size() == 16;
  for (size_t i = 0; ok && i < text.size(); ++i) {
    char c = text[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    ok = d >= 0;
    v = (v << 4) | static_cast<uint64_t>(d & 0xf);
  }
  if (!ok) {
    throw CheckpointError("'" + std::string(text) +
                          "' is not a checksum (16 hex digits of XXH3-64); the manifest is "
                          "corrupt, restore from an older checkpoint");
  }
  return v;
}

}  // namespace etr
