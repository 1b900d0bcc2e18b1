// `etr-bench manifest`: the size and cost of a ZeRO checkpoint's manifest as the world
// grows, in format version 2 (extents as runs, checkpoint/extent_runs.h) beside format
// version 1 (a record per extent, naming its file: what etr wrote before) for the same
// checkpoint. Per world: the extents and the runs, each format's bytes, rank 0's time to
// build and serialize the manifest at a save (describe, serialize, checksum) and every
// rank's time to read it at a restore (parse, checksum, sense checks; version 1 also
// converts its records to runs), and one rank's time to plan the reads of its range.
// Nothing is written to disk: the figures are the manifest's own, on rank 0.
#pragma once

#include "bench/subcommand.h"

namespace etr::bench {

void add_manifest_subcommand(CLI::App& app, SubcommandList& list);

}  // namespace etr::bench
