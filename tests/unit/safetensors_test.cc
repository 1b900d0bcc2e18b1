// Tests of checkpoint/safetensors.h: round trips of every dtype and shape kind (0-d,
// empty, several dims), the byte layout the writer promises, typed views, read_into,
// and malformed files built byte by byte, each rejected with its own message naming the
// file and the tensor. Compatibility with Python's safetensors and transformers is
// checked by tests/compat.
#include "checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace etr {
namespace {

namespace fs = std::filesystem;
using D = SafetensorsDType;

const D kAllDTypes[] = {D::kBool,   D::kU8,         D::kI8,         D::kF8E5M2, D::kF8E4M3,
                        D::kF8E8M0, D::kF8E4M3Fnuz, D::kF8E5M2Fnuz, D::kI16,    D::kU16,
                        D::kF16,    D::kBF16,       D::kI32,        D::kU32,    D::kF32,
                        D::kC64,    D::kF64,        D::kI64,        D::kU64};

std::vector<std::byte> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (std::byte& b : v) b = static_cast<std::byte>(rng());
  return v;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The IoError message of opening `path`, or "" when it opens.
std::string open_error(const fs::path& path) {
  try {
    SafetensorsFile f(path);
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "etr-safetensors-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file built by hand: an 8-byte length (`declared`, default the header's size), the
  // header text, then `data_bytes` bytes of data.
  fs::path raw(const std::string& header, size_t data_bytes,
               std::optional<uint64_t> declared = std::nullopt) {
    fs::path p = dir_ / ("raw" + std::to_string(raw_count_++) + ".safetensors");
    std::ofstream out(p, std::ios::binary);
    uint64_t n = declared.value_or(header.size());
    for (int b = 0; b < 8; ++b) out.put(static_cast<char>(n >> (8 * b)));
    out << header << std::string(data_bytes, '\x5a');
    return p;
  }

  // Expects `path` to be rejected with a message holding every one of `parts` and the
  // file's path.
  void expect_rejected(const fs::path& path, std::initializer_list<std::string> parts) {
    std::string message = open_error(path);
    ASSERT_FALSE(message.empty()) << "opened without error: " << read_text(path);
    EXPECT_TRUE(contains(message, "'" + path.string() + "'")) << message;
    for (const std::string& part : parts) EXPECT_TRUE(contains(message, part)) << message;
  }

  fs::path dir_;
  int raw_count_ = 0;
};

// ---- round trips -----------------------------------------------------------------------

TEST(SafetensorsDTypes, NamesSizesAndEtrDTypes) {
  EXPECT_EQ(std::size(kAllDTypes), 19u);
  for (D t : kAllDTypes) EXPECT_EQ(parse_safetensors_dtype(safetensors_dtype_name(t)), t);
  EXPECT_EQ(safetensors_dtype_name(D::kF8E4M3Fnuz), "F8_E4M3FNUZ");
  EXPECT_EQ(safetensors_dtype_size(D::kC64), 8u);
  EXPECT_EQ(safetensors_dtype_size(D::kBF16), 2u);
  EXPECT_EQ(parse_safetensors_dtype("f32"), std::nullopt);  // the header spelling only
  for (DType t : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16, DType::kI32}) {
    EXPECT_EQ(to_etr_dtype(to_safetensors_dtype(t)), t);
    EXPECT_EQ(safetensors_dtype_size(to_safetensors_dtype(t)), dtype_size(t));
  }
  EXPECT_EQ(to_etr_dtype(D::kU8), std::nullopt);
  EXPECT_EQ(safetensors_dtype_list().substr(0, 14), "BOOL, U8, I8, ");
}

TEST_F(Safetensors, EveryDTypeAndShapeKindRoundTrips) {
  const std::vector<std::vector<int64_t>> kShapes = {{},     {0},       {1},         {7},
                                                     {3, 5}, {2, 0, 3}, {2, 3, 1, 2}};
  std::vector<SafetensorsTensorRef> refs;
  std::vector<std::vector<std::byte>> data;
  uint32_t seed = 1;
  for (D dtype : kAllDTypes) {
    for (const auto& shape : kShapes) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      data.push_back(random_bytes(n * safetensors_dtype_size(dtype), seed++));
      std::string name = std::string(safetensors_dtype_name(dtype)) + "/" + shape_text(shape);
      refs.push_back({name, dtype, shape, n ? data.back().data() : nullptr});
    }
  }
  const SafetensorsMetadata meta = {{"format", "pt"}, {"etr.step", "42"}, {"empty", ""}};
  const fs::path path = dir_ / "all.safetensors";
  write_safetensors(path, refs, meta);

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    const SafetensorsTensor& t = f.tensor(refs[i].name);
    EXPECT_EQ(t.dtype, refs[i].dtype) << refs[i].name;
    EXPECT_EQ(t.shape, refs[i].shape) << refs[i].name;
    ASSERT_EQ(t.bytes.size(), data[i].size()) << refs[i].name;
    EXPECT_TRUE(std::equal(t.bytes.begin(), t.bytes.end(), data[i].begin())) << refs[i].name;
    // Aligned to the element size in the mapping (the writer orders by element size).
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.bytes.data()) % safetensors_dtype_size(t.dtype), 0u)
        << refs[i].name;
    EXPECT_EQ(t.numel() * static_cast<int64_t>(safetensors_dtype_size(t.dtype)),
              static_cast<int64_t>(t.bytes.size()));
  }
}

