// The typed error hierarchy of etr (CONTRIBUTING.md, style 4).
//
// Library code throws; only main() decides to exit. Every message is a sentence
// that says what is wrong and, where it can, what to do about it.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace etr {

// 'text' for a message: in_quotes("a b") is "'a b'" (as is, not escaped).
inline std::string in_quotes(const std::string& text) {
  std::string s = "'";  // appended, not "'" + ...: GCC 12's -Wrestrict misfires on that at -O3
  s += text;
  s += '\'';
  return s;
}
inline std::string in_quotes(const std::filesystem::path& path) {
  return in_quotes(path.string());
}
inline std::string in_quotes(const char* text) { return in_quotes(std::string(text)); }

// Base of everything etr throws on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A setting, flag or environment variable has a value that cannot be used.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A caller passed arguments that do not fit together (sizes, dtypes, devices).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file could not be read or written.
class IoError : public Error {
 public:
  using Error::Error;
};

// A collective or point-to-point operation failed or timed out.
class CommError : public Error {
 public:
  using Error::Error;
  // A timeout waiting on the rank `peer_world_rank` of MPI_COMM_WORLD.
  CommError(const std::string& what, int peer_world_rank)
      : Error(what), peer_world_rank_(peer_world_rank) {}
  // The world rank this rank waited on when it gave up, or -1.
  int peer_world_rank() const { return peer_world_rank_; }

 private:
  int peer_world_rank_ = -1;
};

// A checkpoint is missing, incomplete or corrupt.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// An allocation would exceed the allocator's byte budget, or the device refused it.
class OutOfMemory : public Error {
 public:
  OutOfMemory(const std::string& what, size_t requested, size_t in_use, size_t peak,
              size_t budget)
      : Error(what), requested_(requested), in_use_(in_use), peak_(peak), budget_(budget) {}
  size_t requested() const { return requested_; }
  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }
  size_t budget() const { return budget_; }

 private:
  size_t requested_;
  size_t in_use_;
  size_t peak_;
  size_t budget_;
};

}  // namespace etr
