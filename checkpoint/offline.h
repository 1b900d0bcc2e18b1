// Checkpoint work done by one process outside a training job (etr-ckpt): a checkpoint's
// tensors as a ParamLayout, writing a whole checkpoint for any world size, and copying
// one durably.
//
//   ckpt::Manifest m = read_manifest(src);
//   ParamLayout layout = layout_from_manifest(m);   // the "param" records, in record order
//   CheckpointReader reader(src);
//   write_checkpoint(out_root, meta, layout, {"param", "adam.m", "adam.v"}, /*world=*/3,
//                    [&](const std::string& s, float* flat, int64_t begin, int64_t end) {
//                      reader.read_state(s, layout, flat, begin, end);
//                    });                             // out_root/step-NNNNNNNNN
//   copy_checkpoint(src, root);                      // root/step-NNNNNNNNN, checked on the way
//
// Both writers follow the training writer's protocol (checkpoint/checkpoint_writer.h): the
// files go into root/.step-NNNNNNNNN.partial/ (each written, fsynced and renamed through
// DurableFile), manifest.pb last, then the directory is renamed to root/step-NNNNNNNNN and
// root is fsynced; so the checkpoint is visible only when complete, and a failure leaves
// nothing behind. Neither replaces an existing checkpoint: that is a CheckpointError.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/manifest.pb.h"
#include "checkpoint/shard_plan.h"
#include "runtime/param_layout.h"

namespace etr {

// The layout of the tensors a checkpoint saved: the records of its "param" state (of its
// first state when it has no "param"), in record order, which is the order of the
// writer's layout. Every entry has layer 0 and no weight decay (a checkpoint does not
// record them; readers match tensors by name and shape only). Throws CheckpointError
// when the manifest holds no tensors, a tensor that is not f32 or a shape of more than
// Shape::kMaxDims dimensions.
ParamLayout layout_from_manifest(const ckpt::Manifest& manifest);

// Fills the elements [begin, end) of `flat`, a flat buffer of the layout, with state
// `state` (CheckpointReader::read_state fits).
using StateFiller =
    std::function<void(const std::string& state, float* flat, int64_t begin, int64_t end)>;

// Writes the checkpoint root/step-N (N = meta.step()) laid out for `world` writers: the
// shard files of ShardPlan(layout, world, states), one after another, then manifest.pb.
// `meta` carries everything but the tensors, files and states (cleared and filled here);
// its layout and tier are kept as given. `fill` is asked for one state's range of one
// shard file at a time, so the memory needed is one flat buffer of the layout, however
// many states there are. Returns root/step-N.
std::filesystem::path write_checkpoint(const std::filesystem::path& root, ckpt::Manifest meta,
                                       const ParamLayout& layout,
                                       const std::vector<std::string>& states, int world,
                                       const StateFiller& fill);

// The same from full flat buffers in memory.
std::filesystem::path write_checkpoint(const std::filesystem::path& root, ckpt::Manifest meta,
                                       const ParamLayout& layout,
                                       std::span<const NamedState> states, int world);

// Copies the checkpoint `src` (a directory holding manifest.pb) to root/step-N, reading
// each shard file once: its size and XXH3 are checked against the manifest on the way,
// and a mismatch is a CheckpointError naming the file. Files of `src` the manifest does
// not list are not copied. Returns root/step-N.
std::filesystem::path copy_checkpoint(const std::filesystem::path& src,
                                      const std::filesystem::path& root);

}  // namespace etr
