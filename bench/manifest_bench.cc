#include "bench/manifest_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_context.h"
#include "bench/table.h"
#include "checkpoint/checksum.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_plan.h"
#include "examples/gpt/gpt_config.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/model_presets.h"
#include "parallel/zero_plan.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The best of `reps` timings of fn(), in ms.
template <typename Fn>
double best_ms(int reps, Fn&& fn) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, ms_since(t0));
  }
  return best;
}

const std::vector<std::string> kStates = {"param", "adam.m", "adam.v"};

// What a ZeRO job of `world` ranks writes: each rank its block of every bucket
// (ZeroEngine::states(): norm_ranges, the replicated tail on rank 0).
ShardOwners zero_owners(const ZeroPlan& plan) {
  ShardOwners owners(static_cast<size_t>(plan.ranks()));
  for (int r = 0; r < plan.ranks(); ++r) {
    for (const HeldRange& h : plan.norm_ranges(r)) {
      owners[static_cast<size_t>(r)].push_back({h.begin, h.end});
    }
  }
  return owners;
}

// The manifest file's bytes (the envelope around the serialized body) of `m` as format
// version `version` writes it (`m` holds runs; version 1 holds a record per extent).
std::string manifest_file(const ckpt::Manifest& m, uint32_t version) {
  ckpt::Manifest body = m;
  if (version == 1) extents_from_runs(body);
  ckpt::ManifestFile envelope;
  envelope.set_format_version(version);
  body.SerializeToString(envelope.mutable_manifest());
  envelope.set_manifest_xxh3(Checksum::of(envelope.manifest().data(), envelope.manifest().size()));
  return envelope.SerializeAsString();
}

struct Row {
  int world = 0;
  uint64_t extents = 0, runs = 0;
  size_t bytes[2] = {0, 0};          // version 1, version 2
  double write_ms[2] = {0, 0};       // describe + serialize + checksum (rank 0 at a save)
  double write_kept_ms = 0;          // the same, v2, at a save after the first
  double read_ms[2] = {0, 0};        // parse_manifest (every rank at a restore)
  double plan_ms[2] = {0, 0};        // one rank's read plan: the old scan, the runs' arithmetic
  size_t reads = 0;                  // the plan's reads
  double shard_plan_ms = 0;          // ShardPlan's construction (every rank, first save())
};

// One rank's reads of the ranges it holds: by arithmetic over the runs (CheckpointReader),
// or by scanning every extent of each tensor, as the reader did for version 1.
size_t plan_reads(const CheckpointReader& reader, const ParamLayout& layout,
                  const std::vector<HeldRange>& held, std::vector<float>& dest, bool scan) {
  size_t reads = 0;
  if (!scan) {
    for (const std::string& s : kStates) {
      for (const HeldRange& h : held) {
        reads += reader.plan_range(s, layout, dest.data(), h.begin, h.end).size();
      }
    }
    return reads;
  }
  for (const auto& t : reader.manifest().tensors()) {
    const TensorEntry* e = layout.find(t.name());
    for (const HeldRange& h : held) {
      const int64_t lo = std::max(h.begin, e->offset), hi = std::min(h.end, e->offset + e->numel());
      if (lo >= hi) continue;
      const uint64_t a = static_cast<uint64_t>(lo - e->offset), b = static_cast<uint64_t>(hi - e->offset);
      for_each_extent(t, [&](const ExtentRef& x) {
        if (x.tensor_begin < b && x.tensor_begin + x.count > a) ++reads;
      });
    }
  }
  return reads;
}

