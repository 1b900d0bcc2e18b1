#!/usr/bin/env bash
# A cluster on one machine (issue 18, first part): H simulated hosts, each a network
# namespace with its own address in the 198.18.0.0/15 benchmarking range and its own
# hostname (a UTS namespace per command), joined by a bridge that lives in a namespace of
# its own (nothing is added to the machine's own network), each link shaped with the tbf
# qdisc in both directions. Each host has its own /dev/shm: a tmpfs of its own (in
# /run/etr-cluster/NAME/shm-hI) bound over /dev/shm in the private mount namespace that
# `ip netns exec` gives each of its commands, so a host's memory (the checkpoint memory
# tier, MPI's shared-memory files) is seen by its processes only, and `wipe I` loses it.
# Needs root.
#
#   tests/cluster/sim_cluster.sh up H S [RATE [BURST [LATENCY]]]
#                                H hosts of S slots (rate e.g. 2gbit); with
#                                ETR_CLUSTER_PIN=1 and H <= the CPUs, host I runs on CPU I-1
#                                alone (a host with a core of its own: for benchmarks); with
#                                ETR_CLUSTER_CPU=F (e.g. 0.6), each host's processes share F
#                                of a CPU (a cpu cgroup of their own with that CFS quota), so
#                                that a host lost takes its compute with it even when the
#                                hosts outnumber the cores (for the chaos soak)
#   tests/cluster/sim_cluster.sh exec I CMD...           run CMD on host I (1-based)
#   tests/cluster/sim_cluster.sh rsh ADDRESS CMD...      mpirun's rsh agent (plm_rsh_agent)
#   tests/cluster/sim_cluster.sh hostfile                the hosts, "ADDRESS slots=S" lines
#   tests/cluster/sim_cluster.sh down                    remove everything (also after a crash)
#   tests/cluster/sim_cluster.sh check                   can this machine make one? (else the
#                                                        reason, exit 77: tests skip)
#   tests/cluster/sim_cluster.sh cut I | heal I          host I's link down (a partition: its
#                                                        processes live on) | up again
#   tests/cluster/sim_cluster.sh kill I                  kill -9 every process on host I
#   tests/cluster/sim_cluster.sh pids I                  the processes of host I, one a line
#   tests/cluster/sim_cluster.sh wipe I                  empty host I's /dev/shm (its memory,
#                                                        as a host that lost power)
#
# ETR_CLUSTER_NAME (default etrc) names the namespaces, so two clusters can coexist; the
# state (hostfile, settings) is in /run/etr-cluster/NAME.
set -euo pipefail
name=${ETR_CLUSTER_NAME:-etrc}
state=/run/etr-cluster/$name
self=$(readlink -f "${BASH_SOURCE[0]}")

die() { echo "sim_cluster: $*" >&2; exit 1; }

# The cpu cgroup of host I's processes when ETR_CLUSTER_CPU was set at up. The cpu
# hierarchy is mounted again under the state directory: `ip netns exec` remounts /sys, so
# a launch agent running inside a host's namespace would not see /sys/fs/cgroup.
cgroup_of() {
  grep -q '^cpu=' "$state/settings" 2>/dev/null || return 0
  echo "$state/cpu/$name-h$1"
}