TEST_F(Safetensors, WriterLayoutPadsTheHeaderAndOrdersByElementSize) {
  const uint16_t h[3] = {1, 2, 3};
  const double d[1] = {2.5};
  const float s[2] = {1.5f, -2.0f};
  const fs::path path = dir_ / "layout.safetensors";
  write_safetensors(path, {{"h", D::kF16, {3}, h}, {"s", D::kF32, {2}, s}, {"d", D::kF64, {}, d}},
                    {{"format", "pt"}});
  const std::string bytes = read_text(path);
  uint64_t n = 0;
  for (int b = 0; b < 8; ++b) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[b])) << (8 * b);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 8 + 8 + 6);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},"
                         "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]},"
                         "\"s\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                         "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[16,22]}}",
                         0),
            0u)
      << header;
  EXPECT_EQ(header.find_first_not_of(' ', header.find_last_of('}') + 1), std::string::npos);
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors()[0].name, "d");
  EXPECT_EQ(f.header_size(), n);
  EXPECT_EQ(f.data_size(), 22u);
}

TEST_F(Safetensors, NoTensorsAndNoMetadataIsAValidFile) {
  const fs::path path = dir_ / "empty.safetensors";
  write_safetensors(path, std::span<const SafetensorsTensorRef>{});
  EXPECT_EQ(read_text(path).substr(8), "{}      ");
  SafetensorsFile f(path);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(Safetensors, UnpaddedHeaderFromAnotherWriterIsAccepted) {
  const fs::path p = raw(R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", 3);
  SafetensorsFile f(p);
  EXPECT_EQ(f.tensor("a").as<uint8_t>().size(), 3u);
  EXPECT_EQ(f.tensor("a").as<uint8_t>()[2], 0x5a);
}

TEST_F(Safetensors, TypedViewsAndReadInto) {
  const float w[6] = {1, 2, 3, 4, 5, 6};
  const int64_t ids[2] = {-7, 1LL << 40};
  const uint16_t bf[2] = {f32_to_bf16(1.5f), f32_to_bf16(-3.0f)};
  const fs::path path = dir_ / "typed.safetensors";
  write_safetensors(
      path, {{"w", D::kF32, {2, 3}, w}, {"ids", D::kI64, {2}, ids}, {"bf", D::kBF16, {2}, bf}});
  SafetensorsFile f(path);
  std::span<const float> wv = f.tensor("w").as<float>();
  EXPECT_EQ(std::vector<float>(wv.begin(), wv.end()), std::vector<float>(w, w + 6));
  EXPECT_EQ(f.tensor("ids").as<int64_t>()[1], 1LL << 40);
  EXPECT_EQ(bf16_to_f32(f.tensor("bf").as<uint16_t>()[1]), -3.0f);

  float dst[6] = {};
  f.read_into("w", dst, D::kF32, {2, 3});
  EXPECT_EQ(dst[5], 6.0f);
  float dst2[6] = {};
  f.read_into("w", TensorView(dst2, DType::kF32, Shape{2, 3}));
  EXPECT_EQ(dst2[4], 5.0f);

  // The wrong C++ type for a view.
  try {
    (void)f.tensor("w").as<double>();
    FAIL() << "as<double> on F32 did not throw";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "tensor 'w' in '" + path.string() + "' is F32")) << e.what();
  }
  // read_into with the wrong shape or dtype says what the file holds and what was asked.
  try {
    f.read_into("w", dst, D::kF32, {3, 2});
    FAIL() << "read_into with the transposed shape did not throw";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "tensor 'w' in safetensors file '" + path.string() +
                                       "' is F32 [2, 3], but F32 [3, 2] was expected"))
        << e.what();
  }
  try {
    f.read_into("w", TensorView(dst2, DType::kBF16, Shape{2, 3}));
    FAIL() << "read_into with the wrong dtype did not throw";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "is F32 [2, 3], but BF16 [2, 3] was expected")) << e.what();
  }
  try {
    f.read_into("lm_head.weight", dst, D::kF32, {2, 3});
    FAIL() << "read_into of a missing tensor did not throw";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(), "'" + path.string() +
                                       "' has no tensor 'lm_head.weight'; it "
                                       "has 3 tensors ('ids', 'w', 'bf')"))
        << e.what();
  }
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST_F(Safetensors, MisalignedTensorCanBeCopiedButNotViewed) {
  // A writer that does not order by element size: F32 at data offset 2 of a data
  // section that starts 8-aligned.
  std::string header = R"({"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
                       R"("f":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  const fs::path p = raw(header, 6);
  SafetensorsFile f(p);
  try {
    (void)f.tensor("f").as<float>();
    FAIL() << "misaligned view did not throw";
  } catch (const IoError& e) {
    EXPECT_TRUE(contains(e.what(),
                         "tensor 'f' in '" + p.string() + "' starts at data offset 2, not aligned"))
        << e.what();
  }
  uint32_t v = 0;
  f.read_into("f", &v, D::kF32, {1});
  EXPECT_EQ(v, 0x5a5a5a5au);
}

