// Fuzz target: the safetensors reader (checkpoint/safetensors.h): header length, header
// JSON, dtypes, shapes, data offsets and their tiling of the data section.
//
// Input: the whole file. SafetensorsFile must open it or throw IoError; any other
// exception (a JSON library error, std::bad_alloc), a crash or a sanitizer report is a
// finding. For a file it opens, every tensor must be found by name and copied out with
// read_into (which reads all its bytes), and its shape's bytes must be its extent.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "checkpoint/safetensors.h"
#include "runtime/error.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static etr::fuzz::MemoryFile memory_file;
  try {
    const etr::SafetensorsFile file(memory_file.write(data, size));
    uint64_t covered = 0;
    std::vector<std::byte> copy;
    for (const etr::SafetensorsTensor& t : file.tensors()) {
      if (&file.tensor(t.name) != &t) std::abort();
      const uint64_t extent = t.end - t.begin;
      if (t.bytes.size() != extent || t.begin != covered) std::abort();
      if (static_cast<uint64_t>(t.numel()) * etr::safetensors_dtype_size(t.dtype) != extent) {
        std::abort();
      }
      covered = t.end;
      copy.assign(extent, std::byte{0});
      file.read_into(t.name, copy.data(), t.dtype, t.shape);
    }
    if (covered != file.data_size()) std::abort();
    if (8 + file.header_size() + file.data_size() != size) std::abort();
  } catch (const etr::IoError&) {
  }
  return 0;
}
