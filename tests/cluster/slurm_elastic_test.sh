#!/usr/bin/env bash
# etr-run inside a Slurm allocation (tests/cluster/sim_slurm.sh: 2 hosts of 1 CPU):
# examples/slurm/elastic.sbatch (sbatch --no-kill, 2 nodes) runs etr-run, which picks
# --launcher srun by itself and launches etr-train (tiny, checkpoints every 5 steps) as a
# job step of 2 ranks on nodes h1 and h2. At step 30 host 2 fails (its slurmd and every
# process on it killed): the job goes on from its newest checkpoint as a step on h1 alone;
# sinfo shows h2 not responding; h2's slurmd is started again, Slurm has the node in
# service, and the job grows back onto it (a step on h1 and h2) and completes. Its final
# parameters equal an uninterrupted 2-rank etr-mpirun run's within 1e-3 (the same global
# batch and data; 1 rank sums in another order than 2). The recovery time is etr-run's.
# Then a stop: the same sbatch, and at step 40 `scancel --batch --signal=TERM` (what
# `#SBATCH --signal=B:TERM@120` does before the time limit): etr-run asks the step to stop
# (SIGUSR2, which srun forwards to the tasks), the ranks save their step and exit, etr-run
# says so and exits 143; a second sbatch with --resume latest continues from that step and
# ends bitwise equal to the reference (2 ranks throughout).
# Skipped (exit 77, with the reason) without root, network namespaces or Slurm.
# Usage: slurm_elastic_test.sh BUILD_DIR CONFIG CKPT_COMPARE
pid=
on_exit() { if [ -n "$pid" ]; then kill -KILL "$pid" 2>/dev/null; fi; }
source "$(dirname "$0")/test_setup.sh" etrse "$@"
source "$(dirname "$0")/slurm_setup.sh" 2 1
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=${ETR_SLURM_TEST_STEPS:-300}
job=(--config "$config" --set schedule.max_steps=$steps --set log.log_every=50 --set log.eval_every=0
     --set runtime.threads=1 --set checkpoint.every=5 --set log.sample_tokens=0)
ckpt() { printf '%s/step-%09d' "$1" "$steps"; }
out=$work/elastic.out
show() { cat "$out"; "$slurm" run sinfo -N; }
progress() { local p; p=$({ tr -d ' \n' <"$work/run/progress"; } 2>/dev/null); echo "${p:--1}"; }
wait_for() {  # SECONDS WHAT COMMAND...: until COMMAND succeeds, while the job runs
  local limit=$1 what=$2 i=0
  shift 2
  until "$@"; do
    kill -0 "$pid" 2>/dev/null || { show; fail "the job ended before $what"; }
    sleep 0.1
    i=$((i + 1))
    [ "$i" -lt $((limit * 10)) ] || { show; fail "no $what within $limit s"; }
  done
}
at_step() { [ "$(progress)" -ge "$1" ]; }
h2_state() { "$slurm" run sinfo -h -N -n h2 -o %T; }
h2_failed() { case "$(h2_state)" in *'*' | down* | fail*) return 0 ;; esac; return 1; }
expect() { grep -q "$1" "$out" || { show; fail "$2"; }; }

echo "== reference: an uninterrupted 2-rank etr-mpirun run"
"$build/etr-mpirun" -np 2 --bind-to none "$build/examples/train/etr-train" "${job[@]}" \
  --set checkpoint.dir="$work/ref.ck" >"$work/ref.out" 2>&1 || { cat "$work/ref.out"; fail "reference run failed"; }

echo "== sbatch examples/slurm/elastic.sbatch; host 2 fails at step 30, then returns"
# Rank 0 runs 60 times slower (ETR_SLOW_RANK: a sleep after each micro-batch, the sums
# unchanged): etr-run's heartbeats find host 2 gone in seconds, and the job must still run
# when Slurm marks the node not responding and when it returns, to grow back onto it.
ETR_BUILD=$build ETR_CKPT_DIR=$work/el.ck ETR_COMM_TIMEOUT_S=3 ETR_SLOW_RANK=0:60 \
  ETR_RUN_ARGS="--run-dir $work/run --discovery-interval 0.2" \
  "$slurm" run sbatch --wait --chdir="$root" --output="$out" "$root/examples/slurm/elastic.sbatch" "${job[@]}" &
