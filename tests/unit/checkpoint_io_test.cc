// Tests of checkpoint/durable_file.h and checkpoint/checksum.h, the first pieces of the
// checkpoint writer. Checksums are compared with libxxhash's one-shot XXH3_64bits on
// the whole buffer and with published XXH3 test vectors; files are read back with
// std::ifstream; write failures are real ones (a missing directory, a file size limit,
// a directory in the way), not simulated.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/mapping_cache.h"
#include "checkpoint/memory_restore.h"
#include "runtime/error.h"

namespace etr {
namespace {

namespace fs = std::filesystem;

std::vector<char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

std::vector<char> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A fresh directory per test, removed afterwards.
class CheckpointIo : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "etr-ckpt-io-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Names in the directory, so tests can see that no temporary file is left.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path dir_;
};

// ---- checksums -------------------------------------------------------------------------

// XXH3_64bits test vectors of LLVM's independent implementation (llvm/unittests/Support/
// xxhashTest.cpp): the first `len` bytes of a xorshift64 sequence.
TEST(Checksum, MatchesPublishedXxh3Vectors) {
  std::vector<uint8_t> a(2243);
  uint64_t x = 1;
  for (uint8_t& b : a) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  const std::pair<size_t, uint64_t> kVectors[] = {
      {0, 0x2d06800538d394c2},    {1, 0xd0d496e05c553485},   {3, 0x6ea2d59aca5c3778},
      {17, 0xed4be912ba5f836d},   {129, 0xbc7138129bf065da}, {403, 0xcefeb3ffa532ad8c},
      {2048, 0x330ce110cbb79eae}, {2243, 0x0979f786a24edde7}};
  for (auto [len, want] : kVectors) {
    EXPECT_EQ(Checksum::of(a.data(), len), want) << len;
    Checksum s;
    for (size_t i = 0; i < len; ++i) s.update(&a[i], 1);  // one byte at a time
    EXPECT_EQ(s.digest(), want) << len;
  }
  EXPECT_EQ(Checksum::of("a", 1), 0xe6c632b61e964e1fu);
}

TEST(Checksum, StreamingInOddPiecesEqualsOneShotReference) {
  const std::vector<char> data = random_bytes((3 << 20) + 7, 1);
  const uint64_t reference = XXH3_64bits(data.data(), data.size());
  EXPECT_EQ(Checksum::of(data.data(), data.size()), reference);
  std::mt19937 rng(2);
  for (int round = 0; round < 4; ++round) {
    Checksum s;
    size_t pos = 0;
    const size_t kPieces[] = {1, 3, 7, 31, 63, 65, 241, 1021, 4097, 65537, 1 << 20};
    while (pos < data.size()) {
      size_t n = std::min(data.size() - pos, kPieces[rng() % std::size(kPieces)]);
      s.update(data.data() + pos, n);
      pos += n;
    }
    EXPECT_EQ(s.digest(), reference) << round;
  }
}

TEST(Checksum, DigestDoesNotConsumeAndResetStartsOver) {
  const std::vector<char> data = random_bytes(1000, 3);
  Checksum s;
  EXPECT_EQ(s.digest(), XXH3_64bits(nullptr, 0));
  s.update(data.data(), 500);
  EXPECT_EQ(s.digest(), XXH3_64bits(data.data(), 500));
  EXPECT_EQ(s.digest(), XXH3_64bits(data.data(), 500));
  s.update(nullptr, 0);
  s.update(data.data() + 500, 500);
  EXPECT_EQ(s.digest(), XXH3_64bits(data.data(), 1000));
  Checksum moved(std::move(s));
  EXPECT_EQ(moved.digest(), XXH3_64bits(data.data(), 1000));
  moved.reset();
  EXPECT_EQ(moved.digest(), XXH3_64bits(nullptr, 0));
}

TEST(Checksum, OneFlippedBitChangesTheDigest) {
  std::vector<char> data = random_bytes(4096, 4);
  uint64_t before = Checksum::of(data.data(), data.size());
  data[1234] ^= 0x10;
  EXPECT_NE(Checksum::of(data.data(), data.size()), before);
}

TEST(Checksum, FormatsAsSixteenHexDigits) {
  EXPECT_EQ(format_checksum(0x2d06800538d394c2), "2d06800538d394c2");
  EXPECT_EQ(format_checksum(0), "0000000000000000");
  EXPECT_EQ(format_checksum(0xf), "000000000000000f");
  EXPECT_EQ(format_checksum(UINT64_MAX), "ffffffffffffffff");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = rng() >> (rng() % 64);
    char want[17];
    std::snprintf(want, sizeof want, "%016" PRIx64, v);
    ASSERT_EQ(format_checksum(v), want);
    ASSERT_EQ(parse_checksum(want), v);
  }
  EXPECT_EQ(parse_checksum("2D06800538D394C2"), 0x2d06800538d394c2u);
}

