#!/usr/bin/env bash
# The main job (the README's, run by quickstart.sh): the whole mission in one run.
# etr-run trains the example GPT-2 (configs/demo.pbtxt: ZeRO stage 2, an automatic
# micro-batch) on 2 ranks of this machine, inside a memory cgroup of its own:
#   step 40   the job's memory is cut (the cgroup's soft limit drops to 3/4 of what the
#             job holds): each rank notices at its next step boundary and re-plans a
#             smaller micro-batch, the global batch unchanged, no step lost;
#   step 80   one worker is killed (kill -9) and its slot leaves host discovery: the job
#             goes on with 1 rank from its newest checkpoint, the micro-batch re-derived;
#   +30 steps the slot comes back: the job grows to 2 ranks again.
# At the end it prints each event, the loss at each, and the final loss.
#
#   scripts/elastic_demo.sh BUILD_DIR [etr-train arguments]
#
# Host discovery is a script printing the lines of a file (SLOTS below), which this demo
# rewrites: the way a cluster's own discovery script would report nodes leaving and joining.
# The memory cut needs root and a writable memory cgroup (v1 or v2); without one the demo
# says so and runs the rest.
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
say() { printf '\n>>> demo: %s\n\n' "$*" >&2; }

# A memory cgroup for the job, under this shell's own (v2: memory.high; v1:
# memory.soft_limit_in_bytes: a limit the job is asked to stay under, which etr reads as
# its budget and the kernel does not enforce with its OOM killer).
cgroup="" soft=""
make_cgroup() {
  local line dir
  if line=$(grep -m1 '^0::' /proc/self/cgroup) && [ -f "/sys/fs/cgroup${line#0::}/memory.max" ]; then
    dir="/sys/fs/cgroup${line#0::}/etr-demo-$$" soft=memory.high
  elif line=$(grep -m1 ':memory:' /proc/self/cgroup) && [ -d /sys/fs/cgroup/memory ]; then
    dir="/sys/fs/cgroup/memory${line##*:memory:}/etr-demo-$$" soft=memory.soft_limit_in_bytes
  else
    return 1
  fi
  mkdir "$dir" 2>/dev/null || return 1
  cgroup=$dir
}
leave_cgroup() {
  [ -n "$cgroup" ] || return 0
  # (this shell never joined it: the job's processes are gone once etr-run has ended)
  rmdir "$cgroup" 2>/dev/null || true
}
trap leave_cgroup EXIT
make_cgroup || say "no writable memory cgroup here (not root, or a read-only /sys/fs/cgroup): the memory cut is skipped"

(
  [ -n "$cgroup" ] && echo "$BASHPID" >"$cgroup/cgroup.procs"
  exec "$build/launcher/etr-run" --min-np 1 --max-np 2 \
    --host-discovery-script "$demo/discover.sh" --checkpoint-dir "$demo/checkpoints" --run-dir "$demo/run" -- \
    "$build/examples/train/etr-train" --config "$root/configs/demo.pbtxt" \
    --set checkpoint.every=10 --set "log.metrics_file=$build/demo_metrics.jsonl" "$@"
) 2>&1 | tee "$demo/output.txt" &
tee_pid=$!
etr_run_pid() { pgrep -f -n "etr-run .*--run-dir $demo/run" || true; }
trap 'p=$(etr_run_pid); [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; wait; leave_cgroup' INT TERM

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
# The resident memory of the job's workers, in bytes.
workers_rss() {
  local kib=0 p
  for p in $(pgrep -f "$build/examples/train/etr-train"); do
    kib=$((kib + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  echo $((kib * 1024))
}

for _ in $(seq 100); do [ -n "$(etr_run_pid)" ] && break; sleep 0.1; done  # etr-run started
if wait_step 40 && [ -n "$cgroup" ]; then
  rss=$(workers_rss)
  cut=$((rss * 3 / 4))
  say "step $(progress): the job's memory is cut: $soft of its cgroup from unlimited to $((cut >> 20)) MiB (3/4 of the $((rss >> 20)) MiB its workers hold)"
  echo "$cut" >"$cgroup/$soft"
fi
if wait_step 80; then
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
grep -E "etr-run: (launch|the job|recovered|host)|elastic: relaunch|memory budget .* -> |changed; micro-batch|memory plan:|out of memory inside" "$out" |
  sed -e 's/^/  /' -e 's/(parameters .*) of the budget/of the budget/' >&2
final=$(grep -o "done: .*" "$out" | tail -1)
echo "  final: ${final:-the job did not complete}" >&2
grep -q "etr-run: the job completed" "$out"
