#!/bin/sh
# The "install_own_model" test (examples/CMakeLists.txt): etr used as a library. Installs
# an etr build tree into a temporary prefix, builds examples/own_model (a model of its own,
# not GPT-2) against it with find_package(etr), and with the installed tools:
#   a. trains it on 2 ranks (data parallel) with checkpoints: the loss falls;
#   b. a run stopped by a failure at step 21 resumes with --resume latest from step 20 and
#      ends with parameters and optimizer state bitwise equal to the uninterrupted run's
#      (the checkpoint shard files are compared byte for byte);
#   c. under etr-run, host discovery reports a second slot: the job resizes from 1 to 2
#      ranks at a step boundary and completes.
# The temporary directory is removed either way.
#
# Usage: test_install.sh <etr build dir> <example source dir> <cmake> <generator>
#                        <C++ compiler> <build type>
set -eu
build_dir=$1 src_dir=$2 cmake=$3 generator=$4 cxx=$5 build_type=$6

tmp=$(mktemp -d "${TMPDIR:-/tmp}/etr-own-model-test.XXXXXX")
cleanup() {  # under set -e: every command here must succeed
  if [ -n "${run_pid:-}" ]; then kill -KILL "$run_pid" 2>/dev/null || true; fi
  pkill -KILL -f "$tmp/" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }

echo "== install $build_dir -> $tmp/prefix"
"$cmake" --install "$build_dir" --prefix "$tmp/prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; exit 1; }
bin=$tmp/prefix/bin

echo "== configure and build $src_dir against the installed etr"
"$cmake" -S "$src_dir" -B "$tmp/build" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE="$build_type" >"$tmp/configure.log" || { cat "$tmp/configure.log"; exit 1; }
"$cmake" --build "$tmp/build" || exit 1
prog=$tmp/build/own_model

# A tiny model and batch; lr high enough that 40 steps show learning.
set -- --set model.d_model=32 --set model.n_layer=2 --set model.seq_len=16 \
  --set batch.global_batch=8 --set optimizer.lr=1e-2 --set schedule.warmup_steps=5 \
  --set runtime.threads=1 --set log.log_every=10 --set log.eval_every=20

echo "== a. 2 ranks, 40 steps, a checkpoint every 10"
"$bin/etr-mpirun" -np 2 "$prog" "$@" --set schedule.max_steps=40 \
  --set checkpoint.dir="$tmp/ref" --set checkpoint.every=10 >"$tmp/a.out" 2>&1 ||
  { cat "$tmp/a.out"; fail "a: the 2-rank run failed"; }
done_line=$(grep "done: 40 steps" "$tmp/a.out") || { cat "$tmp/a.out"; fail "a: no summary"; }
echo "$done_line"
# "loss 5.5454 -> 1.2345": the last loss must be under half the first.
echo "$done_line" | awk '{for (i = 1; i < NF; i++) if ($i == "loss") { first = $(i + 1); last = $(i + 3) }}
  END { exit !(last < first / 2) }' || fail "a: the loss did not fall to half"
grep -q "data parallel: 2 ranks" "$tmp/a.out" || fail "a: not data parallel on 2 ranks"
ref=$tmp/ref/step-000000040
[ -f "$ref/manifest.pb" ] || fail "a: no checkpoint of step 40"

echo "== b. a failure at step 21, then --resume latest"
# Synchronous saves: step 20's checkpoint is committed before step 21 starts (an async
# one commits at the next step boundary, which the failing rank never reaches).
ETR_FAIL_AT_STEP=21:1 "$bin/etr-mpirun" -np 2 "$prog" "$@" --set schedule.max_steps=40 \
  --set checkpoint.dir="$tmp/b" --set checkpoint.every=10 --set checkpoint.async=false \
  >"$tmp/b1.out" 2>&1 &&
  { cat "$tmp/b1.out"; fail "b: the run with a failure at step 21 succeeded"; }
[ -f "$tmp/b/step-000000020/manifest.pb" ] || { cat "$tmp/b1.out"; fail "b: no checkpoint of step 20"; }
[ ! -e "$tmp/b/step-000000030" ] || fail "b: the failing run went past step 21"
"$bin/etr-mpirun" -np 2 "$prog" "$@" --set schedule.max_steps=40 \
  --set checkpoint.dir="$tmp/b" --set checkpoint.every=10 --resume latest >"$tmp/b2.out" 2>&1 ||
  { cat "$tmp/b2.out"; fail "b: the resumed run failed"; }
grep "done: 20 steps (from step 20)" "$tmp/b2.out" || { cat "$tmp/b2.out"; fail "b: did not continue from step 20"; }
for shard in "$ref"/shard-*.bin; do
  cmp "$shard" "$tmp/b/step-000000040/$(basename "$shard")" ||
    fail "b: $(basename "$shard") differs from the uninterrupted run's"
done
echo "b: the resumed run's state equals the uninterrupted run's, byte for byte"

echo "== c. etr-run: discovery reports a second slot, the job grows from 1 to 2 ranks"
printf 'localhost:1\n' >"$tmp/slots"
printf '#!/bin/sh\ncat %s\n' "$tmp/slots" >"$tmp/discover.sh"
chmod +x "$tmp/discover.sh"
steps=3000
"$bin/etr-run" --run-dir "$tmp/c.run" --checkpoint-dir "$tmp/c.ck" --discovery-interval 0.2 \
  --min-np 1 --max-np 2 --host-discovery-script "$tmp/discover.sh" -- \
  "$prog" "$@" --set model.d_model=64 --set schedule.max_steps=$steps \
  --set checkpoint.every=100 --set log.log_every=500 --set log.eval_every=0 >"$tmp/c.out" 2>&1 &
run_pid=$!
i=0
while [ "$( { tr -d ' \n' <"$tmp/c.run/progress"; } 2>/dev/null || echo -1)" -lt 50 ]; do
  kill -0 "$run_pid" 2>/dev/null || { cat "$tmp/c.out"; fail "c: etr-run ended before step 50"; }
  i=$((i + 1))
  [ "$i" -lt 6000 ] || { cat "$tmp/c.out"; fail "c: no step 50 within 60 s"; }
  sleep 0.01
done
printf 'localhost:2\n' >"$tmp/slots"
i=0
while kill -0 "$run_pid" 2>/dev/null; do
  i=$((i + 1))
  [ "$i" -lt 1200 ] || { cat "$tmp/c.out"; fail "c: etr-run still running after 120 s"; }
  sleep 0.1
done
status=0
wait "$run_pid" || status=$?
run_pid=
[ "$status" -eq 0 ] || { cat "$tmp/c.out"; fail "c: etr-run exited $status"; }
grep "launch 2: 2 rank(s) on localhost:2 (after a resize" "$tmp/c.out" ||
  { cat "$tmp/c.out"; fail "c: the job was not relaunched on 2 ranks"; }
grep "the job completed" "$tmp/c.out" || { cat "$tmp/c.out"; fail "c: no completion"; }
[ -f "$(printf '%s/step-%09d' "$tmp/c.ck" $steps)/manifest.pb" ] || fail "c: no final checkpoint"
echo "PASS: own_model trains, resumes and resizes with the installed etr"
