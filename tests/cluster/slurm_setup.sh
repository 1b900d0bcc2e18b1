# Sourced by the Slurm tests after test_setup.sh:  source "$(dirname "$0")/slurm_setup.sh" H CPUS
# Brings up sim_slurm.sh's cluster of H hosts of CPUS CPUs (exit 77 with the reason where it
# cannot run: no root, no namespaces, Slurm not installed), sets slurm (the script) and
# submit (sbatch on the controller host); at exit, after the test's on_exit, the daemons
# and hosts are removed and nothing of Slurm or munge may be left running.
slurm=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/sim_slurm.sh
"$slurm" check || exit 77
slurm_cleanup() {
  if declare -F on_exit >/dev/null; then on_exit; fi
  "$slurm" down
  rm -rf "$work"
  local left
  left=$(pgrep -a -f "slurm.conf|munge.socket" | grep "/run/etr-cluster/$ETR_CLUSTER_NAME/" || true)
  if [ -n "$left" ]; then echo "FAIL: left running after down: $left"; exit 1; fi
}
trap slurm_cleanup EXIT
"$slurm" up "$1" "$2" || fail "the Slurm cluster did not come up"
echo "== sinfo on the controller host"
"$slurm" run sinfo -N
# Open MPI between the simulated hosts: ob1, shared memory within a host, TCP between.
export OMPI_MCA_pml=ob1