Row measure(const ParamLayout& layout, int world, const BucketOptions& opt, int reps) {
  const ZeroPlan zero(layout, world, opt);
  const ShardOwners owners = zero_owners(zero);
  Row row;
  row.world = world;
  row.shard_plan_ms = best_ms(reps, [&] { const ShardPlan again(layout, world, kStates, &owners); });
  ckpt::Manifest m;
  const auto describe = [&](const ShardPlan& plan) {
    m.Clear();
    m.set_step(1000);
    plan.describe(m);
    for (int r = 0; r < world; ++r) {
      ckpt::ShardFile* f = m.add_files();
      f->set_name(plan.file_name(r));
      f->set_bytes(plan.file_bytes(r));
      f->set_writer_rank(r);
    }
  };
  // A save's manifest from a new plan (the first save; version 1's writer, every save),
  // and from a kept one whose records are described already (every later save).
  std::string file[2];
  for (uint32_t v : {1u, 2u}) {
    row.write_ms[v - 1] = 1e300;
    for (int i = 0; i < reps; ++i) {
      const ShardPlan plan(layout, world, kStates, &owners);
      const auto t0 = Clock::now();
      describe(plan);
      file[v - 1] = manifest_file(m, v);
      row.write_ms[v - 1] = std::min(row.write_ms[v - 1], ms_since(t0));
    }
  }
  const ShardPlan kept(layout, world, kStates, &owners);
  describe(kept);
  row.write_kept_ms = best_ms(reps, [&] {
    describe(kept);
    file[1] = manifest_file(m, 2);
  });
  for (uint32_t v : {1u, 2u}) {
    row.bytes[v - 1] = file[v - 1].size();
    row.read_ms[v - 1] = best_ms(reps, [&] { m = parse_manifest(file[v - 1], "the manifest"); });
  }
  for (const auto& t : m.tensors()) {
    row.runs += static_cast<uint64_t>(t.runs_size());
    row.extents += extent_count(t);
  }
  const std::vector<HeldRange> held = zero.held(world / 2);
  const CheckpointReader reader("/nonexistent", m);  // plans only: no file is opened
  int64_t most = 0;
  for (const HeldRange& h : held) most = std::max(most, h.numel());
  std::vector<float> dest(static_cast<size_t>(most));  // what a plan's reads would fill
  for (int scan : {1, 0}) {
    row.plan_ms[1 - scan] =
        best_ms(reps, [&] { row.reads = plan_reads(reader, layout, held, dest, scan); });
  }
  return row;
}

struct Args {
  std::string preset = "gpt2-124m";
  std::vector<int> worlds = {8, 64, 256, 1024};
  std::string first_bucket = "256KiB";
  std::string bucket = "1MiB";
  int reps = 3;
  std::string json;
};

