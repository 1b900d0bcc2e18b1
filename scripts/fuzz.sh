#!/usr/bin/env bash
# Fuzzes etr's readers for longer than ctest does (README.md, "Fuzzing").
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# SECONDS per target (default 600); TARGETs among fuzz_config fuzz_manifest
# fuzz_token_file fuzz_safetensors (default all), run one after the other (run two
# scripts side by side to use two cores). Builds build-fuzz/ with clang (-DETR_FUZZ=ON)
# when needed. Each target's corpus grows in $ETR_FUZZ_DIR/<target>/corpus (default
# ~/.cache/etr-fuzz, outside the repository), starting from the seeds in
# tests/fuzz/corpus/<target>/; a crash, leak, hang or OOM leaves its input in
# $ETR_FUZZ_DIR/<target>/artifacts/ and makes the script exit 1 after the other targets.
# A finding, once fixed, belongs in the seed corpus as a regression.
set -euo pipefail
ETR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ETR_ROOT/build-fuzz"
WORK="${ETR_FUZZ_DIR:-$HOME/.cache/etr-fuzz}"
ALL=(fuzz_config fuzz_manifest fuzz_token_file fuzz_safetensors)

usage() {
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...] (targets: ${ALL[*]})" >&2
  exit 2
}
seconds=600
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then
  seconds=$1
  shift
fi
[[ "$seconds" -gt 0 ]] || usage
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || { echo "scripts/fuzz.sh: unknown target '$t'" >&2; usage; }
done

if [[ ! -f "$BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S "$ETR_ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DETR_FUZZ=ON >/dev/null
fi
ninja -C "$BUILD" --quiet "${targets[@]}"

status=0
for t in "${targets[@]}"; do
  mkdir -p "$WORK/$t/corpus" "$WORK/$t/artifacts"
  cp -n "$ETR_ROOT/tests/fuzz/corpus/$t"/* "$WORK/$t/corpus/"
  echo "scripts/fuzz.sh: $t for $seconds s, corpus $WORK/$t/corpus"
  log="$WORK/$t/last-run.log"
  # Same limits as ctest (tests/fuzz/run_fuzz_target.sh): 10 s per input, 2 GiB.
  if ! "$BUILD/$t" "$WORK/$t/corpus" -max_total_time="$seconds" -timeout=10 \
      -rss_limit_mb=2048 -artifact_prefix="$WORK/$t/artifacts/" -print_final_stats=1 \
      >"$log" 2>&1; then
    status=1
    echo "scripts/fuzz.sh: $t FOUND something; the report is in $log:" >&2
    grep -E "ERROR|SUMMARY|Test unit written" "$log" >&2 || tail -20 "$log" >&2
  fi
  grep -E "^#[0-9]+[[:space:]]+DONE|^Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss" "$log" |
    sed "s/^/$t: /"
done
exit "$status"
