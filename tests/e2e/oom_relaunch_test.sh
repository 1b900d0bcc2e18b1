#!/usr/bin/env bash
# etr-run and the kernel's out-of-memory killer (launcher/oom_watch.h), in a real
# memory cgroup made for the test (v1 or v2, whichever holds this process's memory; needs
# root) with a limit of 256 MiB. The job is a stand-in Python script on 2 ranks under
# mpirun: rank 1 holds micro_batch x 40 MiB, the micro-batch 8 halved
# ETR_RUN_MEMORY_HALVINGS times (320 MiB does not fit, 160 MiB does); rank 0 writes the
# job's "ready micro_batch=B" event to the run directory.
#  a. the OOM killer ends rank 1: etr-run says so in one line, records an oom-kill event,
#     relaunches once with ETR_RUN_MEMORY_HALVINGS=1, and the job completes: exit 0;
#  b. a job already at micro-batch 1 that does not fit: no relaunch, a sentence, exit 137;
#  c. a job that never fits and does not report its micro-batch: relaunched with 1..6
#     halvings, then etr-run stops with a sentence;
#  d. kill -9 of rank 1 (no OOM): an ordinary failure, relaunched without a halving.
# When no memory cgroup can be made here the test prints "SKIP: <reason>" and exits 77.
# Usage: oom_relaunch_test.sh ETR_RUN
set -u
etr_run=$1
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "making a memory cgroup needs root"
python=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$python" ] ||
  skip "no python3 for the stand-in job"
work=$(mktemp -d)
cg=""
cleanup() {
  if [ -n "$cg" ] && [ -d "$cg" ]; then
    local i procs
    for i in $(seq 50); do  # whatever is left in the cgroup (nothing, normally)
      procs=$(cat "$cg/cgroup.procs" 2>/dev/null)
      [ -z "$procs" ] && break
      kill -KILL $procs 2>/dev/null
      sleep 0.1
    done
    rmdir "$cg" || echo "warning: cannot remove the cgroup $cg"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# The mount point of a cgroup hierarchy mounted from its root: FSTYPE [SUPER-OPTION].
mount_of() {
  awk -v t="$1" -v o="${2:-}" '{
    for (i = 7; i <= NF && $i != "-"; i++) {}
    if ($(i + 1) == t && $4 == "/" && (o == "" || index("," $(i + 3) ",", "," o ","))) { print $5; exit }
  }' /proc/self/mountinfo
}
# This process's cgroup path in the hierarchy whose controllers match the regex $1.
path_of() { awk -F: -v c="$1" '$2 ~ c { p = $0; sub(/^[^:]*:[^:]*:/, "", p); print p; exit }' /proc/self/cgroup; }

cg_name=etr-oom-test-$$
limit=$((256 << 20))
v2_mount=$(mount_of cgroup2) v2_path=$(path_of '^$')
v1_mount=$(mount_of cgroup memory) v1_path=$(path_of '(^|,)memory(,|$)')
v2_memory=false  # v2 holds this process's memory: memory.max in its directory (or the root's
if [ -n "$v2_mount" ] && [ -n "$v2_path" ]; then  # children have the memory controller)
  if [ -f "$v2_mount${v2_path%/}/memory.max" ] ||
     { [ "$v2_path" = / ] && grep -qw memory "$v2_mount/cgroup.subtree_control" 2>/dev/null; }; then
    v2_memory=true
  fi
fi
if $v2_memory; then
  version=2
  parent=$v2_mount${v2_path%/}
  mkdir "$parent/$cg_name" 2>"$work/mkdir.err" || skip "cannot make a cgroup in $parent: $(cat "$work/mkdir.err")"
  cg=$parent/$cg_name
  [ -f "$cg/memory.max" ] || skip "the memory controller is not enabled for the children of $parent"
  echo "$limit" >"$cg/memory.max" || skip "cannot write $cg/memory.max"
  [ -f "$cg/memory.swap.max" ] && echo 0 >"$cg/memory.swap.max"