down() {
  local ns cg
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${name}-(h[0-9]+|sw)$" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns delete "$ns"
  done
  if mountpoint -q "$state/cpu" 2>/dev/null; then
    for cg in "$state/cpu/$name"-h*; do
      [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
    done
    umount "$state/cpu"
  fi
  local shm
  for shm in "$state"/shm-h*; do
    if [ -d "$shm" ]; then umount "$shm" 2>/dev/null || umount -l "$shm" 2>/dev/null || true; fi
  done
  rm -rf "$state"
}

up() {
  local hosts=$1 slots=$2 rate=${3:-2gbit} burst=${4:-256kb} latency=${5:-5ms} i
  [[ $hosts =~ ^[0-9]+$ && $hosts -ge 1 && $hosts -le 200 ]] || die "hosts must be 1..200, not '$hosts'"
  [[ $slots =~ ^[0-9]+$ && $slots -ge 1 ]] || die "slots must be at least 1, not '$slots'"
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  if [ "${ETR_CLUSTER_PIN:-0}" = 1 ] && [ "$hosts" -gt "$(nproc)" ]; then
    die "ETR_CLUSTER_PIN=1 needs at most one host per CPU ($(nproc))"
  fi
  down
  trap 'down; exit 1' ERR
  mkdir -p "$state"
  ip netns add "$name-sw"
  ip -n "$name-sw" link set lo up
  ip -n "$name-sw" link add br0 type bridge
  ip -n "$name-sw" link set br0 up
  : >"$state/hostfile"
  for ((i = 1; i <= hosts; i++)); do
    ip netns add "$name-h$i"
    ip -n "$name-h$i" link set lo up
    ip link add "$name-v$i" netns "$name-h$i" type veth peer name "p$i" netns "$name-sw"
    ip -n "$name-h$i" link set "$name-v$i" name eth0
    ip -n "$name-h$i" addr add "198.18.0.$i/24" dev eth0
    ip -n "$name-h$i" link set eth0 up
    ip -n "$name-sw" link set "p$i" master br0
    ip -n "$name-sw" link set "p$i" up
    # Shaped both ways: the host's egress, and the switch port's egress towards the host.
    ip netns exec "$name-h$i" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency "$latency"
    ip netns exec "$name-sw" tc qdisc add dev "p$i" root tbf rate "$rate" burst "$burst" latency "$latency"
    echo "198.18.0.$i slots=$slots" >>"$state/hostfile"
    mkdir -p "$state/shm-h$i"
    mount -t tmpfs -o size=2g,mode=1777 "$name-shm-h$i" "$state/shm-h$i"
  done
  printf 'hosts=%s\nslots=%s\nrate=%s\nburst=%s\n' "$hosts" "$slots" "$rate" "$burst" >"$state/settings"
  [ "${ETR_CLUSTER_PIN:-0}" = 1 ] && echo pin=1 >>"$state/settings"
  if [ -n "${ETR_CLUSTER_CPU:-}" ]; then
    echo "cpu=$ETR_CLUSTER_CPU" >>"$state/settings"
    local quota cg
    quota=$(awk -v f="$ETR_CLUSTER_CPU" 'BEGIN { printf "%d", f * 100000 }')
    mkdir -p "$state/cpu"
    if [ -d /sys/fs/cgroup/cpu ]; then
      mount -t cgroup -o cpu cgroup "$state/cpu"  # the v1 cpu hierarchy, once more
    else
      mount -t cgroup2 none "$state/cpu"
      echo +cpu >"$state/cpu/cgroup.subtree_control" 2>/dev/null || true
    fi
    for ((i = 1; i <= hosts; i++)); do
      cg=$(cgroup_of "$i")
      mkdir -p "$cg"
      if [ -f "$cg/cpu.cfs_quota_us" ]; then
        echo 100000 >"$cg/cpu.cfs_period_us"
        echo "$quota" >"$cg/cpu.cfs_quota_us"
      else
        echo "$quota 100000" >"$cg/cpu.max"
      fi
    done
  fi
  trap - ERR
  echo "sim_cluster: $hosts host(s) of $slots slot(s) at $rate (198.18.0.1-$hosts, namespaces $name-h1..$hosts)$(
    [ "${ETR_CLUSTER_PIN:-0}" = 1 ] && echo ", host I on CPU I-1")"
  echo "  run on host 1:  $self exec 1 CMD..."
  echo "  mpirun:         --hostfile $state/hostfile --mca plm_rsh_agent '$self rsh'"
  echo "                  --mca btl self,vader,tcp --mca btl_tcp_if_include 198.18.0.0/24 --mca oob_tcp_if_include 198.18.0.0/24"
  echo "  remove:         $self down"
}