TEST(Checksum, ParseRejectsAnythingButSixteenHexDigits) {
  for (const char* bad : {"", "2d06", "2d06800538d394c", "2d06800538d394c2a", "0x2d06800538d394",
                          "2d06800538d394cg", " 2d06800538d394c", "-d06800538d394c2"}) {
    SCOPED_TRACE(bad);
    try {
      parse_checksum(bad);
      ADD_FAILURE() << "no exception";
    } catch (const CheckpointError& e) {
      EXPECT_TRUE(contains(e.what(), std::string("'") + bad + "'")) << e.what();
    }
  }
}

TEST_F(CheckpointIo, FileChecksumEqualsBufferChecksum) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{(1 << 20) - 1}, size_t{(1 << 20) + 1},
                   size_t{(5 << 20) + 333}}) {
    const std::vector<char> data = random_bytes(n, static_cast<uint32_t>(n));
    fs::path p = dir_ / "f";
    p += std::to_string(n);  // (not "f" + to_string: GCC 12 warns falsely, PR 105329)
    std::ofstream(p, std::ios::binary).write(data.data(), static_cast<std::streamsize>(n));
    EXPECT_EQ(Checksum::of_file(p), XXH3_64bits(data.data(), n)) << n;
  }
}

TEST_F(CheckpointIo, FileChecksumOfMissingFileIsIoErrorNamingIt) {
  fs::path p = dir_ / "absent.bin";
  try {
    Checksum::of_file(p);
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "'" + p.string() + "'")) << e.what();
    EXPECT_TRUE(contains(e.what(), std::strerror(ENOENT))) << e.what();
  }
  try {
    Checksum::of_file(dir_);  // a directory opens but cannot be read
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), std::strerror(EISDIR))) << e.what();
  }
}

// ---- durable files ---------------------------------------------------------------------

TEST_F(CheckpointIo, RoundTrip) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{(3 << 20) + 17}}) {
    const std::vector<char> data = random_bytes(n, 10 + static_cast<uint32_t>(n));
    fs::path p = dir_ / "shard.bin";
    write_file_durably(p, data.data(), data.size());
    EXPECT_EQ(read_all(p), data) << n;
    EXPECT_EQ(Checksum::of_file(p), XXH3_64bits(data.data(), n));
    EXPECT_EQ(listing(), std::vector<std::string>{"shard.bin"});  // no temporary left
  }
}

// O_DIRECT while the writes are aligned, then through the page cache (an unaligned
// piece, a writev): the same bytes as a plain write, whatever the file system supports.
TEST_F(CheckpointIo, DirectIoWritesTheSameBytesAndFallsBackOnUnalignedPieces) {
  constexpr size_t kA = DurableFile::kDirectAlignment;
  const std::vector<char> data = random_bytes(5 * kA + 123, 30);
  char* aligned = static_cast<char*>(std::aligned_alloc(kA, 6 * kA));
  ASSERT_NE(aligned, nullptr);
  std::memcpy(aligned, data.data(), data.size());
  fs::path p = dir_ / "direct.bin";
  DurableFile f(p, /*direct_io=*/true);
  f.write(aligned, 2 * kA);                  // aligned: direct where supported
  f.write(aligned + 2 * kA, kA);             // aligned
  f.write(aligned + 3 * kA, 100);            // unaligned size: page cache from here on
  const iovec rest[] = {{aligned + 3 * kA + 100, kA - 100}, {aligned + 4 * kA, kA + 123}};
  f.write(std::span<const iovec>(rest));
  EXPECT_EQ(f.bytes_written(), data.size());
  f.commit();
  std::free(aligned);
  EXPECT_EQ(read_all(p), data);
  EXPECT_EQ(listing(), std::vector<std::string>{"direct.bin"});
}

TEST_F(CheckpointIo, PiecesAreConcatenatedAndReplaceTheOldFile) {
  fs::path p = dir_ / "manifest.pb";
  const std::vector<char> old_data = random_bytes(10000, 20);
  write_file_durably(p, old_data.data(), old_data.size());
  const std::vector<char> data = random_bytes(7777, 21);
  DurableFile f(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.temp_path(), fs::path(p.string() + ".tmp." + std::to_string(::getpid())));
  size_t pos = 0;
  for (size_t piece : {1, 100, 3000, 4676}) {
    f.write(data.data() + pos, piece);
    pos += piece;
  }
  ASSERT_EQ(pos, data.size());
  EXPECT_EQ(f.bytes_written(), data.size());
  // Until commit() the old file is untouched and the new bytes sit in the temporary.
  EXPECT_EQ(read_all(p), old_data);
  EXPECT_TRUE(fs::exists(f.temp_path()));
  f.commit();
  EXPECT_TRUE(f.committed());
  EXPECT_EQ(read_all(p), data);  // shorter than the old file: nothing of it remains
  EXPECT_FALSE(fs::exists(f.temp_path()));
  EXPECT_THROW(f.write("x", 1), InvalidArgument);
}

