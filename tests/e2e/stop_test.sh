#!/usr/bin/env bash
# Stopping a job with a save (the tiny config, 400 steps on 2 ranks, rank 0 slowed 20x so
# that a step takes a few ms and a signal lands mid-run; durable checkpoints only at the
# end, so that the stop's save is the one there is):
#  reference: an uninterrupted run under etr-run;
#  a. SIGTERM to etr-run mid-run (the memory tier on, every step), and again 50 ms later
#     (one request: signals within a second of the first are the same): it asks the job to stop
#     (SIGUSR2), the ranks agree at the next step boundary, save that step to disk and exit
#     140, and the memory tier's directory is removed (its copies are host RAM); etr-run
#     says so and exits 143; no step is lost (the saved step is the last one completed);
#     the same command with --resume latest continues from it and ends bitwise equal to
#     the reference;
#  b. SIGTERM to one rank of a plain mpirun job (as a scheduler or a user would): every
#     rank saves the same step and the job exits 143; resumed with plain mpirun, bitwise
#     equal to the reference;
#  c. a rank hangs (ETR_TEST_HANG_AT_STEP), so no step boundary comes: etr-run ends the
#     job after --stop-timeout (1 s), exit 143, nothing saved;
#  d. the same hang, --stop-timeout 60: a second SIGTERM 1.5 s later ends the job at once
#     (well before 60 s);
#  e. a single process (no MPI launcher), hung: the first SIGINT leaves it running (a stop
#     waits for the step boundary), the second ends it (the handler is gone after the
#     first: the default action);
#  f. etr-run started as a script's background job (SIGINT ignored, as bash starts one):
#     SIGINT leaves it running (the terminal's Ctrl-C is not meant for it), SIGTERM stops it
#     with a save;
#  g. a single process whose stop's save fails (a file-size limit: the write fails with
#     EFBIG): it says so and exits 1, not 143 (a scheduler must not take it for a clean
#     preemption: the steps since the last checkpoint are lost).
# Usage: stop_test.sh ETR_RUN ETR_TRAIN CONFIG CKPT_COMPARE ETR_MPIRUN
set -u
etr_run=$1 train=$2 config=$3 compare=$4 mpirun=$5
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then pkill -KILL -P "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; fi
  pkill -KILL -f "$work/" 2>/dev/null
  [ -n "${KEEP:-}" ] || rm -rf "$work" "/dev/shm/etr-stop-test-$$"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
show() { cat "$work/$1.out"; [ -f "$work/$1.run/events" ] && cat "$work/$1.run/events"; }
expect() { grep -q -- "$2" "$work/$1.out" || { show "$1"; fail "$1: $3"; }; }
steps=400
job=("$train" --config "$config" --set schedule.max_steps=$steps --set log.log_every=100
     --set log.eval_every=0 --set runtime.threads=1 --set checkpoint.every=0
     --set log.sample_tokens=0)
export ETR_SLOW_RANK=0:20
ckpt() { printf '%s/step-%09d' "$1" "$2"; }
progress() { { tr -d ' \n' <"$work/$1.run/progress"; } 2>/dev/null || echo -1; }
# start NAME ETR_RUN_ARGS... -- JOB_ARGS...: etr-run on 2 local slots in the background,
# checkpoints in $work/$ck.ck (ck: NAME unless set).
start() {
  local name=$1 args=()
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  "$etr_run" --hosts localhost:2 --run-dir "$work/$name.run" --checkpoint-dir "$work/${ck:-$name}.ck" \
    "${args[@]}" -- "${job[@]}" "$@" >"$work/$name.out" 2>&1 &
  pid=$!
}
# finish NAME [SECONDS]: waits for the background process (at most SECONDS, default 120);
# its exit status in $status, the seconds it took after the call in $took.
finish() {
  local name=$1 limit=${2:-120} i=0 t0=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
    i=$((i + 1))
    [ "$i" -lt $((limit * 10)) ] || { show "$name"; fail "$name: still running after $limit s"; }
  done
  wait "$pid"
  status=$?
  took=$((SECONDS - t0))
  pid=
}
# wait_step NAME STEP: until etr-run's job has completed STEP.
wait_step() {
  local i=0
  while [ "$(progress "$1")" -lt "$2" ]; do
    kill -0 "$pid" 2>/dev/null || { show "$1"; fail "$1: ended before step $2"; }
    sleep 0.01
    i=$((i + 1))
    [ "$i" -lt 6000 ] || { show "$1"; fail "$1: no step $2 within 60 s"; }
  done
}
same_params() {  # NAME DIR: DIR's step-$steps equals the reference's bitwise
  "$compare" "$(ckpt "$work/ref.ck" $steps)" "$(ckpt "$2" $steps)" 0 ||
    fail "$1: the final parameters differ from the uninterrupted run's"
}