# check: whether namespaces, veth pairs and tbf work here (exit 77 with the reason if not).
check() {
  local probe="$name-probe$$" why=""
  [ "$(id -u)" = 0 ] || why="not root (network namespaces need it)"
  command -v ip >/dev/null && command -v tc >/dev/null && command -v unshare >/dev/null ||
    why=${why:-"ip, tc or unshare is missing (iproute2, util-linux)"}
  if [ -z "$why" ]; then
    if ! ip netns add "$probe" 2>/dev/null; then
      why="cannot create a network namespace (ip netns add failed)"
    elif ! ip -n "$probe" link add vp0 type veth peer name vp1 2>/dev/null; then
      why="cannot create a veth pair"
    elif ! ip netns exec "$probe" tc qdisc add dev vp0 root tbf rate 1gbit burst 64kb latency 5ms 2>/dev/null; then
      why="the tbf qdisc is not available"
    fi
    ip netns delete "$probe" 2>/dev/null || true
  fi
  [ -z "$why" ] && return 0
  echo "sim_cluster: cannot simulate hosts here: $why"
  exit 77
}

host_ns() {
  [[ ${1:-} =~ ^[0-9]+$ ]] || die "'${1:-}' is not a host number"
  ip netns list | grep -q "^$name-h$1\b" || die "no host $1 (is the cluster up?)"
  echo "$name-h$1"
}

# The command prefix that keeps host I's processes on its CPU (when pinned).
pin() { grep -q '^pin=1' "$state/settings" 2>/dev/null && echo "taskset -c $(($1 - 1))"; }

# This shell (and so what it execs and starts) into host I's cpu cgroup, if there is one.
enter_cgroup() {
  local cg
  cg=$(cgroup_of "$1")
  [ -n "$cg" ] && echo $$ >"$cg/cgroup.procs"
  return 0
}

# exec I CMD...: CMD in host I's network namespace with hostname hI.
run_on() {
  local i=$1
  shift
  ip netns list | grep -q "^$name-h$i\b" || die "no host $i (is the cluster up?)"
  enter_cgroup "$i"
  exec $(pin "$i") ip netns exec "$name-h$i" unshare --uts /bin/sh -c \
    'mount --bind "$1" /dev/shm && hostname "$0" && shift && exec "$@"' "h$i" "$state/shm-h$i" "$@"
}

# rsh [ssh options] ADDRESS CMD...: as ssh would, the command is one string for a shell.
rsh() {
  while [[ ${1:-} == -* ]]; do shift; done  # (Open MPI may pass ssh options)
  local address=$1
  shift
  [[ $address =~ ^198\.18\.0\.([0-9]+)$ ]] || die "rsh: '$address' is not a simulated host"
  local i=${BASH_REMATCH[1]}
  # Like ssh, it cannot reach a host whose link is down (cut): exit 255, as ssh does.
  if ! ip -n "$name-h$i" link show eth0 2>/dev/null | grep -q "[<,]UP[,>]"; then
    echo "sim_cluster rsh: connect to host $address: No route to host" >&2
    exit 255
  fi
  enter_cgroup "$i"
  exec $(pin "$i") ip netns exec "$name-h$i" unshare --uts /bin/sh -c \
    "mount --bind $state/shm-h$i /dev/shm && hostname h$i; $*"
}

case "${1:-}" in
  up) shift; [ $# -ge 2 ] || die "usage: up HOSTS SLOTS [RATE [BURST]]"; up "$@" ;;
  down) down ;;
  exec) shift; [ $# -ge 2 ] || die "usage: exec HOST CMD..."; run_on "$@" ;;
  rsh) shift; rsh "$@" ;;
  hostfile) cat "$state/hostfile" ;;
  check) check ;;
  cut) ns=$(host_ns "${2:-}"); ip -n "$ns" link set eth0 down ;;
  heal) ns=$(host_ns "${2:-}"); ip -n "$ns" link set eth0 up ;;
  kill) ns=$(host_ns "${2:-}"); ip netns pids "$ns" | xargs -r kill -KILL 2>/dev/null || true ;;
  pids) ns=$(host_ns "${2:-}"); ip netns pids "$ns" ;;
  wipe) host_ns "${2:-}" >/dev/null; find "$state/shm-h$2" -mindepth 1 -delete ;;
  *) die "usage: $0 up|down|exec|rsh|hostfile|check|cut|heal|kill|pids|wipe ..." ;;
esac