TEST_F(Safetensors, MovedFileKeepsItsViews) {
  const float w[3] = {1, 2, 3};
  const fs::path path = dir_ / "moved.safetensors";
  write_safetensors(path, {{"w", D::kF32, {3}, w}});
  SafetensorsFile a(path);
  std::span<const float> view = a.tensor("w").as<float>();
  SafetensorsFile b(std::move(a));
  EXPECT_EQ(view[2], 3.0f);
  EXPECT_EQ(b.tensor("w").as<float>().data(), view.data());
  SafetensorsFile c(dir_ / "moved.safetensors");
  c = std::move(b);
  EXPECT_EQ(c.tensor("w").as<float>()[1], 2.0f);
}

TEST_F(Safetensors, WriterRejectsBadArgumentsAndLeavesNoFile) {
  const float x[1] = {1};
  const fs::path path = dir_ / "bad.safetensors";
  auto message = [&](std::initializer_list<SafetensorsTensorRef> refs,
                     const SafetensorsMetadata& meta = {}) -> std::string {
    try {
      write_safetensors(path, refs, meta);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_TRUE(contains(message({{"a", D::kF32, {1}, x}, {"a", D::kF32, {1}, x}}),
                       "tensor 'a' is given twice"));
  EXPECT_TRUE(contains(message({{"", D::kF32, {1}, x}}), "tensor name '' "));
  EXPECT_TRUE(contains(message({{"__metadata__", D::kF32, {1}, x}}), "is reserved or empty"));
  EXPECT_TRUE(
      contains(message({{"neg", D::kF32, {2, -1}, x}}),
               "tensor 'neg' for safetensors file '" + path.string() + "' has shape [2, -1]"));
  EXPECT_TRUE(contains(message({{"null", D::kF32, {4}, nullptr}}),
                       "tensor 'null' for safetensors file '" + path.string() +
                           "' has 16 bytes but no data pointer"));
  EXPECT_TRUE(contains(message({{"bad\xff", D::kF32, {1}, x}}), "is not valid UTF-8"));
  EXPECT_TRUE(contains(message({{"a", D::kF32, {1}, x}}, {{"k", "\xc3"}}), "is not valid UTF-8"));
  EXPECT_TRUE(fs::is_empty(dir_));
  // A view on a GPU is refused by name.
  EXPECT_THROW(
      SafetensorsTensorRef::of("g", TensorView(nullptr, DType::kF32, Shape{1}, Device::cuda(0))),
      InvalidArgument);
}

// ---- malformed files -------------------------------------------------------------------

TEST_F(Safetensors, RejectsMissingAndNonRegularFiles) {
  expect_rejected(dir_ / "absent.safetensors", {"cannot open safetensors file", "No such file"});
  fs::create_directory(dir_ / "dir.safetensors");
  // Opening a directory read-only succeeds; it is refused as not a regular file.
  expect_rejected(dir_ / "dir.safetensors", {"is not a regular file"});
}

TEST_F(Safetensors, RejectsAFileShorterThanTheLengthField) {
  const fs::path p = dir_ / "short.safetensors";
  std::ofstream(p, std::ios::binary) << "abc";
  expect_rejected(p, {"is 3 bytes long, too short for the 8-byte header length"});
}

TEST_F(Safetensors, RejectsATruncatedHeader) {
  // The length says 64 bytes, the file stops after 30 of them.
  const fs::path p = raw(R"({"a":{"dtype":"F32","shape":[1],)", 0, 64);
  expect_rejected(
      p, {"declares a header of 64 bytes but has only 32 bytes after the length", "truncated"});
}

TEST_F(Safetensors, RejectsAHeaderLengthBeyondTheLimit) {
  const fs::path p = raw("{}", 0, uint64_t{1} << 40);
  expect_rejected(p, {"declares a header of 1099511627776 bytes, more than the limit of "
                      "100000000"});
  // All ones: no overflow in the bounds check.
  expect_rejected(raw("{}", 0, ~uint64_t{0}), {"declares a header of 18446744073709551615"});
}

TEST_F(Safetensors, RejectsInvalidJson) {
  expect_rejected(raw(R"({"a": {"dtype": "F32", )", 0), {"is not valid JSON", "parse error"});
  // NUL padding is not JSON whitespace.
  expect_rejected(raw(std::string("{}\0\0\0\0\0\0", 8), 0),
                  {"has a NUL byte at offset 10, which JSON does not allow"});
  expect_rejected(raw("{\"\xff\": 1}", 0), {"is not valid JSON"});  // not UTF-8
  expect_rejected(raw(R"({"w": 1e999})", 0), {"is not valid JSON", "number overflow"});
  expect_rejected(raw("[1, 2]", 0), {"is JSON but not an object"});
}

TEST_F(Safetensors, RejectsOffsetsOutOfRange) {
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
                  {"tensor 'w' in safetensors file",
                   "data_offsets [0,16] beyond the data "
                   "section of 12 bytes"});
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 12),
                  {"tensor 'w'", "data_offsets [8,4]; they must be [begin, end]"});
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4),
                  {"tensor 'w'", "data_offsets [-4,0]"});
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
                  {"tensor 'w'", "data_offsets [0]"});
}

