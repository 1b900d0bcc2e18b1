// CheckpointReader::read_range (checkpoint/checkpoint_reader.h): the reader half of the
// state seam, loading a saved holding into storage for a held range only (dest[0] is
// layout element `begin`). The reference is read_state of the whole buffer from the same
// checkpoint; ranges start and end inside tensors, in padding, on shard-file edges, and
// span several of each, for checkpoints written by 1 and 3 ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/offline.h"
#include "unit/ragged_layout.h"

namespace etr {
namespace {

namespace fs = std::filesystem;
using testing::ragged_layout;

ckpt::Manifest meta(int world) {
  ckpt::Manifest m;
  m.set_step(3);
  m.mutable_data()->set_samples_seen(24);
  m.mutable_layout()->set_world_size(world);
  m.mutable_layout()->set_dp_size(world);
  m.mutable_layout()->set_pp_size(1);
  m.set_tier("durable");
  m.set_writer("checkpoint_read_range_test");
  return m;
}

TEST(CheckpointReadRange, EqualsTheSliceOfAWholeRead) {
  std::string tmpl = (fs::temp_directory_path() / "etr-read-range-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
  const fs::path dir = tmpl;
  const ParamLayout layout = ragged_layout();
  const int64_t n = layout.numel();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> param(n, 0.0f), moment(n, 0.0f);
  for (const TensorEntry& e : layout.entries()) {
    for (int64_t i = 0; i < e.numel(); ++i) {
      param[e.offset + i] = u(rng);
      moment[e.offset + i] = u(rng);
    }
  }
  const std::vector<NamedState> states = {{"param", param.data()}, {"adam.m", moment.data()}};
  const std::vector<std::pair<int64_t, int64_t>> ranges = {
      {0, n}, {0, 7}, {3, 20}, {7, 16}, {20, 100}, {81, 96}, {96, 97}, {50, 142}, {141, 142}};
  for (int world : {1, 3}) {
    const fs::path ck = write_checkpoint(dir / std::to_string(world), meta(world), layout,
                                         states, world);
    CheckpointReader reader(ck);
    for (const char* state : {"param", "adam.m"}) {
      std::vector<float> whole(n, 0.0f);
      reader.read_state(state, layout, whole.data(), 0, n);
      for (auto [b, e] : ranges) {
        std::vector<float> dest(e - b, 0.0f);
        reader.read_range(state, layout, dest.data(), b, e);
        for (int64_t i = b; i < e; ++i) {
          ASSERT_EQ(dest[i - b], whole[i])
              << state << " written by " << world << " rank(s), range [" << b << ", " << e
              << "), element " << i;
        }
      }
      const std::vector<float>& saved = std::string(state) == "param" ? param : moment;
      EXPECT_EQ(whole, saved) << state;  // the whole read is the saved state itself
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace etr