echo "== reference"
start ref
finish ref
[ "$status" -eq 0 ] || { show ref; fail "ref: exit status $status"; }

echo "== a. SIGTERM to etr-run"
mem=/dev/shm/etr-stop-test-$$
start a -- --set checkpoint.memory_every=1 --set checkpoint.memory_dir="$mem"
wait_step a 100
kill -TERM "$pid"
sleep 0.05
kill -TERM "$pid"  # within a second: the same request (a Ctrl-C through a wrapper's trap too)
finish a
[ "$status" -eq 143 ] || { show a; fail "a: exit status $status, not 143"; }
expect a "signal 15: asking the job to save its step and stop" "etr-run did not ask the job to stop"
expect a "stopped after step [0-9]* on signal 12 (SIGUSR2): saved in" "the job did not save"
saved=$(sed -n 's/.*stop-exit step=\([0-9]*\) saved=1.*/\1/p' "$work/a.run/events")
[ -n "$saved" ] || { show a; fail "a: no stop-exit event with saved=1"; }
[ "$saved" -lt $steps ] || fail "a: the job finished before the stop"
grep -q "exit status=140 last_step=$saved\$" "$work/a.run/events" ||
  { show a; fail "a: the ranks did not exit 140 at the saved step $saved (steps lost)"; }
expect a "stopped by signal 15: the job saved step $saved and stopped" "etr-run's sentence"
[ -f "$(ckpt "$work/a.ck" "$saved")/manifest.pb" ] || fail "a: no checkpoint of step $saved"
grep -q "step-0*$saved (memory) saved" "$work/a.out" || { show a; fail "a: the memory tier did not save"; }
[ ! -e "$mem" ] || { ls -la "$mem"; rm -rf "$mem"; fail "a: the memory tier's directory was left"; }
echo "ok a: saved step $saved"
ck=a start a2 -- --resume latest
finish a2
[ "$status" -eq 0 ] || { show a2; fail "a2: exit status $status"; }
expect a2 "resumed from step $saved" "the resumed run did not continue from step $saved"
same_params a "$work/a.ck"
echo "ok a: resumed from step $saved, bitwise equal"

echo "== b. SIGTERM to one rank of a plain mpirun job"
plain=("$mpirun" -np 2 "${job[@]}" --set checkpoint.dir="$work/b.ck")
"${plain[@]}" >"$work/b.out" 2>&1 &
pid=$!
for i in $(seq 600); do
  grep -q "step  *100/$steps" "$work/b.out" 2>/dev/null && break
  sleep 0.05
done
grep -q "step  *100/$steps" "$work/b.out" || { show b; fail "b: no step 100 within 30 s"; }
rank=$(pgrep -f -- "--set checkpoint.dir=$work/b.ck" | while read -r p; do
  [ "$(cat /proc/$p/comm 2>/dev/null)" = etr-train ] && echo "$p"; done | tail -1)
[ -n "$rank" ] || { show b; fail "b: no rank found"; }
kill -TERM "$rank"
finish b
[ "$status" -eq 143 ] || { show b; fail "b: exit status $status, not 143"; }
saved=$(sed -n 's/.*stopped after step \([0-9]*\) on .*saved in.*/\1/p' "$work/b.out" | head -1)
[ -n "$saved" ] || { show b; fail "b: no save at the stop"; }
[ -f "$(ckpt "$work/b.ck" "$saved")/manifest.pb" ] || fail "b: no checkpoint of step $saved"
"${plain[@]}" --resume latest >"$work/b2.out" 2>&1 || { show b2; fail "b2: the resumed run failed"; }
expect b2 "resumed from .*/step-0*$saved: step $saved," "the resumed run did not continue from step $saved"
same_params b "$work/b.ck"
echo "ok b: step $saved saved on one rank's SIGTERM, resumed, bitwise equal"

