#!/usr/bin/env bash
# Launching across simulated hosts (tests/cluster/sim_cluster.sh: 3 hosts of 2 slots,
# each a network namespace with its own address and hostname, links shaped to 2 Gbit/s):
#  a. etr-mpirun across hosts: ranks land host by host (hostnames h1 h1 h2 h2), with
#     shared memory within a host and TCP between hosts: the TCP bytes leave through the
#     hosts' links (their qdisc counters), none go over a host's loopback; etr-run
#     --mpirun-flags decides vader+tcp on the bridge's subnet there, and loopback only
#     for this machine alone;
#  b. the hierarchical allreduce on real hosts at 2 x 2, 2 x 1 and 3 x 1 ranks
#     (collectives_hier_test: against a double-precision reference, bitwise equal on every
#     rank; the topology from the hosts, not from the test hook); the ranks of both hosts
#     count as one machine's (runtime/cpu_affinity.h: they share its cores);
#  c. etr-run --hosts h1:2,h2:2 trains etr-train (tiny) across 2 hosts: it says which
#     network it chose, the gradient buckets take the hierarchical allreduce, the job
#     completes, and its parameters equal a 4-rank run on one
#     host's shared memory within 1e-5 (the same global batch; the hierarchical sum adds
#     in another order than the ring).
# Skipped (exit 77, with the reason) where network namespaces cannot be made.
# Usage: cluster_launch_test.sh BUILD_DIR CONFIG CKPT_COMPARE
source "$(dirname "$0")/test_setup.sh" etrl "$@"
"$sim" up 3 2 2gbit || fail "the simulated cluster did not come up"
hostfile=/run/etr-cluster/$ETR_CLUSTER_NAME/hostfile
mpirun_on_cluster() {  # HOSTS ARGS...: etr-mpirun on host 1 across HOSTS
  local hosts=$1
  shift
  "$sim" exec 1 "$build/etr-mpirun" --host "$hosts" --mca plm_rsh_agent "$sim rsh" "$@"
}
qdisc_bytes() { ip netns exec "$ETR_CLUSTER_NAME-h$1" tc -s qdisc show dev eth0 | awk '/Sent/ {print $2; exit}'; }
lo_bytes() { ip -n "$ETR_CLUSTER_NAME-h$1" -s link show lo | awk 'f {print $1; exit} /TX:/ {f = 1}'; }

echo "== a. etr-mpirun across 2 hosts: placement and transports"
names=$(mpirun_on_cluster 198.18.0.1:2,198.18.0.2:2 -np 4 hostname 2>&1 | sort | tr '\n' ' ')
[ "$names" = "h1 h1 h2 h2 " ] || fail "a: ranks ran on '$names', not h1 h1 h2 h2"
flags=$("$sim" exec 1 "$build/launcher/etr-run" --mpirun-flags --hostfile "$hostfile" | tr '\n' ' ')
case "$flags" in
  *"--mca btl self,vader,tcp "*"btl_tcp_if_include 198.18.0.0/24 "*"oob_tcp_if_include 198.18.0.0/24 "*) ;;
  *) fail "a: across hosts etr-mpirun would pass '$flags'" ;;
esac
flags=$("$build/launcher/etr-run" --mpirun-flags -np 2 | tr '\n' ' ')
case "$flags" in
  *"--mca btl self,vader "*"oob_tcp_if_include lo "*"btl_tcp_if_include lo "*) ;;
  *) fail "a: on this machine alone etr-mpirun would pass '$flags'" ;;