TEST_F(CheckpointIo, AbandonedWriteLeavesTheOldFileAndNoTemporary) {
  fs::path p = dir_ / "shard.bin";
  const std::vector<char> old_data = random_bytes(5000, 30);
  write_file_durably(p, old_data.data(), old_data.size());
  {
    DurableFile f(p);
    f.write("partial", 7);
  }  // destroyed without commit, as when an exception unwinds
  EXPECT_EQ(read_all(p), old_data);
  EXPECT_EQ(listing(), std::vector<std::string>{"shard.bin"});
}

TEST_F(CheckpointIo, MissingDirectoryIsIoErrorNamingThePath) {
  fs::path p = dir_ / "no-such-dir" / "shard.bin";
  try {
    const char data[] = "abc";
    write_file_durably(p, data, sizeof data);
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "'" + p.string() + "'")) << e.what();
    EXPECT_TRUE(contains(e.what(), std::strerror(ENOENT))) << e.what();
  }
  EXPECT_TRUE(listing().empty());
}

// A real failed write: the process's file size limit stops the temporary file at
// 64 KiB (EFBIG). The previous file must survive whole and the temporary must go.
TEST_F(CheckpointIo, FailedWriteLeavesThePreviousFileIntact) {
  fs::path p = dir_ / "shard.bin";
  const std::vector<char> old_data = random_bytes(1000, 40);
  write_file_durably(p, old_data.data(), old_data.size());
  const std::vector<char> data = random_bytes(1 << 20, 41);

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // fail with EFBIG instead of dying
  rlimit small = saved;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string what;
  try {
    write_file_durably(p, data.data(), data.size());
  } catch (const IoError& e) {
    what = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_TRUE(contains(what, "'" + p.string() + "'")) << what;
  EXPECT_TRUE(contains(what, std::strerror(EFBIG))) << what;
  EXPECT_EQ(read_all(p), old_data);
  EXPECT_EQ(listing(), std::vector<std::string>{"shard.bin"});
}

// map(): the file as memory, over a reused file's pages (the same inode, truncated to the
// new size at commit); the mapping outlives the commit.
TEST_F(CheckpointIo, MapWritesOverAReusedFileInPlace) {
  const fs::path old_file = dir_ / "recycled.bin";
  write_file_durably(old_file, random_bytes(200 << 10, 50).data(), 200 << 10);
  struct stat before{};
  ASSERT_EQ(::stat(old_file.c_str(), &before), 0);
  const fs::path p = dir_ / "shard.bin";
  const std::vector<char> data = random_bytes(100 << 10, 51);
  std::span<char> mapped;
  {
    DurableFile f(p, old_file);
    mapped = f.map(data.size());
    ASSERT_EQ(mapped.size(), data.size());
    std::memcpy(mapped.data(), data.data(), data.size());
    f.commit();
    EXPECT_EQ(std::vector<char>(mapped.begin(), mapped.end()), data);  // still mapped
    struct stat after{};
    ASSERT_EQ(::stat(p.c_str(), &after), 0);
    EXPECT_EQ(after.st_ino, before.st_ino);
  }
  EXPECT_EQ(read_all(p), data);
  EXPECT_EQ(listing(), std::vector<std::string>{"shard.bin"});
  DurableFile g(dir_ / "other.bin");
  g.write("x", 1);
  EXPECT_THROW(g.map(10), InvalidArgument);  // only a file nothing was written to
}

// Through a MappingCache, a recycled file mapped again is the same mapping (no fresh page
// tables); a deleted file's mapping is dropped at the next map(); another size remaps.
TEST_F(CheckpointIo, MapThroughACacheReusesTheMappingOfTheSameFile) {
  constexpr size_t kSize = 64 << 10;
  write_file_durably(dir_ / "recycled", random_bytes(kSize, 52).data(), kSize);
  MappingCache cache;
  const std::vector<char> first = random_bytes(kSize, 53), second = random_bytes(kSize, 54);
  char* at = nullptr;
  {
    DurableFile f(dir_ / "a.bin", dir_ / "recycled");
    std::span<char> m = f.map(kSize, &cache);
    std::memcpy(m.data(), first.data(), kSize);
    f.commit();
    at = m.data();
  }
  EXPECT_EQ(read_all(dir_ / "a.bin"), first);
  fs::rename(dir_ / "a.bin", dir_ / "recycled");  // what the memory tier's retention does
  {
    DurableFile f(dir_ / "b.bin", dir_ / "recycled");
    std::span<char> m = f.map(kSize, &cache);
    EXPECT_EQ(m.data(), at);
    EXPECT_EQ(cache.hits(), 1u);
    std::memcpy(m.data(), second.data(), kSize);
    f.commit();
  }
  EXPECT_EQ(read_all(dir_ / "b.bin"), second);
  fs::remove(dir_ / "b.bin");  // its pages are held by the cache's mapping only
  {
    DurableFile f(dir_ / "c.bin", fs::path());
    f.map(kSize / 2, &cache);
    f.commit();
  }
  EXPECT_EQ(cache.size(), 1u);  // b.bin's mapping dropped, c.bin's kept
  fs::rename(dir_ / "c.bin", dir_ / "recycled");
  {
    DurableFile f(dir_ / "d.bin", dir_ / "recycled");
    EXPECT_EQ(f.map(kSize, &cache).size(), kSize);  // the same file at another size
    f.commit();
  }
  EXPECT_EQ(cache.hits(), 1u);
  EXPECT_EQ(fs::file_size(dir_ / "d.bin"), kSize);
}

// The space is allocated before the first store: past the file size limit (as on a full
// tmpfs) map() is an IoError, not a SIGBUS, and nothing is left behind.
TEST_F(CheckpointIo, MapBeyondTheSpaceIsIoError) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string what;
  try {
    DurableFile f(dir_ / "shard.bin", fs::path());
    f.map(1 << 20);
  } catch (const IoError& e) {
    what = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(contains(what, std::strerror(EFBIG))) << what;
  EXPECT_TRUE(listing().empty());
}

// rename() fails when a non-empty directory has the target's name; the directory stays
// and the temporary goes.
TEST_F(CheckpointIo, FailedRenameIsIoErrorAndRemovesTheTemporary) {
  fs::path p = dir_ / "step-000000010";
  fs::create_directory(p);
  std::ofstream(p / "keep") << "x";
  DurableFile f(p);
  f.write("data", 4);
  try {
    f.commit();
    ADD_FAILURE() << "no exception";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "'" + p.string() + "'")) << e.what();
    EXPECT_TRUE(contains(e.what(), std::strerror(EISDIR))) << e.what();
  }
  EXPECT_FALSE(f.committed());
  EXPECT_EQ(listing(), std::vector<std::string>{"step-000000010"});
  EXPECT_TRUE(fs::exists(p / "keep"));
  EXPECT_THROW(f.write("more", 4), InvalidArgument);
}

