#!/usr/bin/env bash
# A stopped rank at each control collective (runtime/control_ops.h): rank 1 stops itself
# (SIGSTOP, ETR_TEST_STOP_AT=WORD:1; rank 0, the root, for a broadcast, which the root
# alone can finish) on entering the site, and the job must end with a
# non-zero status and the other rank's sentence naming that site within the collective
# timeout (ETR_COMM_TIMEOUT_S=2) plus a margin for start-up, never hang.
# Usage: control_timeout_test.sh ETR_MPIRUN ETR_TRAIN TINY_CONFIG
set -u
mpirun=$1 train=$2 tiny=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
timeout_s=2
limit_s=25  # the timeout, start-up at np 2 on a shared machine, the teardown
failures=0
n=0
# stops_at WORD "SITE SENTENCE" [etr-train arguments...] (STOP_RANK: the rank, 1)
stops_at() {
  local word=$1 site=$2
  shift 2
  n=$((n + 1))
  local err=$work/$n.err start end status
  start=$(date +%s.%N)
  ETR_COMM_TIMEOUT_S=$timeout_s ETR_TEST_STOP_AT="$word:${STOP_RANK:-1}" timeout 120 \
    "$mpirun" -np 2 "$train" --config "$tiny" --set schedule.max_steps=4 --set schedule.warmup_steps=0 \
    --set checkpoint.dir="$work/ckpt$n" "$@" </dev/null >"$work/$n.out" 2>"$err"
  status=$?
  end=$(date +%s.%N)
  local took why=""
  took=$(python3 -c "print(round($end - $start, 1))")
  if [ "$status" -eq 0 ] || [ "$status" -eq 124 ]; then
    why="exit status $status"
  elif ! grep -q "$site did not complete within the communicator timeout of $timeout_s s" "$err"; then
    why="no sentence naming '$site'"
  elif python3 -c "import sys; sys.exit(0 if $took <= $limit_s else 1)"; then
    :
  else
    why="took $took s, more than $limit_s s"
  fi
  if [ -n "$why" ]; then
    echo "FAIL $n: stopped at '$site': $why"
    sed 's/^/    /' "$err" | tail -8
    failures=$((failures + 1))
  else
    echo "ok $n: stopped at '$site' -> ended in $took s"
  fi
}

stops_at "GPUs every rank" "the GPUs every rank sees (session_device)"
stops_at "micro-batch agreement" "the micro-batch agreement (batch_controller)"
stops_at "batch limits" "the ranks' batch limits (batch_controller)"
stops_at "ZeRO gradient mode" "the ZeRO gradient mode agreement (session_memory)" \
  --set parallel.zero_stage=2
STOP_RANK=0 stops_at "layer costs" "the pipeline's layer costs (train_session)" --set parallel.pp=2
stops_at "activation bytes" "the stages' activation bytes (train_session)" --set parallel.pp=2
stops_at "throughput for the shares" "the ranks' throughput for the shares (batch_goodput)" \
  --set batch.shares=throughput
stops_at "memory plan" "the memory plan's printing (program)" --plan
stops_at "ranks' machines" "the ranks' machines (cpu_affinity)"
stops_at "trace's start" "the trace's start (train_session)" --trace "$work/start.json"
stops_at "trace's merge" "the trace's merge (trace)" --trace "$work/merge.json"

[ "$failures" -eq 0 ] || { echo "$failures of $n sites failed"; exit 1; }
echo "all $n sites ended within ${limit_s} s"
