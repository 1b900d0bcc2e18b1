#!/usr/bin/env bash
# A chaos soak (issue 35): etr-train's demo model under etr-run on 3 simulated hosts of 1
# slot (tests/cluster/sim_cluster.sh; needs root), each host's processes held to 0.6 of a
# CPU (ETR_CHAOS_CPU; a cpu cgroup a host, so that 3 hosts on 2 cores are 3 machines'
# worth of compute and a host lost takes its share with it), for MINUTES with a random
# fault every EVERY seconds, beside as long fault-free (half before, half after: a drift of
# the machine's speed moves both alike):
#   kill9      kill -9 of a random rank
#   sigstop    SIGSTOP of a random rank (found by its silent heartbeat)
#   partition  host 2 or 3 cut off for 20 s (its link down; the scheduler's list drops
#              it meanwhile, as a scheduler that lost contact would), then back
#   host       host 2 or 3 lost (every process on it killed, its memory (/dev/shm: the
#              checkpoint memory tier) wiped, its link down, dropped from the list) and
#              back 20 s later
# and prints a row per fault (class, detection: from the fault to the end of the launch it
# broke; recovery: to the next launch's first step; steps lost; the tier the relaunch
# restored from), the goodput kept (steps done against the fault-free run's in the same
# time, the same global batch, so useful tokens/s alike), and the final weights against
# a replay of the same launches (the same world sizes from the same restored steps, run
# in parts with schedule.stop_at_step on this machine; bitwise when the sums' order is
# the same, which it is for the same world sizes).
#
#   bench/run_chaos.sh BUILD_DIR [--minutes M] [--every S] [--seed N] [--spare K] [--set KEY=VALUE]...
#
# --spare K adds K spare hosts (3 + K hosts, the job still on 3 ranks: etr-run --max-np 3):
# a host lost or cut off is replaced by a spare at once instead of the job shrinking to 2
# ranks until it is back, and a host that comes back is the next spare. Then a kill -9 or a
# SIGSTOP hits a host that runs a rank, a partition or a lost host one of hosts 2-(3+K)
# that runs a rank (host 1 runs etr-run).
#
# Defaults: 10 minutes, a fault every 30 s, seed 1, no spare host, each fault drawn from all four classes
# (ETR_CHAOS_FAULTS="sigstop partition" draws from those only). --set passes settings to etr-train
# (e.g. the checkpoint cadence). ETR_CHAOS_RUN_ARGS adds etr-run flags; etr-run runs with
# --blacklist-cooldown 20 (a host found silent or lost is excluded for 20 s, as long as a
# fault keeps it away) and --blacklist-after 0 (one rank's failures exclude no host). Run nothing else
# on the machine meanwhile: the goodput compares wall-clock throughput.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-}
[ -n "$build" ] && [ -x "$build/launcher/etr-run" ] && [ -x "$build/examples/train/etr-train" ] || {
  echo "usage: $0 BUILD_DIR [--minutes M] [--every S] [--seed N] [--spare K] [--set KEY=VALUE]..." >&2
  exit 2
}
build=$(cd "$build" && pwd)
shift
minutes=10 every=30 seed=1 spare=0 sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --every) every=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --spare) spare=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "run_chaos: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
read -ra classes <<<"${ETR_CHAOS_FAULTS:-kill9 sigstop partition host}"
for c in "${classes[@]}"; do
  case $c in kill9|sigstop|partition|host) ;; *)
    echo "run_chaos: ETR_CHAOS_FAULTS names '$c'; the fault classes are kill9 sigstop partition host" >&2
    exit 2 ;;
  esac
