#!/usr/bin/env bash
# etr-train under mpirun as a user runs it (data parallel, np 2):
#  1. a 2-rank run trains, prints the communication figures in its progress line and
#     writes a merged trace with both ranks;
#  2. a rank that raises an error (ETR_FAIL_AT_STEP=3:1) ends the whole job at once with
#     its message and a non-zero status: the other rank, waiting in a collective, is not
#     left hanging;
#  3. a global batch smaller than the world is refused with a sentence.
# Usage: dp_train_test.sh ETR_MPIRUN ETR_TRAIN CONFIG
set -u
mpirun=$1 train=$2 config=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--config "$config" --set schedule.max_steps=6 --set log.log_every=1
        --set log.eval_every=0 --set runtime.threads=1)

echo "== 1. two ranks train and trace"
"$mpirun" -np 2 --bind-to none "$train" "${common[@]}" --trace "$work/trace.json" \
  >"$work/out1" 2>&1 || { cat "$work/out1"; fail "the 2-rank run failed"; }
grep -q "data parallel: 2 ranks" "$work/out1" || fail "no data-parallel start-up line"
grep -q "hidden [0-9]*%" "$work/out1" || { cat "$work/out1"; fail "no hidden fraction in the progress line"; }
grep -q "wrote the trace of 2 rank(s)" "$work/out1" || fail "no trace written"
python3 - "$work/trace.json" <<'PY' || fail "the trace is not valid Trace Event Format JSON with both ranks"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
pids = {e["pid"] for e in events if e["ph"] == "X"}
assert pids == {0, 1}, pids
assert any(e["cat"] == "comm" for e in events if e["ph"] == "X")
PY

echo "== 2. a failing rank ends the job"
start=$(date +%s)
ETR_FAIL_AT_STEP=3:1 timeout 120 "$mpirun" -np 2 --bind-to none -x ETR_FAIL_AT_STEP "$train" \
  "${common[@]}" >"$work/out2" 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" -ne 0 ] || fail "the job exited 0 although rank 1 failed"
[ "$status" -ne 124 ] || fail "the job hung after rank 1 failed"
grep -q "rank 1 fails at step 3" "$work/out2" || { cat "$work/out2"; fail "the failing rank's message is missing"; }
[ "$elapsed" -lt 30 ] || fail "the job took ${elapsed} s to end after the failure"
echo "ended with status $status after ${elapsed} s"

echo "== 3. a global batch smaller than the world"
"$mpirun" -np 2 --bind-to none "$train" "${common[@]}" --set batch.global_batch=1 \
  --set batch.micro_batch=1 >"$work/out3" 2>&1 && fail "accepted a global batch of 1 on 2 ranks"
grep -q "smaller than the 2 data-parallel ranks" "$work/out3" || { cat "$work/out3"; fail "no clear message"; }
echo "PASS"