pid=$!
wait_for 120 "step 30" at_step 30
"$slurm" run sinfo -N
"$slurm" kill 2
killed_at=$(progress)
echo "host 2 killed at step $killed_at"
wait_for 60 "'not responding' for h2 in sinfo" h2_failed
"$slurm" run sinfo -N
wait_for 60 "a step on h1 alone" grep -q "rank(s) on h1:1 (after a failure" "$out"
# The node stays out a few seconds (etr-run's discovery, every 0.2 s, sees it gone: the
# heartbeats excluded h2 before Slurm noticed, and a host is let back in once discovery
# has dropped it and lists it again).
sleep 3
"$slurm" start 2
wait_for 60 "h2 back in service" eval '! h2_failed'
"$slurm" run sinfo -N
wait "$pid"
status=$?
pid=
[ "$status" -eq 0 ] || { show; fail "the sbatch job failed (sbatch --wait: $status)"; }
expect "launch 1: 2 rank(s) on h1:1,h2:1" "the first step was not on h1 and h2"
expect "1 rank(s) on h1:1 (after a failure" "not relaunched on h1 alone after host 2 failed"
expect "2 rank(s) on h1:1,h2:1 (after a resize" "did not grow back onto h2"
expect "the job completed" "etr-run did not report completion"
grep "etr-run: launch\|etr-run: recovered\|excluded\|failed (exit" "$out"
[ -f "$(ckpt "$work/el.ck")/manifest.pb" ] || { show; fail "no checkpoint of step $steps"; }
"$compare" "$(ckpt "$work/ref.ck")" "$(ckpt "$work/el.ck")" 1e-3 ||
  fail "the final parameters differ from the uninterrupted run's"

echo "== a stop: scancel --batch --signal=TERM at step 40, then --resume latest"
rm -rf "$work/run"
out=$work/stop.out
id=$(ETR_BUILD=$build ETR_CKPT_DIR=$work/stop.ck ETR_SLOW_RANK=0:20 \
  ETR_RUN_ARGS="--run-dir $work/run --heartbeat-timeout 0" \
  "$slurm" run sbatch --parsable --chdir="$root" --output="$out" \
  "$root/examples/slurm/elastic.sbatch" "${job[@]}" --set checkpoint.every=0)
[ -n "$id" ] || fail "sbatch gave no job id"
running() { [ -n "$("$slurm" run squeue -h -j "$id" 2>/dev/null)" ]; }
pid=  # (wait_for's check of the job: squeue's instead)
for i in $(seq 1200); do at_step 40 && break; running || { show; fail "the job ended before step 40"; }; sleep 0.1; done
at_step 40 || { show; fail "no step 40 within 120 s"; }
"$slurm" run scancel --batch --signal=TERM "$id"
for i in $(seq 600); do running || break; sleep 0.1; done
running && { show; fail "the job did not stop within 60 s of SIGTERM"; }
expect "signal 15: asking the job to save its step and stop" "etr-run did not ask the job to stop"
expect "stopped by signal 15: the job saved step [0-9]* and stopped" "the job did not save its step"
saved=$(sed -n 's/.*the job saved step \([0-9]*\) and stopped.*/\1/p' "$out")
[ "$saved" -lt "$steps" ] || fail "the job finished before the stop"
echo "saved step $saved at the stop"
out=$work/resume.out
ETR_BUILD=$build ETR_CKPT_DIR=$work/stop.ck ETR_RUN_ARGS="--run-dir $work/run" \
  "$slurm" run sbatch --wait --chdir="$root" --output="$out" \
  "$root/examples/slurm/elastic.sbatch" "${job[@]}" --set checkpoint.every=0 --resume latest ||
  { show; fail "the resumed job failed"; }
expect "resumed from step $saved" "the resumed job did not continue from step $saved"
"$compare" "$(ckpt "$work/ref.ck")" "$(ckpt "$work/stop.ck")" 0 ||
  fail "the stopped and resumed job's final parameters differ from the uninterrupted run's"
echo "PASS"