esac
# The bytes on the links need etr-bench (a sanitizer build has no benchmarks: the rest of
# the test runs there without it, and says so).
if [ -x "$build/bench/etr-bench" ]; then
  sent1=$(qdisc_bytes 1) sent2=$(qdisc_bytes 2) lo1=$(lo_bytes 1) lo2=$(lo_bytes 2)
  # 16 MiB allreduces: the ring across hosts moves 1.5 x 16 MiB out of each host per op.
  mpirun_on_cluster 198.18.0.1:2,198.18.0.2:2 -np 4 --bind-to none "$build/bench/etr-bench" allreduce \
    --min-bytes 16MiB --max-bytes 16MiB --algo ring --iters 2 --warmup 1 --reps 1 --stream-bytes 0 \
    >"$work/a.out" 2>&1 || { cat "$work/a.out"; fail "a: etr-bench allreduce across hosts failed"; }
  out1=$(($(qdisc_bytes 1) - sent1)) out2=$(($(qdisc_bytes 2) - sent2))
  inner=$(($(lo_bytes 1) - lo1 + $(lo_bytes 2) - lo2))
  echo "bytes out of h1 $out1, of h2 $out2; over the hosts' loopback $inner"
  # 4 ops (warm-up, 2 timed, the check) x 24 MiB per host, and MPI's reference as many again.
  [ "$out1" -gt 100000000 ] && [ "$out2" -gt 100000000 ] || fail "a: the allreduce did not cross the links"
  [ "$inner" -lt 4000000 ] || fail "a: $inner bytes went over loopback: ranks of one host did not use shared memory"
else
  echo "a: no etr-bench in $build (built without benchmarks): the bytes on the links are not measured here"
fi

echo "== b. the hierarchical allreduce on real hosts"
for case in "198.18.0.1:2,198.18.0.2:2 4" "198.18.0.1:1,198.18.0.2:1 2" "198.18.0.1:1,198.18.0.2:1,198.18.0.3:1 3"; do
  set -- $case
  echo "-- $2 ranks on $1"
  filter='*'
  [ "$2" -lt 4 ] && filter='-HierAllreduce.ExactForEveryOpDtypeAndCount'  # (run at 2 x 2)
  mpirun_on_cluster "$1" -np "$2" --bind-to none "$build/tests/mpi/collectives_hier_test" \
    --gtest_filter="$filter" >"$work/b.out" 2>&1 || { cat "$work/b.out"; fail "b: collectives_hier_test on $1"; }
  grep -E "PASSED|tests? ran" "$work/b.out"
done

echo "-- the ranks of 2 simulated hosts share this machine's CPUs: one node to etr, two to MPI"
mpirun_on_cluster 198.18.0.1:2,198.18.0.2:2 -np 4 --bind-to none -x ETR_TEST_RANKS_ON_MACHINE=4 \
  -x ETR_TEST_RANKS_ON_MPI_NODE=2 "$build/tests/mpi/cpu_affinity_test" \
  --gtest_filter='CpuAffinity.RanksOnANodeAreThoseOfTheMachine' >"$work/b.out" 2>&1 ||
  { cat "$work/b.out"; fail "b: ranks_on_this_node across simulated hosts"; }
grep -E "PASSED|tests? ran" "$work/b.out"

echo "== c. etr-run trains across 2 hosts"
job=("$build/examples/train/etr-train" --config "$config" --set schedule.max_steps=20
     --set log.log_every=10 --set log.eval_every=0 --set runtime.threads=1 --set checkpoint.every=20
     --set log.sample_tokens=0)
"$sim" exec 1 "$build/launcher/etr-run" --hosts 198.18.0.1:2,198.18.0.2:2 \
  --launch-agent "$sim rsh" --checkpoint-dir "$work/c.ck" --mpi-arg=--bind-to --mpi-arg=none \
  -- "${job[@]}" >"$work/c.out" 2>&1 || { cat "$work/c.out"; fail "c: etr-run across hosts failed"; }
grep "hosts span 2 machines: shared memory within a host, TCP between them on 198.18.0.0/24" "$work/c.out" ||
  { cat "$work/c.out"; fail "c: etr-run did not say which network it chose"; }
grep -q "the job completed" "$work/c.out" || { cat "$work/c.out"; fail "c: no completion"; }
grep -q "allreduce hier on 2 hosts x 2 ranks" "$work/c.out" ||
  { cat "$work/c.out"; fail "c: the gradient buckets do not say they take the hierarchical allreduce"; }
"$build/etr-mpirun" -np 4 --bind-to none "${job[@]}" --set checkpoint.dir="$work/ref.ck" >"$work/ref.out" 2>&1 ||
  { cat "$work/ref.out"; fail "c: the 4-rank run on one host failed"; }
"$compare" "$work/ref.ck/step-000000020" "$work/c.ck/step-000000020" 1e-5 ||
  fail "c: parameters across hosts differ from the run on one host"
echo "PASS"
