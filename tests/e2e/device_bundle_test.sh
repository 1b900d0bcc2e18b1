#!/usr/bin/env bash
# The GPU machine's bundle, run here exactly as the device runs it (docs/gpu.md):
# scripts/device_bundle.sh packs this build tree, scripts/device_check.sh unpacks it in a
# temporary folder and runs the gpu tests (skipped here: no GPU), etr-train as a singleton
# and on 2 ranks under the bundle's mpirun, and checks from the loader's trace that every
# library came from the bundle, glibc/libstdc++ or CUDA, never from this machine's Open
# MPI, OpenBLAS or protobuf. Then a broken bundle must fail the check: one without its
# OpenBLAS, whose programs find this machine's copy instead (the trace must catch it), and
# --require-gpu must fail cleanly on a machine without a GPU.
# Usage: device_bundle_test.sh BUILD_DIR
set -euo pipefail
build=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/etr-bundle-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# xz -0: a third of the packing time of the real bundle's -6, nothing else changes.
ETR_BUNDLE_XZ_OPT="-0 -T0" "$root/scripts/device_bundle.sh" --build-dir "$build" --out "$work/bundle.tar.xz"
listing=$(tar -tJf "$work/bundle.tar.xz")
for want in ./bin/etr-train ./bin/etr-bench ./ompi/bin/orterun ./ompi/bin/orted ./tests/tests.tsv \
            ./lib/libmpi.so.40 ./lib/libopenblas.so.0 ./lib/libprotobuf.so.32 ./lib/libxxhash.so.0; do
  grep -qx "$want" <<<"$listing" || fail "the bundle lacks $want"
done
if grep -E '/lib(cudart|cublas|cublasLt|nccl|cuda)\.so' <<<"$listing"; then
  fail "CUDA's own libraries must not travel"
fi
grep -q 'mca_btl_vader.so$' <<<"$listing" || fail "the bundle lacks Open MPI's shared-memory transport"
if grep -E 'mca_(btl_openib|pml_ucx|mtl_ofi)\.so$' <<<"$listing"; then
  fail "network plugins a single host lacks must be left out"
fi

# The check as the device runs it, minus --require-gpu.
"$root/scripts/device_check.sh" --bundle "$work/bundle.tar.xz" --out "$work/out" ||
  fail "device_check.sh failed on a good bundle (log: above)"
summary=$(cat "$work/out/summary.md")
echo "$summary"
check_row() {  # STEP RESULT [DETAIL-PATTERN]
  grep -Eq "^\| $1 \| $2 \| ${3:-}" <<<"$summary" || fail "summary row '$1' is not '$2 ${3:-}'"
}
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  check_row machine pass "no GPU"
fi
check_row bundle pass
check_row libraries pass
check_row train_np1 pass "6 steps, loss"
check_row train_np2 pass "6 steps, loss"
check_row self-contained pass "[0-9]+ processes loaded only bundled"
# Each gpu test: one row, or a row per suite ("name:Suite"); every one passes.
while IFS=$'\t' read -r name _; do
  grep -Eq "^\| $name(:[^ ]+)? \| pass \|" <<<"$summary" || fail "no passing row for the gpu test $name"
  if grep -Eq "^\| $name(:[^ ]+)? \| fail \|" <<<"$summary"; then fail "a row of $name failed"; fi
done < <(tar -xOJf "$work/bundle.tar.xz" ./tests/tests.tsv)
# Both ranks of train_np2 and mpirun itself were traced: at least 1 + 3 processes.
procs=$(grep -Eo '\| ([0-9]+) processes loaded' <<<"$summary" | grep -Eo '[0-9]+')
((procs >= 4)) || fail "only $procs processes were traced"

# A bundle without OpenBLAS: this machine's copy is found instead, which the trace catches.
repack() {  # NAME FILE...: the bundle with FILE... removed
  rm -rf "$work/x" && mkdir "$work/x" && tar -C "$work/x" -xJf "$work/bundle.tar.xz"
  local name=$1
  shift
  for f in "$@"; do rm "$work/x/$f"; done
  XZ_OPT=-0 tar -C "$work/x" -cJf "$work/$name.tar.xz" .
}
repack no-openblas lib/libopenblas.so.0
if "$root/scripts/device_check.sh" --bundle "$work/no-openblas.tar.xz" --out "$work/out2" >/dev/null; then
  fail "the check passed a bundle whose OpenBLAS came from this machine"
fi
grep -Eq '^\| self-contained \| fail \| loaded from outside the bundle: .*libopenblas' "$work/out2/summary.md" ||
  { cat "$work/out2/summary.md"; fail "the check did not name OpenBLAS as loaded from outside"; }

# --require-gpu on a machine without one: one clear failure, nothing run.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  if "$root/scripts/device_check.sh" --bundle "$work/bundle.tar.xz" --out "$work/out4" --require-gpu >/dev/null; then
    fail "--require-gpu passed without a GPU"
  fi
  grep -q '^| machine | fail | no GPU visible' "$work/out4/summary.md" || fail "--require-gpu did not say 'no GPU'"
fi
echo "PASS: the device bundle runs from a temporary folder on its own libraries"
