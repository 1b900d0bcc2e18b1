#!/usr/bin/env bash
# What a cluster does to a job under etr-run (tests/cluster/sim_cluster.sh: 3 hosts of 1
# slot, 2 Gbit/s links; etr-run runs on host 1, its discovery script prints the hosts a
# scheduler would list; etr-train tiny, checkpoints every 5 steps):
#  reference: an uninterrupted 3-rank run;
#  a. host 3 lost (every process on it killed, its link down, discovery drops it): the job
#     continues on hosts 1-2 from its newest checkpoint, host 3 excluded at once (its
#     launch daemon's end names it); host 3 back (link up, listed again): the job grows
#     onto it at a step boundary; final parameters equal the reference's within 1e-3 (the
#     global batch and data are the same; 2 ranks sum in another order than 3, as in
#     tests/e2e/elastic_test.sh b);
#  b. host 3's link cut while its rank lives on (a partition), etr-run's defaults: host 3's
#     heartbeats fall silent while the other ranks wait on it, etr-run declares the host
#     unreachable after the stalled job's timeout (half of --heartbeat-timeout auto: 1.5 s
#     until learned), ends the launch and relaunches without it; the next
#     launch's first step comes within 15 s of the cut; the job completes on 2 hosts;
#     final parameters within 1e-3 of the reference's;
#  b2. the same with the heartbeats off: the collectives' timeout (ETR_COMM_TIMEOUT_S=3)
#     ends the job with a message naming the peer it waited on, etr-run ends the mpirun
#     that cannot reach host 3, finds it unreachable and relaunches without it;
#  c. host 3's rank frozen (SIGSTOP): its heartbeats fall silent as in b (declared at the
#     stalled job's timeout), but the host
#     still answers the launch agent: the rank is blamed, the host kept, the next launch
#     runs on all 3 hosts within 10 s of the stop; final parameters equal the reference's
#     (the same world size);
#  d. host 3 cut off for a few seconds while discovery keeps listing it (a partition shorter
#     than the scheduler's notice): excluded as unreachable, asked again in the background
#     every 5 s, admitted once it answers, and the job grows back onto it; final
#     parameters within 1e-3 of the reference's (rank 0 slowed, ETR_SLOW_RANK, so that the
#     job outlasts the partition).
# Skipped (exit 77, with the reason) where network namespaces cannot be made.
# Usage: cluster_elastic_test.sh BUILD_DIR CONFIG CKPT_COMPARE
pid=
on_exit() { if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null; fi; }
source "$(dirname "$0")/test_setup.sh" etre "$@"
expect() { grep -q "$2" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: $3"; }; }
expect_e() { grep -E "$2" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: $3"; }; }
"$sim" up 3 1 2gbit || fail "the simulated cluster did not come up"
steps=300
job=("$build/examples/train/etr-train" --config "$config" --set schedule.max_steps=$steps
     --set log.log_every=40 --set log.eval_every=0 --set runtime.threads=1 --set checkpoint.every=5
     --set log.sample_tokens=0)
ckpt() { printf '%s/step-%09d' "$1" "$2"; }
h() { printf '198.18.0.%s:1\n' "$@"; }  # h 1 2 3: the discovery lines of those hosts
# list NAME HOSTS...: the discovery script of NAME prints HOSTS from now on (replaced whole).
list() { local name=$1; shift; h "$@" >"$work/$name.slots.new"; mv "$work/$name.slots.new" "$work/$name.slots"; }
# start NAME HOSTS...: etr-run on host 1 in the background (its pid in $pid), discovery
# from $work/NAME.slots (HOSTS at first).
extra=()  # more etr-run arguments for the next start
start() {
  local name=$1
  shift
  list "$name" "$@"
  printf '#!/bin/sh\ncat %s\n' "$work/$name.slots" >"$work/$name.sh"
  chmod +x "$work/$name.sh"
  "$sim" exec 1 "$build/launcher/etr-run" --min-np 1 --max-np 3 --launch-agent "$sim rsh" \
    --host-discovery-script "$work/$name.sh" --discovery-interval 0.2 --run-dir "$work/$name.run" \
    --checkpoint-dir "$work/$name.ck" --mpi-arg=--bind-to --mpi-arg=none "${extra[@]}" -- "${job[@]}" \
    >"$work/$name.out" 2>&1 &
  pid=$!
}
progress() { local p; p=$({ tr -d ' \n' <"$work/$1.run/progress"; } 2>/dev/null); echo "${p:--1}"; }
wait_step() {  # NAME STEP [SECONDS]
  local i=0
  while [ "$(progress "$1")" -lt "$2" ]; do
    kill -0 "$pid" 2>/dev/null || { cat "$work/$1.out"; fail "$1: etr-run ended before step $2"; }
    sleep 0.05
    i=$((i + 1))
    [ "$i" -lt $((${3:-120} * 20)) ] || { cat "$work/$1.out"; fail "$1: no step $2 within ${3:-120} s"; }
  done
}
finish() {  # NAME: etr-run ends within 240 s, exit 0, with the final checkpoint
  local i=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
    [ "$i" -lt 2400 ] || { cat "$work/$1.out"; fail "$1: etr-run still running after 240 s"; }
  done
  wait "$pid"
  local status=$?
  pid=
  [ "$status" -eq 0 ] || { cat "$work/$1.out"; fail "$1: etr-run exited $status"; }
  [ -f "$(ckpt "$work/$1.ck" $steps)/manifest.pb" ] || { cat "$work/$1.out"; fail "$1: no checkpoint of step $steps"; }
}
same_params() {
  "$compare" "$(ckpt "$work/ref.ck" $steps)" "$(ckpt "$work/$1.ck" $steps)" "$2" ||
    fail "$1: the final parameters differ from the uninterrupted run's"
}

echo "== reference: an uninterrupted 3-rank run"
"$build/etr-mpirun" -np 3 --bind-to none "${job[@]}" --set checkpoint.dir="$work/ref.ck" >"$work/ref.out" 2>&1 ||
  { cat "$work/ref.out"; fail "reference run failed"; }

echo "== a. host 3 lost, then back"
start a 1 2 3
wait_step a 30
"$sim" kill 3
"$sim" cut 3
list a 1 2  # the scheduler drops the host
wait_step a 70
[ "$(progress a)" -lt $steps ] || fail "a: the job finished before host 3 came back"
"$sim" heal 3
list a 1 2 3
finish a
expect a "host 198.18.0.3 was lost (its MPI daemon ended abnormally): excluded" "the lost host was not named and excluded"
expect a "launch 2: 2 rank(s) on 198.18.0.1:1,198.18.0.2:1 (after a failure, relaunch 1)" "not relaunched on the 2 other hosts"
expect a "launch 3: 3 rank(s) on 198.18.0.1:1,198.18.0.2:1,198.18.0.3:1 (after a resize, relaunch 2)" "did not grow back onto host 3"
grep "etr-run: recovered\|elastic: relaunch" "$work/a.out"
same_params a 1e-3

echo "== b. host 3 cut off while its rank lives on (a partition): its silent heartbeats"
start b 1 2 3
wait_step b 30
cut_ms=$(date +%s%3N)
"$sim" cut 3
finish b
expect_e b "none of the 1 rank\(s\) on 198\.18\.0\.3 sent a heartbeat for [0-9.]+ s while every other rank waited on its peers \(--heartbeat-timeout auto: [0-9.]+ s; [0-9.]+ s for a stalled job\)" "the silent host was not found at the stalled job's timeout"
expect b "host 198.18.0.3 is unreachable: none of its ranks sent a heartbeat" "the silent host was not blamed"
expect b "launch 2: 2 rank(s) on 198.18.0.1:1,198.18.0.2:1 (after a failure, relaunch 1)" "not relaunched without host 3"
grep -q "launch 3" "$work/b.out" && { cat "$work/b.out"; fail "b: launched onto the unreachable host again"; }
first_ms=$(awk '$2 == "first-step" {t = $1} END {print t}' "$work/b.run/events")
took=$((first_ms - cut_ms))
echo "b: link cut -> the next launch's first step in $took ms (bar: 15 s)"
[ "$took" -lt 15000 ] || { cat "$work/b.out"; fail "b: $took ms from the cut to the next launch's first step"; }
same_params b 1e-3
# etr-run killed the first launch's mpirun 200 ms after asking it to end: the ranks on the
# hosts it reaches must be gone with it (only the cut host's rank may still wait).
left=0
for p in $(pgrep -f etr-train); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "ETR_RUN_DIR=$work/b.run" &&
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "ETR_RUN_RESTART=0" && left=$((left + 1))
done
# Exactly 1: the cut host's rank, which waits in its collective (found, so the check sees ranks).
[ "$left" -eq 1 ] || fail "b: $left ranks of the ended launch still run (the cut host's 1 expected)"
"$sim" kill 3  # the partitioned rank still waits in its collective
"$sim" heal 3

echo "== b2. the same with the heartbeats off: the collectives' timeout"
export ETR_COMM_TIMEOUT_S=3
extra=(--heartbeat-timeout 0)
start b2 1 2 3
wait_step b2 30
"$sim" cut 3
finish b2
unset ETR_COMM_TIMEOUT_S
# (in the gradient allreduce, naming the peer; or, when the cut lands there, in a
# checkpoint agreement, which cannot tell whom it waits on)
expect b2 "did not finish within 3 s (.* elapsed, waiting on rank [0-9] (world rank [0-9]))\|checkpoint agreement .* did not complete within the communicator timeout of 3 s" "no timeout reported"
expect b2 "host 198.18.0.3 is unreachable: the launch agent cannot reach it" "the unreachable host was not named"
expect b2 "launch 2: 2 rank(s) on 198.18.0.1:1,198.18.0.2:1 (after a failure, relaunch 1)" "not relaunched without host 3"
grep -q "launch 3" "$work/b2.out" && { cat "$work/b2.out"; fail "b2: launched onto the unreachable host again"; }
same_params b2 1e-3
"$sim" kill 3
"$sim" heal 3

echo "== c. host 3's rank frozen (SIGSTOP): the host still answers"
extra=()
export ETR_SLOW_RANK=0:10  # ~60 ms a step: the run outlasts the stop (CI once saw it end first)
start c 1 2 3
wait_step c 30
stop_ms=$(date +%s%3N)
stopped=0
for p in $("$sim" pids 3); do
  # (by its executable, whatever its process name)
  if [ "$(basename "$(readlink "/proc/$p/exe" 2>/dev/null)")" = etr-train ]; then
    kill -STOP "$p" && stopped=$((stopped + 1))
  fi
done
[ "$stopped" -gt 0 ] || { cat "$work/c.out"; fail "c: no etr-train on host 3 to stop (progress $(progress c))"; }
finish c
unset ETR_SLOW_RANK
expect c "host 198.18.0.3 still answers the launch agent: its rank froze, the host is kept" "the frozen rank's host was not probed"
expect_e c "rank 2 on 198\.18\.0\.3 sent no heartbeat for [0-9.]+ s while every other rank waited on its peers \(--heartbeat-timeout auto: [0-9.]+ s; [0-9.]+ s for a stalled job\), but its host answers" "the frozen rank was not blamed"
expect c "launch 2: 3 rank(s) on 198.18.0.1:1,198.18.0.2:1,198.18.0.3:1 (after a failure, relaunch 1)" "not relaunched on all 3 hosts"
first_ms=$(awk '$2 == "first-step" {t = $1} END {print t}' "$work/c.run/events")
took=$((first_ms - stop_ms))
echo "c: SIGSTOP on host 3 -> the next launch's first step (3 hosts) in $took ms (bar: 10 s)"
[ "$took" -lt 10000 ] || { cat "$work/c.out"; fail "c: $took ms from the stop to the next launch's first step"; }
same_params c 0

echo "== d. host 3 cut off for a few seconds, listed throughout: readmitted, grown back"
export ETR_SLOW_RANK=0:30
start d 1 2 3
wait_step d 30
"$sim" cut 3
i=0
until grep -q "launch 2: 2 rank(s) on 198.18.0.1:1,198.18.0.2:1" "$work/d.out"; do
  sleep 0.1
  i=$((i + 1))
  [ "$i" -lt 600 ] || { cat "$work/d.out"; fail "d: not relaunched without host 3 within 60 s"; }
done
sleep 2
"$sim" heal 3
finish d
unset ETR_SLOW_RANK
expect d "host 198.18.0.3 answers the launch agent again: no longer excluded" "the healed host was not readmitted"
expect d "launch 3: 3 rank(s) on 198.18.0.1:1,198.18.0.2:1,198.18.0.3:1 (after a resize" "did not grow back onto host 3"
same_params d 1e-3
echo "PASS"