elif [ -n "$v1_mount" ] && [ -n "$v1_path" ]; then
  version=1
  parent=$v1_mount${v1_path%/}
  mkdir "$parent/$cg_name" 2>"$work/mkdir.err" || skip "cannot make a cgroup in $parent: $(cat "$work/mkdir.err")"
  cg=$parent/$cg_name
  echo "$limit" >"$cg/memory.limit_in_bytes" 2>/dev/null || skip "cannot write $cg/memory.limit_in_bytes"
  [ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$limit" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null
else
  skip "this process has no memory cgroup (no cgroup2 memory.max, no v1 memory hierarchy)"
fi
echo "memory cgroup v$version: $cg, limit $((limit >> 20)) MiB"

cat >"$work/job.py" <<EOF
#!$python
# The stand-in job: job.py MODE, MODE halve | minimum | always | kill9.
import os, signal, sys, time
mode = sys.argv[1]
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
halvings = int(os.environ.get("ETR_RUN_MEMORY_HALVINGS") or 0)
micro_batch = 1 if mode == "minimum" else max(1, 8 >> halvings)
sys.stderr.write("job: rank %d ETR_RUN_MEMORY_HALVINGS=%s micro_batch=%d\n"
                 % (rank, os.environ.get("ETR_RUN_MEMORY_HALVINGS", "unset"), micro_batch))
if rank == 0:
    if mode != "always":
        with open(os.path.join(os.environ["ETR_RUN_DIR"], "events"), "a") as f:
            f.write("%d ready step=0 micro_batch=%d\n" % (time.time() * 1000, micro_batch))
    time.sleep(1)
    sys.exit(0)
# Rank 0's event first: etr-run must know the micro-batch (and that the job got ready)
# before rank 1 dies.
events = os.path.join(os.environ["ETR_RUN_DIR"], "events")
for _ in range(200):
    if mode == "always" or "ready" in open(events).read():
        break
    time.sleep(0.05)
if mode == "kill9" and os.environ.get("ETR_RUN_RESTART") == "0":
    os.kill(os.getpid(), signal.SIGKILL)
mib = {"halve": 40 * micro_batch, "minimum": 512, "always": 512, "kill9": 8}[mode]
data = bytearray(mib << 20)
data[::4096] = b"\x01" * len(range(0, len(data), 4096))  # every page touched
time.sleep(0.3)
EOF
chmod +x "$work/job.py"

# run NAME MODE: etr-run on 2 local ranks inside the cgroup; output in NAME.out, exit
# status in $status.
run() {
  local name=$1 mode=$2
  (
    echo "$BASHPID" >"$cg/cgroup.procs" || exit 99
    grep -q "$cg_name" /proc/self/cgroup || exit 98
    exec timeout 100 "$etr_run" --hosts localhost:2 --run-dir "$work/$1.run" --max-restarts 2 \
      -- "$work/job.py" "$mode"
  ) </dev/null >"$work/$name.out" 2>&1
  status=$?
  [ "$status" -ne 99 ] && [ "$status" -ne 98 ] || skip "cannot move a process into $cg"
}
expect() { grep -Eq "$2" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: $3"; }; }
expect_not() { grep -Eq "$2" "$work/$1.out" && { cat "$work/$1.out"; fail "$1: $3"; }; true; }
count() { grep -Ec "$2" "$work/$1.out"; }
oom_line="^etr-run: rank 1 was killed by the kernel's out-of-memory killer \(the memory cgroup counted [0-9]+ oom_kills?\)"

echo "== a. killed by the OOM killer, relaunched with the micro-batch halved"
run halve halve
[ "$status" -eq 0 ] || { cat "$work/halve.out"; fail "halve: exit status $status, not 0"; }
expect halve "$oom_line; relaunching with the micro-batch halved \(ETR_RUN_MEMORY_HALVINGS=1\)$" \
  "no OOM line"
[ "$(count halve "out-of-memory killer")" -eq 1 ] || { cat "$work/halve.out"; fail "halve: not one OOM line"; }
expect halve "^etr-run: launch 2: 2 rank\(s\) on localhost:2 \(after a failure, relaunch 1\) with ETR_RUN_MEMORY_HALVINGS=1$" \
  "no second launch with ETR_RUN_MEMORY_HALVINGS=1"
expect halve "^job: rank 1 ETR_RUN_MEMORY_HALVINGS=1 micro_batch=4$" "the job did not see ETR_RUN_MEMORY_HALVINGS=1"
expect_not halve "launch 3" "launched a third time"
expect halve "^etr-run: the job completed after 2 launch\(es\): 0 failure\(s\), 0 resize\(s\), 1 out-of-memory kill\(s\) \(the micro-batch halved 1 time\(s\)\)$" \
  "no summary with the OOM kill"
grep -Eq "^[0-9]+ oom-kill rank=1 kills=[0-9]+ halvings=1 relaunch=1$" "$work/halve.run/events" ||
  { cat "$work/halve.run/events"; fail "halve: no oom-kill event"; }
grep "out-of-memory killer" "$work/halve.out"
echo "ok halve"

echo "== b. already at micro-batch 1"
run minimum minimum
[ "$status" -eq 137 ] || { cat "$work/minimum.out"; fail "minimum: exit status $status, not 137"; }
expect minimum "^etr-run: error: rank 1 was killed by the kernel's out-of-memory killer .* while it ran at micro-batch 1, its smallest; not relaunching: give the job more memory, or run fewer ranks per host$" \
  "no sentence about the minimum"
expect_not minimum "launch 2" "relaunched a job at its minimum"
echo "ok minimum: $(grep "error:" "$work/minimum.out")"

echo "== c. never fits: at most 6 halvings"
run always always
[ "$status" -eq 137 ] || { cat "$work/always.out"; fail "always: exit status $status, not 137"; }
for n in 1 2 3 4 5 6; do
  expect always "relaunching with the micro-batch halved( again)? \(ETR_RUN_MEMORY_HALVINGS=$n\)$" "no relaunch with $n halvings"
done
expect always "^etr-run: error: rank 1 was killed .* after its micro-batch was halved 6 times; not relaunching" \
  "no sentence after 6 halvings"
expect_not always "launch 8" "more than 7 launches"
echo "ok always: $(grep "error:" "$work/always.out")"

echo "== d. kill -9 is not an OOM kill"
run kill9 kill9
[ "$status" -eq 0 ] || { cat "$work/kill9.out"; fail "kill9: exit status $status, not 0"; }
expect_not kill9 "out-of-memory|MEMORY_HALVINGS=1" "kill -9 taken for an OOM kill"
expect kill9 "^etr-run: the job failed \(exit status 137; rank 1 on localhost\)" "no ordinary failure"
expect kill9 "^job: rank 1 ETR_RUN_MEMORY_HALVINGS=0 micro_batch=8$" "the relaunch was not at full micro-batch"
echo "ok kill9"
echo "PASS"