void run_manifest(BenchContext& ctx, const Args& a) {
  const std::string& preset = a.preset;
  const std::string& bucket = a.bucket;
  const ModelPreset* p = gpt::find_model_preset(preset);
  if (!p) throw ConfigError("--preset " + preset + " is not a model preset");
  gpt::GptConfig g;
  g.n_layer = p->n_layer;
  g.n_head = p->n_head;
  g.d_model = p->d_model;
  g.seq_len = p->seq_len;
  g.vocab_size = p->vocab_size;
  const auto stack = gpt::build_stack<float>(g);
  const ParamLayout& layout = stack->layout();
  BucketOptions opt;
  opt.first_bucket_bytes = parse_bytes(a.first_bucket);
  opt.bucket_cap_bytes = parse_bytes(bucket);
  if (!ctx.is_root()) return;
  std::printf("# etr-bench manifest: GPT-2 %s (%zu tensors, %.1f M elements), ZeRO buckets of %s "
              "(the first %s), 3 states; rank 0 alone, best of %d\n",
              preset.c_str(), layout.entries().size(), static_cast<double>(layout.numel()) / 1e6,
              bucket.c_str(), a.first_bucket.c_str(), a.reps);
  std::printf("# v1 = format version 1 (a record per extent, naming its file: etr before), "
              "v2 = version 2 (runs); v1's write converts the runs describe() makes into "
              "records, a little more than the old writer did\n# write = describe + serialize + checksum (rank 0 at a "
              "save) from a new plan (a first save; v1: every save), v2 kept = from the plan "
              "the writer keeps (every later save: its records copied); read = parse_manifest: checksum, sense checks (every rank at a restore)\n"
              "# plan = rank world/2's reads of what it holds: v1 scanned every extent of a "
              "tensor, v2 reaches them by arithmetic; ShardPlan = where every rank's elements "
              "go, which every rank builds in save() at its first save (then kept)\n");
  Table t;
  t.add_column("world", 6).add_column("extents", 9).add_column("runs", 7);
  t.add_column("v1", 11, "bytes").add_column("v2", 9, "bytes").add_column("v1/v2", 7, "bytes");
  t.add_column("v1", 9, "write ms").add_column("v2", 8, "write ms").add_column("v2 kept", 8, "write ms");
  t.add_column("v1", 9, "read ms").add_column("v2", 8, "read ms");
  t.add_column("v1", 9, "plan ms").add_column("v2", 8, "plan ms").add_column("reads", 7);
  t.add_column("ShardPlan ms", 13);
  std::fputs(t.header().c_str(), stdout);
  nlohmann::json rows = nlohmann::json::array();
  for (int world : a.worlds) {
    const Row r = measure(layout, world, opt, a.reps);
    std::fputs(t.row({cell("%d", r.world), cell("%llu", static_cast<unsigned long long>(r.extents)),
                      cell("%llu", static_cast<unsigned long long>(r.runs)),
                      format_bytes(static_cast<double>(r.bytes[0])),
                      format_bytes(static_cast<double>(r.bytes[1])),
                      cell("%.1f", static_cast<double>(r.bytes[0]) / static_cast<double>(r.bytes[1])),
                      cell("%.2f", r.write_ms[0]), cell("%.2f", r.write_ms[1]),
                      cell("%.2f", r.write_kept_ms), cell("%.2f", r.read_ms[0]),
                      cell("%.2f", r.read_ms[1]), cell("%.2f", r.plan_ms[0]), cell("%.3f", r.plan_ms[1]),
                      cell("%zu", r.reads), cell("%.2f", r.shard_plan_ms)})
                   .c_str(),
               stdout);
    std::fflush(stdout);
    rows.push_back({{"world", r.world}, {"extents", r.extents}, {"runs", r.runs},
                    {"bytes_v1", r.bytes[0]}, {"bytes_v2", r.bytes[1]},
                    {"write_ms_v1", r.write_ms[0]}, {"write_ms_v2", r.write_ms[1]},
                    {"write_ms_v2_kept", r.write_kept_ms},
                    {"read_ms_v1", r.read_ms[0]}, {"read_ms_v2", r.read_ms[1]},
                    {"plan_ms_v1", r.plan_ms[0]}, {"plan_ms_v2", r.plan_ms[1]}, {"reads", r.reads},
                    {"shard_plan_ms", r.shard_plan_ms}});
  }
  if (!a.json.empty()) {
    std::ofstream(a.json) << nlohmann::json{{"preset", preset}, {"bucket", bucket}, {"rows", rows}}.dump(2)
                        << "\n";
  }
}

}  // namespace

void add_manifest_subcommand(CLI::App& app, SubcommandList& list) {
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "manifest", "A ZeRO checkpoint's manifest as the world grows: format version 2 (runs) "
                  "beside version 1 (a record per extent)");
  cmd->add_option("--preset", args->preset, "The GPT-2 model preset")->capture_default_str();
  cmd->add_option("--worlds", args->worlds, "World sizes (ranks writing the checkpoint)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--first-bucket", args->first_bucket,
                  "The first ZeRO bucket's size (parallel.first_bucket_size)")
      ->capture_default_str();
  cmd->add_option("--bucket", args->bucket, "Every later bucket's size (parallel.bucket_size)")
      ->capture_default_str();
  cmd->add_option("--reps", args->reps, "Timings per figure; the best is shown")->capture_default_str();
  cmd->add_option("--json", args->json, "Also write the figures to this JSON file (rank 0)");
  list.push_back({cmd, [args](BenchContext& ctx) {
                    if (args->reps < 1) throw ConfigError("--reps must be at least 1");
                    for (int w : args->worlds) {
                      if (w < 1 || w > 65536) throw ConfigError("--worlds takes sizes from 1 to 65536");
                    }
                    run_manifest(ctx, *args);
                  }});
}

}  // namespace etr::bench