echo "== c. a hung rank: --stop-timeout 1"
# hung NAME: waits until NAME's rank 1 hangs (its message), then 0.3 s more.
hung() {
  local i
  for i in $(seq 600); do grep -q "hangs at step 50" "$work/$1.out" 2>/dev/null && break; sleep 0.05; done
  grep -q "hangs at step 50" "$work/$1.out" || { show "$1"; fail "$1: the hang was not injected"; }
  sleep 0.3
}
ETR_TEST_HANG_AT_STEP=50:1 start c --stop-timeout 1
hung c
kill -TERM "$pid"
finish c 30
[ "$status" -eq 143 ] || { show c; fail "c: exit status $status, not 143"; }
expect c "--stop-timeout passed: ending the job without waiting for its save" "no timeout sentence"
expect c "stopped by signal 15; the job was ended (last step [0-9]*)" "etr-run's sentence"
grep -q stop-exit "$work/c.run/events" && { show c; fail "c: a hung job reported a save"; }
echo "ok c"

echo "== d. a hung rank: a second signal"
ETR_TEST_HANG_AT_STEP=50:1 start d --stop-timeout 60
hung d
kill -TERM "$pid"
sleep 1.5
kill -TERM "$pid"
finish d 30
[ "$status" -eq 143 ] || { show d; fail "d: exit status $status, not 143"; }
[ "$took" -lt 20 ] || { show d; fail "d: the second signal did not end the job at once ($took s)"; }
expect d "another signal: ending the job without waiting for its save" "no sentence"
echo "ok d"

echo "== e. one process, SIGINT twice"
# A background job of a non-interactive shell starts with SIGINT ignored (which the
# program keeps); with job control on (set -m) it starts with the default. The process
# hangs at step 50, so the first SIGINT's stop never comes.
set -m
ETR_TEST_HANG_AT_STEP=50 "${job[@]}" --set checkpoint.dir="$work/e.ck" >"$work/e.out" 2>&1 &
set +m
pid=$!
for i in $(seq 600); do grep -q "hangs at step 50" "$work/e.out" 2>/dev/null && break; sleep 0.05; done
grep -q "hangs at step 50" "$work/e.out" || { show e; fail "e: the hang was not injected"; }
kill -INT "$pid"
sleep 0.3
kill -0 "$pid" 2>/dev/null || { show e; fail "e: the first SIGINT ended the process"; }
kill -INT "$pid"
finish e 30
[ "$status" -eq 130 ] || { show e; fail "e: exit status $status, not 130"; }
grep -q "stopped after step" "$work/e.out" && { show e; fail "e: a hung process reported a stop"; }
echo "ok e"
echo "== f. etr-run started with SIGINT ignored (a script's background job): SIGINT leaves it"
start f
wait_step f 50
kill -INT "$pid"
sleep 1
kill -0 "$pid" 2>/dev/null || { show f; fail "f: SIGINT ended an etr-run that started with it ignored"; }
grep -q "asking the job" "$work/f.out" && { show f; fail "f: an ignored SIGINT asked the job to stop"; }
kill -TERM "$pid"
finish f
[ "$status" -eq 143 ] || { show f; fail "f: exit status $status, not 143"; }
expect f "the job saved step [0-9]* and stopped" "SIGTERM after the ignored SIGINT did not stop it with a save"
echo "ok f"

echo "== g. one process, SIGTERM, the save fails (ulimit -f)"
# (its output through a pipe: the limit is the process's, and its log must not hit it)
# (a model whose checkpoint is larger than the limit, which MPI's own files are not)
( ulimit -f 16000; exec "${job[@]}" --set schedule.max_steps=1000000 --set log.log_every=5 \
    --set model.d_model=256 --set model.n_head=4 --set checkpoint.dir="$work/g.ck" ) \
  > >(cat >"$work/g.out") 2>&1 &
pid=$!
for i in $(seq 1200); do grep -q "step *10/" "$work/g.out" 2>/dev/null && break; sleep 0.05; done
grep -q "step *10/" "$work/g.out" || { show g; fail "g: no step 10 within 60 s"; }
kill -TERM "$pid"
finish g 60
[ "$status" -eq 1 ] || { show g; fail "g: exit status $status, not 1"; }
expect g "its checkpoint could not be saved" "no sentence for the failed save"
echo "ok g"

echo PASS
