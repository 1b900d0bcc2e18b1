// runtime/crc32c.h and runtime/tensorboard_writer.h: the CRC against published values,
// the TFRecord framing, and an event file parsed back with the generated classes.
#include "runtime/tensorboard_writer.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/crc32c.h"
#include "runtime/error.h"
#include "runtime/tensorboard_event.pb.h"
#include "temp_dir.h"

namespace etr {
namespace {

namespace fs = std::filesystem;

uint64_t le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// Splits a file's bytes into records, checking both CRCs of each.
std::vector<std::string> read_records(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < bytes.size()) {
    EXPECT_GE(bytes.size() - at, 16u) << "a truncated record at byte " << at;
    if (bytes.size() - at < 16) break;
    const uint64_t n = le(bytes, at, 8);
    EXPECT_EQ(le(bytes, at + 8, 4), mask_crc32c(crc32c(std::string_view(bytes).substr(at, 8))));
    const std::string data = bytes.substr(at + 12, n);
    EXPECT_EQ(le(bytes, at + 12 + n, 4), mask_crc32c(crc32c(data)));
    out.push_back(data);
    at += 16 + n;
  }
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

using etr::testing::TempDir;

TEST(Crc32c, PublishedValues) {
  // The CRC-32C check value, and the iSCSI test vectors of RFC 3720, B.4.
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);
  std::string up(32, '\0'), down(32, '\0');
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<char>(i);
    down[i] = static_cast<char>(31 - i);
  }
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(Crc32c, ContinuesOverPieces) {
  // Every split point (the 8-byte loop and the byte tail both meet the seam).
  const std::string text = "The quick brown fox jumps over the lazy dog, twice over.";
  const uint32_t whole = crc32c(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(
        crc32c(std::string_view(text).substr(cut), crc32c(std::string_view(text).substr(0, cut))),
        whole)
        << "cut at " << cut;
  }
}

TEST(Crc32c, Mask) {
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
  EXPECT_EQ(mask_crc32c(0x00008000u), 0x00000001u + 0xa282ead8u);
  EXPECT_EQ(mask_crc32c(0xE3069283u), ((0xE3069283u >> 15) | (0xE3069283u << 17)) + 0xa282ead8u);
}

TEST(TfRecord, Framing) {
  const std::string data = "123456789";
  const std::string r = tfrecord(data);
  ASSERT_EQ(r.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(le(r, 0, 8), data.size());
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(le(r, 12 + data.size(), 4), mask_crc32c(0xE3069283u));
  // The length's CRC is over its 8 little-endian bytes: 09 00 00 00 00 00 00 00.
  EXPECT_EQ(le(r, 8, 4), mask_crc32c(crc32c(std::string("\x09\0\0\0\0\0\0\0", 8))));
  EXPECT_EQ(tfrecord("").size(), 16u);
}

TEST(EventFileName, TensorBoardConvention) {
  EXPECT_EQ(event_file_name(1764100000, "node1", 4242, 0),
            "events.out.tfevents.1764100000.node1.4242.0");
  EXPECT_EQ(event_file_name(12, "h", 1, 3), "events.out.tfevents.0000000012.h.1.3");
}

TEST(TensorBoardWriter, ParsesBack) {
  TempDir tmp;
  const fs::path dir = tmp.path() / "runs" / "a";  // created with its parent
  fs::path path;
  {
    TensorBoardWriter w(dir);
    path = w.path();
    EXPECT_EQ(path.parent_path(), dir);
    EXPECT_EQ(path.filename().string().rfind("events.out.tfevents.", 0), 0u);
    w.add_scalar("train/loss", 3, 2.5);
    w.add_text("elastic/launch", 3, "relaunch 1: world 4 -> 2");
    w.flush();
    w.add_scalar("train/lr", 4, 1e-4);  // flushed by the destructor
  }
  const std::vector<std::string> records = read_records(read_file(path));
  ASSERT_EQ(records.size(), 4u);
  tensorboard::Event e;
  ASSERT_TRUE(e.ParseFromString(records[0]));
  EXPECT_EQ(e.file_version(), "brain.Event:2");
  EXPECT_GT(e.wall_time(), 1.7e9);

  ASSERT_TRUE(e.ParseFromString(records[1]));
  EXPECT_EQ(e.step(), 3);
  ASSERT_EQ(e.summary().value_size(), 1);
  EXPECT_EQ(e.summary().value(0).tag(), "train/loss");
  EXPECT_EQ(e.summary().value(0).simple_value(), 2.5f);

  ASSERT_TRUE(e.ParseFromString(records[2]));
  const tensorboard::Summary::Value& text = e.summary().value(0);
  EXPECT_EQ(text.tag(), "elastic/launch");
  EXPECT_EQ(text.metadata().plugin_data().plugin_name(), "text");
  EXPECT_EQ(text.metadata().data_class(), tensorboard::DATA_CLASS_TENSOR);
  EXPECT_EQ(text.tensor().dtype(), tensorboard::DT_STRING);
  EXPECT_EQ(text.tensor().tensor_shape().dim_size(), 0);
  ASSERT_EQ(text.tensor().string_val_size(), 1);
  EXPECT_EQ(text.tensor().string_val(0), "relaunch 1: world 4 -> 2");

  ASSERT_TRUE(e.ParseFromString(records[3]));
  EXPECT_EQ(e.step(), 4);
  EXPECT_EQ(e.summary().value(0).simple_value(), 1e-4f);
}

TEST(TensorBoardWriter, EachWriterItsOwnFile) {
  TempDir tmp;
  TensorBoardWriter a(tmp.path()), b(tmp.path());
  EXPECT_NE(a.path(), b.path());
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path()), fs::directory_iterator()), 2);
}

TEST(TensorBoardWriter, UnwritableDirectoryIsAnIoError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into a read-only directory";
  TempDir tmp;
  fs::permissions(tmp.path(), fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_THROW(TensorBoardWriter(tmp.path() / "x"), IoError);
  EXPECT_THROW(TensorBoardWriter{tmp.path()}, IoError);
}

TEST(TensorBoardWriter, PathUnderAFileIsAnIoError) {
  TempDir tmp;
  std::ofstream(tmp.path() / "file") << "x";
  try {
    TensorBoardWriter w(tmp.path() / "file" / "runs");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("TensorBoard directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace etr