done
[ ${#classes[@]} -gt 0 ] || { echo "run_chaos: ETR_CHAOS_FAULTS names no fault class" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "run_chaos: needs root (network namespaces)" >&2; exit 2; }
export ETR_CLUSTER_NAME=etrchaos
sim=$root/tests/cluster/sim_cluster.sh
# One soak at a time: sim_cluster.sh up (and a soak's cleanup) would take down another
# soak's hosts under it.
if ip netns list 2>/dev/null | grep -q "^$ETR_CLUSTER_NAME-sw\b"; then
  echo "run_chaos: another soak's hosts are up (network namespace $ETR_CLUSTER_NAME-sw); wait for it to end, or remove them with: ETR_CLUSTER_NAME=$ETR_CLUSTER_NAME $sim down" >&2
  exit 1
fi
work=$(mktemp -d /tmp/etr-chaos.XXXXXX)
etr_run_pid=
cleanup() {
  [ -n "$etr_run_pid" ] && kill -KILL "$etr_run_pid" 2>/dev/null
  "$sim" down 2>/dev/null || true
  [ -n "${ETR_CHAOS_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
[[ "$spare" =~ ^[0-9]$ ]] || { echo "run_chaos: --spare takes 0-9 hosts, not '$spare'" >&2; exit 2; }
hosts=$((3 + spare))
ETR_CLUSTER_CPU=${ETR_CHAOS_CPU:-0.6} "$sim" up "$hosts" 1 2gbit >/dev/null
seconds=$((minutes * 60))
job=("$build/examples/train/etr-train" --config "$root/configs/demo.pbtxt"
     --set schedule.max_steps=1000000 --set log.log_every=100 --set log.eval_every=0
     --set log.sample_tokens=0 --set log.metrics_file= --set runtime.threads=1
     --set checkpoint.every=10 "${sets[@]}")
# list NAME HOSTS...: the hosts NAME's discovery script prints from now on.
list() {
  local name=$1 h
  shift
  for h in "$@"; do echo "198.18.0.$h:1"; done >"$work/$name.slots.new"
  mv "$work/$name.slots.new" "$work/$name.slots"
}
start() {  # NAME: etr-run on host 1, every host listed
  local name=$1
  list "$name" $(seq 1 "$hosts")
  printf '#!/bin/sh\ncat %s\n' "$work/$name.slots" >"$work/$name.sh"
  chmod +x "$work/$name.sh"
  # shellcheck disable=SC2086
  "$sim" exec 1 "$build/launcher/etr-run" --min-np 1 --max-np 3 --launch-agent "$sim rsh" \
    --host-discovery-script "$work/$name.sh" --discovery-interval 0.5 --max-restarts 1000 \
    --blacklist-after 0 --blacklist-cooldown 20 --run-dir "$work/$name.run" --checkpoint-dir "$work/$name.ck" \
    --mpi-arg=--bind-to --mpi-arg=none ${ETR_CHAOS_RUN_ARGS:-} -- "${job[@]}" >"$work/$name.out" 2>&1 &
  etr_run_pid=$!
}
progress() { local p; p=$({ tr -d ' \n' <"$work/$1.run/progress"; } 2>/dev/null); echo "${p:-0}"; }
stop() {  # NAME: etr-run stopped (SIGTERM), waited for
  kill -TERM "$etr_run_pid" 2>/dev/null || true
  wait "$etr_run_pid" 2>/dev/null || true
  etr_run_pid=
}
now_ms() { local t=${EPOCHREALTIME//[!0-9]/}; echo $((10#$t / 1000)); }  # (no fork)
# A rank's pid on host I (the newest running etr-train process in its namespace: a rank of
# an ended launch may still be exiting, or stopped by an earlier SIGSTOP until its launch's
# end kills it, and a fault sent to it would break nothing), or nothing. (No pipeline:
# under pipefail a reader that stops early, or a last process that is not etr-train, would
# fail it, and set -e would end the soak.)
rank_on() {
  local p st f best= best_start=-1
  for p in $(ip netns pids "etrchaos-h$1" 2>/dev/null); do
    [ "$(cat "/proc/$p/comm" 2>/dev/null)" = etr-train ] || continue
    st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    read -ra f <<<"${st##*) }"  # f[0]: the state (field 3), f[19]: the start time (field 22)
    case ${f[0]:-X} in T | t | Z | X | x) continue ;; esac
    [ "${f[19]:-0}" -gt "$best_start" ] && { best=$p; best_start=${f[19]}; }
  done
  [ -z "$best" ] || echo "$best"
  return 0
}

# The fault-free reference in two halves, one before the chaos run and one after it, so
# that a machine whose speed drifts (a shared VM) moves both alike. The second half is
# timed from its first step: like the chaos run, the reference pays for one start-up.
half=$((seconds / 2))
echo "== fault-free: ${minutes} min, half before the chaos run and half after it"
start ff
sleep "$half"
ff1=$(progress ff)
stop
echo "fault-free, first half: $ff1 steps in $half s"

echo "== chaos: ${minutes} min, a fault every ${every} s (seed $seed)"
RANDOM=$seed
start chaos
begin_ms=$(now_ms)
: >"$work/faults"
back=()  # back[H]: when host H (2..) comes back, unix ms (0 or unset: it is up)
# up_list: list the hosts up (1 and every host not away) in the chaos run's discovery.
up_list() {
  local u up=(1)
  for ((u = 2; u <= hosts; u++)); do [ "${back[u]:-0}" -gt 0 ] || up+=("$u"); done
  list chaos "${up[@]}"
}
# pick FIRST: a host from FIRST..hosts for a fault, into $target. Without a spare host as
# the soaks before --spare drew it (any of them; a host without a rank or away is then no
# fault); with one, among the hosts that run a rank and are up.
pick() {
  local h cands=()
  if [ "$spare" -eq 0 ]; then target=$(($1 + RANDOM % (hosts - $1 + 1))); return; fi
  for ((h = $1; h <= hosts; h++)); do
    [ "${back[h]:-0}" -eq 0 ] && [ -n "$(rank_on "$h")" ] && cands+=("$h")
  done
  if [ ${#cands[@]} -gt 0 ]; then target=${cands[RANDOM % ${#cands[@]}]}; else target=$1; fi
}
# The loop wakes at each whole second of the run (a fault is due at every EVERY-th) and
# at each host's return, 20 s to the millisecond after its fault (the report's ceiling
# counts the time a host was away from these lines, "<ms> back hN").
tick=1
while [ "$tick" -le "$seconds" ]; do
  wake=$((begin_ms + tick * 1000))
  for ((h = 2; h <= hosts; h++)); do
    [ "${back[h]:-0}" -gt 0 ] && [ "${back[h]}" -lt "$wake" ] && wake=${back[h]}
  done
  pause=$((wake - $(now_ms)))
  [ "$pause" -le 0 ] || sleep "$((pause / 1000)).$(printf %03d $((pause % 1000)))"
  now=$(now_ms)
  for ((h = 2; h <= hosts; h++)); do
    if [ "${back[h]:-0}" -gt 0 ] && [ "$now" -ge "${back[h]}" ]; then
      "$sim" heal "$h"
      back[h]=0
      up_list
      echo "$(now_ms) back h$h" >>"$work/faults"
    fi
  done
  [ "$now" -ge $((begin_ms + tick * 1000)) ] || continue  # woken for a return
  t=$tick
  tick=$((tick + 1))
  [ $((t % every)) -eq $((every - 1)) ] || continue
  [ "$t" -lt $((seconds - 10)) ] || continue
  cls=${classes[RANDOM % ${#classes[@]}]}
  case $cls in
    kill9|sigstop)
      pick 1
      pid=$(rank_on "$target")
      [ -n "$pid" ] || { echo "  (no rank on h$target at $t s: no fault)"; continue; }
      echo "$(now_ms) $cls h$target" >>"$work/faults"
      kill "-$([ "$cls" = kill9 ] && echo KILL || echo STOP)" "$pid" ;;
    *)
      pick 2
      [ "${back[target]:-0}" -eq 0 ] || { echo "  (h$target is already down at $t s: no fault)"; continue; }
      fault_ms=$(now_ms)
      echo "$fault_ms $cls h$target" >>"$work/faults"
      if [ "$cls" = host ]; then "$sim" kill "$target"; "$sim" wipe "$target"; fi
      "$sim" cut "$target"
      back[target]=$((fault_ms + 20000))
      up_list ;;
  esac
  echo "  fault $t s: $cls on h$target"
done
chaos_steps=$(progress chaos)
stop
for ((h = 2; h <= hosts; h++)); do "$sim" heal "$h"; done
echo "chaos: $chaos_steps steps in $seconds s"

echo "== fault-free, second half"
start ff2
waited=0
until grep -q " first-step " "$work/ff2.run/events" 2>/dev/null; do
  sleep 0.05
  waited=$((waited + 1))
  [ "$waited" -lt 2400 ] || { tail -20 "$work/ff2.out"; echo "run_chaos: the second fault-free run did no step in 120 s"; exit 1; }
done
sleep "$((seconds - half))"
ff2=$(($(progress ff2) - 1))
stop
ff_steps=$((ff1 + ff2))
echo "fault-free, second half: $ff2 steps in $((seconds - half)) s after its first step; in all $ff_steps steps in $seconds s"
awk -v a="$ff1" -v b="$ff2" -v h="$half" -v s="$seconds" 'BEGIN {
  printf "the machine between the halves: %+.1f %% steps a second\n", ((b / (s - h)) / (a / h) - 1) * 100 }'
python3 "$root/bench/chaos_report.py" "$work/faults" "$work/chaos.run/events" "$work/chaos.out" \
  "$ff_steps" "$chaos_steps" "$seconds" "$hosts" >"$work/report.txt"
cat "$work/report.txt"

echo "== replay of the chaos run's launches (this machine, etr-mpirun)"
newest=$(ls -d "$work/chaos.ck"/step-*/manifest.pb | tail -1)
newest=${newest%/manifest.pb}
final=$((10#${newest##*step-}))
while read -r np from to; do
  echo "  $np rank(s): steps $from -> $to"
  "$build/etr-mpirun" -np "$np" --bind-to none "${job[@]}" --set checkpoint.dir="$work/replay" \
    --set checkpoint.every=0 --set schedule.stop_at_step="$to" --resume latest </dev/null >"$work/replay.out" 2>&1 ||
    { tail -20 "$work/replay.out"; echo "run_chaos: the replay failed"; exit 1; }
done < <(python3 "$root/bench/chaos_report.py" --segments "$work/chaos.run/events" "$final")
printf -v ref '%s/replay/step-%09d' "$work" "$final"
"$build/tests/e2e/ckpt_compare" "$newest" "$ref" 0 && echo "final weights (step $final): bitwise equal to the replay" ||
  echo "final weights (step $final): differ from the replay (see above)"
