#!/usr/bin/env bash
# The checkpoint memory tier on one machine (issue 35, item 3; the tiny config on 2 ranks,
# durable checkpoints every 30 steps; the memory tier in a /dev/shm directory of its own):
#  reference: an uninterrupted 2-rank run under etr-run, memory tier off;
#  a. memory tier every step (checkpoint.memory_every=1): one rank killed (kill -9)
#     mid-run; etr-run's relaunch restores from the memory tier (the `restored` event says
#     tier=memory-local) and each rank reads its host's files, none from another rank (the
#     log: "0 B moved between hosts"), at most 1 step is lost (the relaunch line: the last launch's last
#     completed step against the restored one), and the final parameters equal the
#     reference's bitwise; the completed job removes the tier's directory;
#  b. a run in parts (schedule.stop_at_step): the part's last step is on disk, so its end
#     removes the memory tier's directory (host RAM) as a completed run's does;
#  c. a damaged memory copy: a run whose rank 1 fails at step 37 (ETR_FAIL_AT_STEP) leaves
#     memory copy 35 or 36 and disk copy 30 (saved synchronously: checkpoint.async=false
#     applies to the disk tiers); one byte of the memory copy's shard file is
#     flipped; the relaunch (ETR_RUN_RESTART=1, as etr-run sets it) logs why it does not use
#     the memory tier, restores from disk (tier=durable), empties the tier (its copies
#     would be replaced one by one and kept aside) and ends bitwise equal; the completed
#     run removes the tier's directory (its last step is on disk);
#  d. a memory directory that cannot be made (under a regular file): every memory save
#     fails with a sentence, training completes, the final parameters are equal; with
#     runtime.memory_budget=64MiB the memory tier's share, 2 saves (1 + memory_keep) of
#     rank 0's 723 KB file and no buddy copy on one host, comes off the budget (62.62 MiB
#     left), and `etr-train --plan` names that share;
#  e. checkpoint.memory_max_stall = 0.001: a save costs far more than 0.1 % of this tiny
#     model's step, so the interval grows (logged) and the run saves to memory a few times
#     instead of every step; the final parameters are equal;
#  f. a tmpfs too small for the shards: every memory save fails with the sentence (the
#     space is reserved before the copy, so no SIGBUS), training completes, equal.
# Usage: memtier_test.sh ETR_RUN ETR_TRAIN CONFIG CKPT_COMPARE ETR_MPIRUN
set -u
etr_run=$1 train=$2 config=$3 compare=$4 mpirun=$5
work=$(mktemp -d)
mem=/dev/shm/etr-memtier-test-$$
pid=
mounted=
cleanup() {
  [ -z "$mounted" ] || umount "$mounted"
  if [ -n "$pid" ]; then pkill -KILL -P "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; fi
  [ -n "${KEEP:-}" ] || rm -rf "$work" "$mem"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
show() { cat "$work/$1.out"; [ -f "$work/$1.run/events" ] && cat "$work/$1.run/events"; }
expect() { grep -q "$2" "$3" || { show "$1"; fail "$1: $4"; }; }
steps=80
job=("$train" --config "$config" --set schedule.max_steps=$steps --set log.log_every=20
     --set log.eval_every=0 --set runtime.threads=1 --set checkpoint.every=30
     --set log.sample_tokens=0)
memory=(--set checkpoint.memory_every=1 --set checkpoint.memory_dir="$mem")
ckpt() { printf '%s/step-%09d' "$1" "$2"; }
progress() { { tr -d ' \n' <"$work/$1.run/progress"; } 2>/dev/null || echo -1; }
# run NAME JOB_ARGS...: etr-run in the background on 2 local slots; its pid in $pid.
run() {
  local name=$1
  shift
  "$etr_run" --hosts localhost:2 --run-dir "$work/$name.run" --checkpoint-dir "$work/$name.ck" \
    -- "${job[@]}" "$@" >"$work/$name.out" 2>&1 &
  pid=$!
}
finish() {  # NAME: etr-run exits 0 within 120 s
  local i=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
    [ "$i" -lt 1200 ] || { show "$1"; fail "$1: etr-run still running after 120 s"; }
  done
  wait "$pid"
  local status=$?
  pid=
  [ "$status" -eq 0 ] || { show "$1"; fail "$1: etr-run exited $status"; }
}
same_params() {
  "$compare" "$(ckpt "$work/ref.ck" $steps)" "$(ckpt "$work/$1.ck" $steps)" 0 ||
    fail "$1: the final parameters differ from the uninterrupted run's"
}

echo "== reference: uninterrupted, memory tier off"
run ref
finish ref

echo "== a. memory tier every step, one rank killed"
run a "${memory[@]}"
i=0
while [ "$(progress a)" -lt 40 ]; do
  kill -0 "$pid" 2>/dev/null || { show a; fail "a: etr-run ended before step 40"; }
  sleep 0.01
  i=$((i + 1))
  [ "$i" -lt 6000 ] || { show a; fail "a: no step 40 within 60 s"; }
done
mpi=$(pgrep -P "$pid" | head -1)
victim=$([ -n "$mpi" ] && pgrep -P "$mpi" | tail -1)
[ -n "$victim" ] || fail "a: no rank to kill"
kill -KILL "$victim"
finish a
expect a "restored step=[0-9]* world=2 tier=memory-local" "$work/a.run/events" "the relaunch did not restore from the memory tier"
expect a "memory-local tier; 0 B moved between hosts" "$work/a.out" "a rank on the one host did not read the host's own files"
line=$(grep -o "the last launch completed step [0-9]*: [0-9]* steps\? lost" "$work/a.out")
[ -n "$line" ] || { show a; fail "a: no relaunch line"; }
echo "a: $line"
lost=$(echo "$line" | sed 's/.*: \([0-9]*\) steps\? lost/\1/')
[ "$lost" -le 1 ] || { show a; fail "a: $lost steps lost (at most 1 with the memory tier)"; }
[ ! -e "$mem" ] || fail "a: the memory tier is still there after the job completed"
same_params a

echo "== b. a run that ends at schedule.stop_at_step leaves no memory tier behind"
rm -rf "$mem"
"$mpirun" -np 2 "${job[@]}" "${memory[@]}" --set checkpoint.dir="$work/b.ck" \
  --set schedule.stop_at_step=25 >"$work/b.out" 2>&1 || { cat "$work/b.out"; fail "b: the run failed"; }
[ -f "$(ckpt "$work/b.ck" 25)/manifest.pb" ] || { cat "$work/b.out"; fail "b: no checkpoint of step 25"; }
[ ! -e "$mem" ] || fail "b: the memory tier is still there after a run to stop_at_step: $(ls -A "$mem" | tr '\n' ' ')"

echo "== c. a damaged memory copy falls back to disk"
rm -rf "$mem"
# (disk saves synchronous here: an async one of step 30 might not commit before step 37)
ETR_FAIL_AT_STEP=37:1 "$mpirun" -np 2 "${job[@]}" "${memory[@]}" --set checkpoint.dir="$work/c.ck" \
  --set checkpoint.async=false \
  >"$work/c1.out" 2>&1 && { cat "$work/c1.out"; fail "c: the run with a failure at step 37 succeeded"; }
# (the newest complete copy: a save of step 37 may have begun when the rank failed)
newest=$(for d in "$mem"/step-*; do [ -f "$d/manifest.pb" ] && echo "$d"; done | tail -1)
[ -n "$newest" ] && [ -f "$newest/shard-00000-of-00002.bin" ] || { cat "$work/c1.out"; ls -la "$mem"; fail "c: no memory copy"; }
echo "c: damaging $newest/shard-00000-of-00002.bin"
printf '\xff' | dd of="$newest/shard-00000-of-00002.bin" bs=1 seek=100 conv=notrunc status=none
mkdir -p "$work/c.run"
ETR_RUN_DIR="$work/c.run" ETR_RUN_RESTART=1 ETR_RUN_REASON=failure ETR_RUN_PREV_NP=2 \
  "$mpirun" -np 2 -x ETR_RUN_DIR -x ETR_RUN_RESTART -x ETR_RUN_REASON -x ETR_RUN_PREV_NP \
  "${job[@]}" "${memory[@]}" --set checkpoint.dir="$work/c.ck" --set checkpoint.async=false \
  --resume latest >"$work/c.out" 2>&1 ||
  { show c; fail "c: the relaunch failed"; }
expect c "not resuming from the memory tier: .*checksum" "$work/c.out" "the damaged memory copy was not named"
expect c "restored step=30 world=2 tier=durable" "$work/c.run/events" "did not restore from disk step 30"
grep "not resuming from the memory tier" "$work/c.out"
grep "existed; moved it to" "$work/c.out" &&
  fail "c: the memory copies of steps the run passed again were replaced and kept (the tier was not emptied)"
[ ! -e "$mem" ] || fail "c: the memory tier is still there after the run completed: $(ls -A "$mem" | tr '\n' ' ')"
same_params c

echo "== d. a memory directory that cannot be made"
touch "$work/file"
"$mpirun" -np 2 "${job[@]}" --set checkpoint.memory_every=1 --set checkpoint.memory_dir="$work/file/mem" \
  --set checkpoint.dir="$work/d.ck" --set runtime.memory_budget=64MiB >"$work/d.out" 2>&1 ||
  { cat "$work/d.out"; fail "d: the run failed"; }
# Off the 64 MiB budget: memory_keep + 1 = 2 saves of rank 0's file (the durable tier's
# file of the same step has its bytes), and no buddy copy on one host.
file0=$(stat -c %s "$work/d.ck/step-000000080/shard-00000-of-00002.bin")
left=$(awk -v f="$file0" 'BEGIN { printf "%.2f MiB", (64 * 1048576 - 2 * f) / 1048576 }')
expect d "memory plan: .* of the budget $left" "$work/d.out" "the memory tier was not taken off the budget ($left expected)"
# etr-train --plan names the same share in its table.
tier=$(awk -v f="$file0" 'BEGIN { printf "%.4g MiB", 2 * f / 1048576 }')
"$mpirun" -np 2 "${job[@]}" --set checkpoint.memory_every=1 --set checkpoint.memory_dir="$work/file/mem" \
  --set checkpoint.dir="$work/d.ck" --set runtime.memory_budget=64MiB --plan >"$work/d.plan" 2>&1 ||
  { cat "$work/d.plan"; fail "d: etr-train --plan failed"; }
expect d "^  checkpoint memory tier: $tier of host RAM" "$work/d.plan" "--plan does not show the memory tier's $tier"
expect d "not saved: cannot create the checkpoint directory $work/file/mem" "$work/d.out" "no sentence on the bad memory directory"
same_params d

echo "== e. the memory tier bounded to 0.1 % of a step: its saves spread out, training unchanged"
"$mpirun" -np 2 "${job[@]}" "${memory[@]}" --set checkpoint.memory_max_stall=0.001 \
  --set checkpoint.dir="$work/e.ck" >"$work/e.out" 2>&1 || { cat "$work/e.out"; fail "e: the run failed"; }
expect e "a save costs training .* the memory tier now saves every [0-9]* step(s)" "$work/e.out" \
  "the bound did not change the interval"
saves=$(grep -c "(memory) saved" "$work/e.out")
[ "$saves" -ge 1 ] && [ "$saves" -le $((steps / 4)) ] ||
  { cat "$work/e.out"; fail "e: $saves memory saves in $steps steps (bounded: at least 1, at most $((steps / 4)))"; }
echo "e: $saves memory saves in $steps steps"
same_params e

echo "== f. a full tmpfs (1 MiB, for 2 shards of 723 KB)"
if [ "$(id -u)" != 0 ]; then
  echo "f: skipped: mounting a tmpfs needs root"
  echo "PASS"
  exit 0
fi
small="$work/small"
mkdir -p "$small"
mount -t tmpfs -o size=1m tmpfs "$small" || fail "f: cannot mount a tmpfs"
mounted=$small
"$mpirun" -np 2 "${job[@]}" --set checkpoint.memory_every=1 --set checkpoint.memory_dir="$small/mem" \
  --set checkpoint.dir="$work/f.ck" >"$work/f.out" 2>&1 || { cat "$work/f.out"; fail "f: the run failed"; }
expect f "failed: cannot reserve space for .*No space left on device" "$work/f.out" \
  "no sentence on the full tmpfs"
same_params f
echo "PASS"
