// The C++ half of tests/compat/safetensors_compat.py: writes, checks and lists
// safetensors files with etr's reader and writer, so that Python's safetensors can be
// checked against them in both directions.
//
//   write_safetensors_fixture write PATH   writes the fixture: the tensors of kFixture
//                                          with the values of fixture_value, and
//                                          kFixtureMetadata
//   write_safetensors_fixture check PATH   reads a file Python wrote from the same table
//                                          and checks every tensor's dtype, shape and
//                                          bytes, and the metadata; exit 1 on a mismatch
//   write_safetensors_fixture list PATH    prints "tensor NAME DTYPE [SHAPE]" per tensor in
//                                          name order, then "metadata KEY VALUE" per entry
//
// The same table and formulas are spelled out in safetensors_compat.py (FIXTURE); keep
// the two in step. Every value is exact in its dtype, so comparisons are bit for bit.
#include <algorithm>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "runtime/dtype.h"
#include "runtime/error.h"

namespace {

using etr::SafetensorsDType;
using D = SafetensorsDType;

struct FixtureTensor {
  const char* name;
  D dtype;
  std::vector<int64_t> shape;
};

const std::vector<FixtureTensor> kFixture = {
    {"f32.matrix", D::kF32, {3, 4}},
    {"f32.scalar", D::kF32, {}},
    {"f32.empty", D::kF32, {0, 4}},
    {"f64.cube", D::kF64, {2, 3, 2}},
    {"f16.vector", D::kF16, {5}},
    {"bf16.matrix", D::kBF16, {2, 3}},
    {"i8.vector", D::kI8, {4}},
    {"u8.vector", D::kU8, {6}},
    {"i16.vector", D::kI16, {3}},
    {"u16.vector", D::kU16, {2}},
    {"i32.vector", D::kI32, {4}},
    {"u32.vector", D::kU32, {2}},
    {"i64.vector", D::kI64, {3}},
    {"u64.vector", D::kU64, {2}},
    {"bool.vector", D::kBool, {5}},
    {"f8_e4m3.vector", D::kF8E4M3, {4}},
    {"f8_e5m2.vector", D::kF8E5M2, {4}},
    {"c64.vector", D::kC64, {2}},
    {"name.\xc3\xbc\xc3\xb1\xc3\xaf", D::kF32, {2}},  // "name.üñï": UTF-8 names
};

const etr::SafetensorsMetadata kFixtureMetadata = {
    {"format", "pt"}, {"etr.fixture", "1"}, {"note", "\xc3\xbc\xc3\xb1\xc3\xaf \xe2\x9c\x93"}};

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

// Element j of every tensor of this dtype, appended to `out` (little-endian bytes).
void fixture_value(D dtype, int64_t j, std::vector<std::byte>& out) {
  switch (dtype) {
    case D::kF32:
      return put(out, static_cast<float>(j) * 0.25f - 1.0f);
    case D::kF64:
      return put(out, static_cast<double>(j) / 3.0);
    case D::kF16:
      return put(out, etr::f32_to_f16(static_cast<float>(j) * 0.5f - 1.0f));
    case D::kBF16:
      return put(out, etr::f32_to_bf16(static_cast<float>(j) * 0.5f - 1.0f));
    case D::kI8:
      return put(out, static_cast<int8_t>(-128 + 50 * j));
    case D::kU8:
      return put(out, static_cast<uint8_t>((250 + j) % 256));
    case D::kI16:
      return put(out, static_cast<int16_t>(-30000 + 30000 * j));
    case D::kU16:
      return put(out, static_cast<uint16_t>(65535 - j));
    case D::kI32:
      return put(out, static_cast<int32_t>(j * j - 5));
    case D::kU32:
      return put(out, static_cast<uint32_t>(4294967295u - j));
    case D::kI64:
      return put(out, static_cast<int64_t>((j - 1) * (int64_t{1} << 40)));
    case D::kU64:
      return put(out, static_cast<uint64_t>(UINT64_MAX - static_cast<uint64_t>(j)));
    case D::kBool:
      return put(out, static_cast<uint8_t>(j % 2 == 0));
    case D::kF8E4M3:
    case D::kF8E5M2:
      return put(out, static_cast<uint8_t>(17 * j));  // raw bits, all finite
    case D::kC64:
      return put(out, std::complex<float>(static_cast<float>(j) + 0.5f, -static_cast<float>(j)));
    default:
      throw etr::InvalidArgument("the fixture has no values for this dtype");
  }
}

std::vector<std::byte> fixture_bytes(const FixtureTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::vector<std::byte> out;
  for (int64_t j = 0; j < n; ++j) fixture_value(t.dtype, j, out);
  return out;
}

int write_fixture(const std::string& path) {
  std::vector<std::vector<std::byte>> data;
  std::vector<etr::SafetensorsTensorRef> refs;
  for (const FixtureTensor& t : kFixture) data.push_back(fixture_bytes(t));
  for (size_t i = 0; i < kFixture.size(); ++i)
    refs.push_back({kFixture[i].name, kFixture[i].dtype, kFixture[i].shape, data[i].data()});
  etr::write_safetensors(path, refs, kFixtureMetadata);
  std::cout << "wrote " << refs.size() << " tensors to " << path << "\n";
  return 0;
}

int check_fixture(const std::string& path) {
  etr::SafetensorsFile file(path);
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::cout << "MISMATCH " << what << "\n";
    ++failures;
  };
  if (file.tensors().size() != kFixture.size()) {
    fail("the file has " + std::to_string(file.tensors().size()) + " tensors, the fixture " +
         std::to_string(kFixture.size()));
  }
  for (const FixtureTensor& t : kFixture) {
    const etr::SafetensorsTensor* got = file.find(t.name);
    if (got == nullptr) {
      fail(std::string(t.name) + ": missing");
      continue;
    }
    if (got->dtype != t.dtype || got->shape != t.shape) {
      fail(std::string(t.name) + ": " + std::string(safetensors_dtype_name(got->dtype)) + " " +
           etr::shape_text(got->shape) + ", expected " +
           std::string(safetensors_dtype_name(t.dtype)) + " " + etr::shape_text(t.shape));
      continue;
    }
    // read_into as a user would; then bytes against the formula.
    std::vector<std::byte> want = fixture_bytes(t), have(want.size());
    file.read_into(t.name, have.data(), t.dtype, t.shape);
    if (have != want) fail(std::string(t.name) + ": values differ");
  }
  if (file.metadata() != kFixtureMetadata) fail("metadata differs");
  std::cout << (failures ? "FAILED: " : "ok: ") << "checked " << kFixture.size()
            << " tensors and metadata of " << path << "\n";
  return failures ? 1 : 0;
}

int list_file(const std::string& path) {
  etr::SafetensorsFile file(path);
  std::vector<const etr::SafetensorsTensor*> sorted;
  for (const auto& t : file.tensors()) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (const auto* t : sorted) {
    std::cout << "tensor " << t->name << " " << safetensors_dtype_name(t->dtype) << " "
              << etr::shape_text(t->shape) << "\n";
  }
  for (const auto& [key, value] : file.metadata())
    std::cout << "metadata " << key << " " << value << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " write|check|list PATH\n";
    return 2;
  }
  const std::string command = argv[1], path = argv[2];
  try {
    if (command == "write") return write_fixture(path);
    if (command == "check") return check_fixture(path);
    if (command == "list") return list_file(path);
    std::cerr << "unknown command '" << command << "'; use write, check or list\n";
    return 2;
  } catch (const etr::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
