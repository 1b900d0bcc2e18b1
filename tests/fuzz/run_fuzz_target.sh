#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time on a copy of its seed corpus (ctest's "fuzz"
# tests; scripts/fuzz.sh runs longer ones on a corpus it keeps).
#   run_fuzz_target.sh TARGET SEED_DIR WORK_DIR SECONDS
# Exit status 0 when the target found nothing; otherwise libFuzzer's (the reproducer is
# left in WORK_DIR/artifacts/, which the message names).
set -euo pipefail
if [[ $# -ne 4 ]]; then
  echo "usage: run_fuzz_target.sh TARGET SEED_DIR WORK_DIR SECONDS" >&2
  exit 2
fi
target=$1 seeds=$2 work=$3 seconds=$4
rm -rf "$work"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$seeds"/* "$work/corpus/"
# -timeout: one input running 10 s is a hang; -rss_limit_mb: a reader allocating what the
# input claims is an OOM finding. Quiet about each new input (-print_final_stats shows the
# exec count at the end).
"$target" "$work/corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 -reduce_inputs=1 2>&1 |
  { grep -v -E '^#[0-9]+\s+(NEW|REDUCE)' || true; }
