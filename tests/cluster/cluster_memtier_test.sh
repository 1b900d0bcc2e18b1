#!/usr/bin/env bash
# The checkpoint memory tier across simulated hosts (issue 35, item 3; sim_cluster.sh: 3
# hosts of 1 slot, each with its own /dev/shm; etr-run on host 1 with --max-np 2 and a
# discovery that lists all 3, so the job runs on hosts 1 and 2; etr-train tiny, the memory
# tier every step in its default directory /dev/shm/etr-mem-..., durable checkpoints
# every 50 steps):
#  reference: an uninterrupted 2-rank run (on this machine);
#  a. host 2 lost: its processes killed, its link cut and its memory wiped; etr-run
#     excludes it (its launch daemon's end names it). The relaunch on hosts 1 and 3
#     restores from the memory tier: host 2's shard from the buddy copy host 1 keeps (the
#     `restored` event says tier=memory-buddy); host 3, which had nothing, receives the
#     byte ranges its rank reads from host 1 (the log says how much moved between hosts);
#     at most 1 step lost; the final parameters equal the reference's bitwise (2 ranks
#     again: the same sums).
# Skipped (exit 77, with the reason) where network namespaces cannot be made.
# Usage: cluster_memtier_test.sh BUILD_DIR CONFIG CKPT_COMPARE
pid=
on_exit() { if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null; fi; }
source "$(dirname "$0")/test_setup.sh" etrm "$@"
"$sim" up 3 1 2gbit || fail "the simulated cluster did not come up"
steps=120
job=("$build/examples/train/etr-train" --config "$config" --set schedule.max_steps=$steps
     --set log.log_every=40 --set log.eval_every=0 --set runtime.threads=1 --set checkpoint.every=50
     --set log.sample_tokens=0)
ckpt() { printf '%s/step-%09d' "$1" "$2"; }
show() { cat "$work/a.out" "$work/a.run/events" 2>/dev/null; }
list() { printf '198.18.0.%s:1\n' "$@" >"$work/slots.new"; mv "$work/slots.new" "$work/slots"; }
progress() { local p; p=$({ tr -d ' \n' <"$work/a.run/progress"; } 2>/dev/null); echo "${p:--1}"; }

echo "== reference: an uninterrupted 2-rank run"
"$build/etr-mpirun" -np 2 --bind-to none "${job[@]}" --set checkpoint.dir="$work/ref.ck" >"$work/ref.out" 2>&1 ||
  { cat "$work/ref.out"; fail "reference run failed"; }

echo "== a. host 2 lost with its memory; the relaunch on hosts 1 and 3 restores from host 1's buddy copy"
list 1 2 3
printf '#!/bin/sh\ncat %s\n' "$work/slots" >"$work/discover.sh"
chmod +x "$work/discover.sh"
"$sim" exec 1 "$build/launcher/etr-run" --min-np 1 --max-np 2 --launch-agent "$sim rsh" \
  --host-discovery-script "$work/discover.sh" --discovery-interval 0.2 --run-dir "$work/a.run" \
  --checkpoint-dir "$work/a.ck" --mpi-arg=--bind-to --mpi-arg=none -- "${job[@]}" \
  --set checkpoint.memory_every=1 >"$work/a.out" 2>&1 &
pid=$!
i=0
while [ "$(progress)" -lt 30 ]; do
  kill -0 "$pid" 2>/dev/null || { show; fail "a: etr-run ended before step 30"; }
  sleep 0.05
  i=$((i + 1))
  [ "$i" -lt 2400 ] || { show; fail "a: no step 30 within 120 s"; }
done
"$sim" kill 2
"$sim" cut 2
"$sim" wipe 2
i=0
while kill -0 "$pid" 2>/dev/null; do
  sleep 0.1
  i=$((i + 1))
  [ "$i" -lt 2400 ] || { show; fail "a: etr-run still running after 240 s"; }
done
wait "$pid"
status=$?
pid=
[ "$status" -eq 0 ] || { show; fail "a: etr-run exited $status"; }
grep -q "launch 2: 2 rank(s) on 198.18.0.1:1,198.18.0.3:1" "$work/a.out" || { show; fail "a: not relaunched on hosts 1 and 3"; }
grep "restored" "$work/a.run/events"
grep -q "restored step=[0-9]* world=2 tier=memory-buddy" "$work/a.run/events" ||
  { show; fail "a: the relaunch did not restore from the buddy's memory copy"; }
moved=$(grep -o "tier; [0-9.]* [KMG]\?i\?B moved between hosts" "$work/a.out" | head -1)
echo "a: the restore: $moved"
[ -n "$moved" ] && ! echo "$moved" | grep -q "; 0 B moved" || { show; fail "a: host 3's rank received nothing from host 1"; }
line=$(grep -o "the last launch completed step [0-9]*: [0-9]* steps\? lost" "$work/a.out")
echo "a: $line"
lost=$(echo "$line" | sed 's/.*: \([0-9]*\) steps\? lost/\1/')
[ -n "$lost" ] && [ "$lost" -le 1 ] || { show; fail "a: '$lost' steps lost (at most 1 with the memory tier)"; }
"$compare" "$(ckpt "$work/ref.ck" $steps)" "$(ckpt "$work/a.ck" $steps)" 0 ||
  fail "a: the final parameters differ from the uninterrupted run's"
echo "PASS"