TEST_F(Safetensors, RejectsOverlappingTensors) {
  expect_rejected(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                      12),
                  {"tensor 'b' in safetensors file",
                   "(data_offsets [4, 12]) overlaps tensor "
                   "'a' (data_offsets [0, 8])"});
  // An empty tensor inside another one's range also overlaps it.
  expect_rejected(raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                      R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                      8),
                  {"tensor 'e'", "overlaps tensor 'a'"});
}

TEST_F(Safetensors, RejectsHolesAndTrailingBytes) {
  expect_rejected(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                      12),
                  {"has a hole of 4 bytes at data offset 4, before tensor 'b'"});
  expect_rejected(raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 7),
                  {"has 3 bytes after its last tensor 'a' that no tensor covers"});
  expect_rejected(raw(R"({})", 5), {"has 5 bytes after its last tensor that no tensor covers"});
}

TEST_F(Safetensors, RejectsAShapeThatDoesNotMatchTheByteCount) {
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", 16),
                  {"tensor 'w' in safetensors file",
                   "is F32 [2, 3], which needs 24 bytes, but "
                   "its data_offsets [0,16] span 16 bytes"});
  expect_rejected(raw(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],)"
                      R"("data_offsets":[0,0]}})",
                      0),
                  {"tensor 'w'", "needs at least 2^63 bytes"});
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,0]}})", 0),
                  {"tensor 'w'", "has shape [2,-3]; extents are non-negative integers"});
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8),
                  {"tensor 'w'", "extents are non-negative integers"});
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8),
                  {"tensor 'w'", "has a shape that is not a JSON array"});
}

