#!/usr/bin/env bash
# The elastic demo (the README's main job, run by quickstart.sh): etr-run trains the
# example GPT-2 (configs/demo.pbtxt) on 2 ranks of this machine. Mid-run one worker is
# killed (kill -9) and its slot disappears from host discovery, so the job goes on with
# 1 rank from its newest checkpoint; later the slot comes back and the job grows to 2
# ranks again. At the end it prints the recoveries and the final loss.
#
#   scripts/elastic_demo.sh BUILD_DIR [etr-train arguments]
#
# Host discovery is a script printing the lines of a file (SLOTS below), which this demo
# rewrites: the way a cluster's own discovery script would report nodes leaving and joining.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=$1
shift
demo="$build/elastic-demo"
rm -rf "$demo"
mkdir -p "$demo"
slots="$demo/slots"
echo "localhost:2" >"$slots"
printf '#!/bin/sh\ncat %s\n' "$slots" >"$demo/discover.sh"
chmod +x "$demo/discover.sh"

say() { printf '\n>>> elastic demo: %s\n\n' "$*" >&2; }
"$build/runtime/launcher/etr-run" --min-np 1 --max-np 2 --host-discovery-script "$demo/discover.sh" \
  --checkpoint-dir "$demo/checkpoints" --run-dir "$demo/run" -- \
  "$build/examples/train/etr-train" --config "$root/configs/demo.pbtxt" \
  --set checkpoint.every=10 --set "log.metrics_file=$build/demo_metrics.jsonl" "$@" \
  2>&1 | tee "$demo/output.txt" &
tee_pid=$!
etr_run_pid() { pgrep -f -n "etr-run .*--run-dir $demo/run" || true; }
trap 'p=$(etr_run_pid); [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; wait' INT TERM

progress() { { tr -d ' \n' <"$demo/run/progress"; } 2>/dev/null || echo 0; }
# wait_step N: until the job has completed step N; false when it ended first.
wait_step() {
  while [ "$(progress)" -lt "$1" ]; do
    [ -n "$(etr_run_pid)" ] || return 1
    sleep 0.1
  done
}
# rank_pid: one etr-train worker (a child of etr-run's mpirun).
rank_pid() {
  local mpirun
  mpirun=$(pgrep -P "$(etr_run_pid)" | head -1)
  pgrep -P "$mpirun" | tail -1
}

if wait_step 50; then
  victim=$(rank_pid)
  say "step $(progress): killing worker pid $victim (kill -9); its slot leaves host discovery"
  kill -KILL "$victim"
  echo "localhost:1" >"$slots"
  resumed_at=$(progress)
  if wait_step $((resumed_at + 30)); then
    say "step $(progress): the slot is back in host discovery (localhost:2)"
    echo "localhost:2" >"$slots"
  fi
fi
wait "$tee_pid"
out="$demo/output.txt"
say "summary"
grep -E "etr-run: (launch|the job|recovered|host)|elastic: relaunch" "$out" | sed 's/^/  /' >&2
final=$(grep -o "done: .*" "$out" | tail -1)
echo "  final: ${final:-the job did not complete}" >&2
grep -q "etr-run: the job completed" "$out"
