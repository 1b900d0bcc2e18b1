#!/usr/bin/env bash
# srun-launched etr-train on a Slurm cluster of simulated hosts (tests/cluster/sim_slurm.sh:
# 2 hosts of 1 CPU, slurmctld on a controller host): examples/slurm/train.sbatch, submitted
# with sbatch, runs etr-train (tiny, 40 steps) as one step of 2 ranks (srun --mpi=pmix, one
# per host: World sees 2 ranks on 2 hosts, rank 0 on h1); its final parameters equal bitwise those of an
# etr-mpirun launch of the same config on the same 2 hosts. Also: etr-run --launcher srun
# outside an allocation is refused in one sentence.
# Skipped (exit 77, with the reason) without root, network namespaces or Slurm.
# Usage: slurm_launch_test.sh BUILD_DIR CONFIG CKPT_COMPARE
source "$(dirname "$0")/test_setup.sh" etrs "$@"
source "$(dirname "$0")/slurm_setup.sh" 2 1
root=$(cd "$(dirname "$0")/../.." && pwd)
steps=40
job=(--config "$config" --set schedule.max_steps=$steps --set log.log_every=10 --set log.eval_every=0
     --set runtime.threads=1 --set log.sample_tokens=0)
ckpt() { printf '%s/step-%09d' "$1" "$steps"; }

echo "== etr-run --launcher srun outside an allocation"
out=$("$build/launcher/etr-run" --launcher srun -- /bin/true 2>&1) && fail "etr-run --launcher srun ran outside an allocation"
echo "$out"
grep -q "needs a Slurm allocation" <<<"$out" || fail "no clear error outside an allocation: $out"

echo "== reference: etr-mpirun, 2 ranks on hosts 1 and 2"
"$sim" exec 1 "$build/etr-mpirun" --host 198.18.0.1:1,198.18.0.2:1 --mca plm_rsh_agent "$sim rsh" -np 2 \
  "$build/examples/train/etr-train" "${job[@]}" --set checkpoint.dir="$work/ref.ck" >"$work/ref.out" 2>&1 ||
  { cat "$work/ref.out"; fail "the etr-mpirun run failed"; }

echo "== sbatch examples/slurm/train.sbatch: 2 nodes, one rank each"
start=$(date +%s.%N)
ETR_BUILD=$build timeout 300 "$slurm" run sbatch --wait --chdir="$root" --output="$work/srun.out" \
  "$root/examples/slurm/train.sbatch" "${job[@]}" --set checkpoint.dir="$work/srun.ck" ||
  { cat "$work/srun.out"; fail "the sbatch job failed"; }
echo "sbatch job done in $(echo "$(date +%s.%N) $start" | awk '{printf "%.1f", $1 - $2}') s"
grep -E "data parallel|step +$steps/" "$work/srun.out"
# World from MPI as Slurm launched it: rank 0 of 2 on h1, the topology 2 hosts of 1 rank.
grep -q "\[etr 0/2 h1\] data parallel: 2 ranks;.* on 2 hosts x 1 rank" "$work/srun.out" ||
  { cat "$work/srun.out"; fail "the ranks did not see a world of 2 on hosts h1 and h2"; }
[ -f "$(ckpt "$work/srun.ck")/manifest.pb" ] || { cat "$work/srun.out"; fail "no checkpoint of step $steps"; }
"$compare" "$(ckpt "$work/ref.ck")" "$(ckpt "$work/srun.ck")" 0 ||
  fail "the srun-launched parameters differ from the etr-mpirun launch's"
echo "PASS"