// A file name without a directory part is written in the working directory.
TEST_F(CheckpointIo, RelativePathInTheWorkingDirectory) {
  fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  write_file_durably("plain.bin", "hello", 5);
  fs::current_path(cwd);
  EXPECT_EQ(read_all(dir_ / "plain.bin"), (std::vector<char>{'h', 'e', 'l', 'l', 'o'}));
}

// The memory tier's recycled files: the one of the asked name, else (another world size:
// other names) the largest there, so that a relaunch at a new size writes over pages it
// already has instead of faulting in fresh ones.
TEST_F(CheckpointIo, ARecycledFileIsTakenByNameElseTheLargest) {
  const fs::path bin = dir_ / ".recycle";
  EXPECT_EQ(recycled_shard(dir_, "shard-00000-of-00002.bin"), bin / "shard-00000-of-00002.bin")
      << "no bin: the path a file of that name would have";
  fs::create_directory(bin);
  write_file_durably(bin / "shard-00000-of-00003.bin", random_bytes(100, 1).data(), 100);
  write_file_durably(bin / "shard-00001-of-00003.bin", random_bytes(300, 2).data(), 300);
  write_file_durably(bin / "notes.txt", random_bytes(900, 3).data(), 900);  // not a shard file
  EXPECT_EQ(recycled_shard(dir_, "shard-00000-of-00003.bin"), bin / "shard-00000-of-00003.bin");
  EXPECT_EQ(recycled_shard(dir_, "shard-00000-of-00002.bin"), bin / "shard-00001-of-00003.bin");
  // Written over through DurableFile, as the writer does: the largest file's inode, renamed.
  struct stat before{};
  ASSERT_EQ(::stat((bin / "shard-00001-of-00003.bin").c_str(), &before), 0);
  const std::vector<char> data = random_bytes(200, 4);
  {
    DurableFile f(dir_ / "shard-00000-of-00002.bin", recycled_shard(dir_, "shard-00000-of-00002.bin"));
    std::span<char> mapped = f.map(data.size());
    std::memcpy(mapped.data(), data.data(), data.size());
    f.commit();
  }
  struct stat after{};
  ASSERT_EQ(::stat((dir_ / "shard-00000-of-00002.bin").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(read_all(dir_ / "shard-00000-of-00002.bin"), data);
  EXPECT_EQ(recycled_shard(dir_, "shard-00001-of-00002.bin"), bin / "shard-00000-of-00003.bin")
      << "the one left";
}

}  // namespace
}  // namespace etr