TEST_F(Safetensors, RejectsAnUnknownDType) {
  expect_rejected(raw(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", 16),
                  {"tensor 'w' in safetensors file",
                   "has dtype \"F128\", which etr does not "
                   "know; etr reads BOOL, U8, I8"});
  expect_rejected(raw(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1),
                  {"tensor 'w'", "has dtype \"F4\", a sub-byte type that etr does not support"});
  expect_rejected(raw(R"({"w":{"dtype":32,"shape":[1],"data_offsets":[0,4]}})", 4),
                  {"tensor 'w'", "has dtype 32"});
}

TEST_F(Safetensors, RejectsDuplicateNamesAndKeys) {
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                      8),
                  {"tensor 'w' appears twice; names must be unique"});
  expect_rejected(raw(R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
                  {"entry 'w' has the key 'dtype' twice"});
  expect_rejected(raw(R"({"__metadata__":{"a":"1","a":"2"}})", 0),
                  {"entry '__metadata__' has the key 'a' twice"});
}

TEST_F(Safetensors, RejectsMalformedEntriesAndMetadata) {
  expect_rejected(raw(R"({"w":{"dtype":"F32","shape":[1]}})", 4),
                  {"tensor 'w'", "is not an object with dtype, shape and data_offsets"});
  expect_rejected(raw(R"({"w":[1,2]})", 0), {"tensor 'w'", "is not an object"});
  expect_rejected(raw(R"({"__metadata__":{"step":3}})", 0),
                  {"__metadata__ entry 'step'", "is not a string"});
  expect_rejected(raw(R"({"__metadata__":"pt"})", 0), {"__metadata__", "is not a JSON object"});
  // Unknown fields inside an entry are ignored, as the reference implementation does.
  SafetensorsFile f(
      raw(R"({"w":{"dtype":"I32","shape":[1],"data_offsets":[0,4],"extra":true}})", 4));
  int32_t w = 0;
  f.read_into("w", &w, D::kI32, {1});
  EXPECT_EQ(w, 0x5a5a5a5a);
}

}  // namespace
}  // namespace etr
