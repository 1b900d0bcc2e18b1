#!/bin/sh
# etr-bench train's 1-thread row runs on one CPU (issue 13, case 11: it trained on
# both cores), and thread counts its CPUs cannot bear are refused before running.
#
#   bench/train_premise_test.sh ETR_BENCH
#
# What is checked does not depend on speed or on the machine's load: the row's CPUs
# (its threads' affinities), its cores busy (at most 1 on one CPU, whatever the load),
# and the verdict; only "other work kept" and "waited for a CPU" (other processes on the
# core, e.g. under ctest -j) are accepted as refusals, since that is the machine, not
# the row.
set -eu
bench=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

status=0
"$bench" train --threads 1 --steps 2 --warmup 1 --json "$work/t.json" >"$work/out" 2>"$work/err" ||
  status=$?
cat "$work/out" "$work/err"
python3 - "$work/t.json" "$status" <<'PY' || fail "the 1-thread row"
import json, sys
row = json.load(open(sys.argv[1]))["rows"][0]
status = int(sys.argv[2])
assert row["threads"] == 1, row
assert row["cpus"].isdigit(), f"1 thread may run on CPUs {row['cpus']}"
assert row["cores_busy"] <= 1.05, f"1 thread kept {row['cores_busy']:.2f} cores busy"
why = row["premise_failed"]
assert why is None or "other work kept" in why or "waited for a CPU" in why, why
assert status == (0 if why is None else 1), f"exit status {status} with verdict {why}"
print("ok: 1 thread on CPU", row["cpus"], f"{row['cores_busy']:.2f} cores busy, verdict {why}")
PY

ncpus=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
status=0
"$bench" train --threads $((ncpus + 1)) --steps 1 >"$work/out" 2>"$work/err" || status=$?
[ "$status" = 1 ] || fail "--threads $((ncpus + 1)) on $ncpus CPUs: exit status $status, not 1"
grep -q "needs $((ncpus + 1)) CPUs of its own, but this process may run on $ncpus" "$work/err" ||
  fail "--threads $((ncpus + 1)) on $ncpus CPUs: $(cat "$work/err")"
[ ! -s "$work/out" ] || fail "--threads $((ncpus + 1)) printed a table before refusing"
echo "ok: --threads $((ncpus + 1)) on $ncpus CPUs refused before running"
