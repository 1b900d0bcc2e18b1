// GPT-2 weights out to Hugging Face's layout and back: bitwise identical round trip, the
// Conv1D transposes checked element by element, and each malformed file refused with
// the tensor named.
#include "examples/gpt/hf_weights.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "checkpoint/safetensors.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"

namespace etr::gpt {
namespace {

namespace fs = std::filesystem;

GptConfig tiny() {
  GptConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.seq_len = 32;
  c.vocab_size = 200;  // padded to 256 in etr, 200 rows in the file
  return c;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("etr_hf_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

template <typename F>
void expect_io_error(F f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning: " << fragment;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(HfWeights, ExportThenImportIsBitwiseIdentical) {
  HostAllocator alloc;
  GptModel<float> a(tiny(), alloc), b(tiny(), alloc);
  a.init(42);
  b.init(7);
  const fs::path dir = temp_dir("roundtrip");
  export_hf(a, dir);
  EXPECT_TRUE(fs::exists(dir / "config.json"));
  import_hf(b, dir);
  EXPECT_EQ(std::memcmp(a.params(), b.params(), a.layout().numel() * sizeof(float)), 0);
  fs::remove_all(dir);
}

TEST(HfWeights, FileHoldsHuggingFaceNamesShapesAndTransposes) {
  HostAllocator alloc;
  const GptConfig c = tiny();
  GptModel<float> m(c, alloc);
  m.init(3);
  const fs::path dir = temp_dir("layout");
  export_hf(m, dir);
  SafetensorsFile f(dir / "model.safetensors");
  EXPECT_EQ(f.tensors().size(), static_cast<size_t>(4 + 12 * c.n_layer));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensor("transformer.wte.weight").shape, (std::vector<int64_t>{c.vocab_size, 16}));
  const auto& w = f.tensor("transformer.h.1.mlp.c_fc.weight");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{16, 64}));  // [in, out]
  const float* etr_w = m.params() + m.layout().find("h.1.mlp.c_fc.weight")->offset;  // [64, 16]
  auto file_w = w.as<float>();
  for (int64_t o = 0; o < 64; ++o)
    for (int64_t i = 0; i < 16; ++i) ASSERT_EQ(file_w[i * 64 + o], etr_w[o * 16 + i]);
  fs::remove_all(dir);
}

TEST(HfWeights, RefusesMissingUnknownAndMisshapenTensors) {
  HostAllocator alloc;
  const GptConfig c = tiny();
  GptModel<float> m(c, alloc);
  m.init(1);
  const fs::path dir = temp_dir("bad");
  fs::create_directories(dir);
  std::vector<float> zeros(64 * 64, 0.f);
  // Missing: only one tensor.
  write_safetensors(dir / "missing.safetensors",
                    {{"transformer.wpe.weight", SafetensorsDType::kF32, {32, 16}, zeros.data()}});
  expect_io_error([&] { import_hf(m, dir / "missing.safetensors"); }, "has no tensor 'wte.weight'");
  // Unknown name.
  write_safetensors(dir / "unknown.safetensors",
                    {{"transformer.h.9.ln_1.weight", SafetensorsDType::kF32, {16}, zeros.data()}});
  expect_io_error([&] { import_hf(m, dir / "unknown.safetensors"); }, "'transformer.h.9.ln_1.weight'");
  // Wrong shape: export, then rewrite one tensor untransposed is not possible to detect for
  // square ones; a rectangular one must be refused with its shapes.
  export_hf(m, dir / "good");
  SafetensorsFile good(dir / "good" / "model.safetensors");
  std::vector<SafetensorsTensorRef> refs;
  std::vector<int64_t> wrong = {64, 16};
  for (const auto& t : good.tensors()) {
    refs.push_back({t.name, t.dtype, t.name == "transformer.h.0.mlp.c_fc.weight" ? wrong : t.shape,
                    t.bytes.data()});
  }
  write_safetensors(dir / "shape.safetensors", refs);
  expect_io_error([&] { import_hf(m, dir / "shape.safetensors"); }, "h.0.mlp.c_fc.weight");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace etr::gpt
