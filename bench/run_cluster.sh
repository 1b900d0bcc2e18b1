#!/usr/bin/env bash
# Benchmarks on simulated hosts (tests/cluster/sim_cluster.sh; needs root):
#
#   bench/run_cluster.sh BUILD_DIR [allreduce] [dp] [elastic]   (default: all three)
#
# allreduce: etr-bench allreduce with the flat ring, the hierarchical allreduce and
#   MPI_Allreduce (its reference column, measured beside each) at 16 and 64 MiB, on
#   2 hosts x 1 rank, 2 x 2 and 3 x 1, at 1 and 2 Gbit/s links; the link's rate is the
#   ceiling: each row gives the bytes a host sends to the others per op (the ring, ranks
#   placed host by host: 2(n-1)/n S; hierarchical: 2(H-1)/H S, MPI: not known) and
#   "link%" = those bytes / time / the link's rate. 2 x 1 runs each host on a CPU of its
#   own; 2 x 2 and 3 x 1 put 4 and 3 ranks (and the kernel's TCP work) on this machine's
#   2 cores: there the cores, not the links, may limit.
# dp: etr-bench dp across 2 hosts x 1 rank (a CPU each) at 2 Gbit/s: overlap on beside off.
# elastic: etr-bench elastic --cluster: etr-run with etr-train (configs/demo.pbtxt) on 2
#   hosts x 1 rank (a CPU each, 2 Gbit/s): a cold start and the steady step as the
#   references, then kill -9 of the rank on host 2, host 2 lost (every process on it
#   killed, its link cut, discovery drops it; the job goes on on host 1), and host 2 back
#   (link up, listed again; the job grows onto it); ETR_BENCH_ROUNDS rounds (default 3).
# ETR_BENCH_RATES (default "1gbit 2gbit") changes the link rates.
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [allreduce] [dp] [elastic]}" && pwd)
shift
what=${*:-allreduce dp elastic}
here=$(cd "$(dirname "$0")/.." && pwd)
sim=$here/tests/cluster/sim_cluster.sh
export ETR_CLUSTER_NAME=etrb$$
"$sim" check
work=$(mktemp -d)
trap '"$sim" down >/dev/null; rm -rf "$work"' EXIT

# up HOSTS SLOTS RATE PIN
up() { ETR_CLUSTER_PIN=$4 "$sim" up "$1" "$2" "$3" 256kb 5ms >/dev/null; }
run() {  # HOSTLIST NP ARGS...: etr-mpirun from host 1 across HOSTLIST
  local hosts=$1 np=$2
  shift 2
  "$sim" exec 1 "$build/etr-mpirun" -np "$np" --bind-to none --host "$hosts" \
    --mca plm_rsh_agent "$sim rsh" "$@"
}

allreduce() {
  local rate gbit layout hosts per np pin a list i
  echo "# etr-bench allreduce across simulated hosts: f32 sum, median of 3 reps; busbw GB/s = S/t x 2(n-1)/n"
  echo "# host bytes = bytes each host sends to the others per op (model); link% = host bytes / t / link rate"
  printf '# %-7s %-9s %9s  %-28s %-28s %-12s %s\n' link layout size "ring: busbw host-bytes link%" \
    "hier: busbw host-bytes link%" "MPI: busbw" "hier/ring hier/MPI"
  for rate in ${ETR_BENCH_RATES:-1gbit 2gbit}; do
    gbit=${rate%gbit}
    for layout in 2x1 2x2 3x1; do
      hosts=${layout%x*} per=${layout#*x} np=$((hosts * per))
      pin=0
      [ "$np" -le "$(nproc)" ] && pin=1
      up "$hosts" "$per" "$rate" "$pin"
      list=""
      for ((i = 1; i <= hosts; i++)); do list+="${list:+,}198.18.0.$i:$per"; done
      for a in ring hier; do
        run "$list" "$np" "$build/bench/etr-bench" allreduce --algo "$a" --stream-bytes 0 --reps 3 \
          --min-bytes 16MiB --max-bytes 64MiB --json "$work/$layout-$rate-$a.json" >"$work/out" 2>&1 ||
          { cat "$work/out"; exit 1; }
      done
      python3 - "$work" "$layout" "$rate" "$gbit" "$hosts" "$np" <<'EOF'
import json, sys
work, layout, rate, gbit, hosts, n = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
link = gbit * 1e9 / 8  # bytes/s
rows = {a: {r["bytes"]: r for r in json.load(open(f"{work}/{layout}-{rate}-{a}.json"))["rows"]} for a in ("ring", "hier")}
for size in sorted(rows["ring"]):
    cells, bw = [], {}
    for a, factor in (("ring", 2 * (n - 1) / n), ("hier", 2 * (hosts - 1) / hosts)):
        r = rows[a][size]
        t = r["etr"]["time_us"] * 1e-6
        host_bytes = factor * size
        bw[a] = r["etr"]["busbw"]
        cells.append(f"{bw[a]:6.3f} {host_bytes / 2**20:7.1f} MiB {100 * host_bytes / t / link:5.0f}%")
    mpi = (rows["ring"][size]["mpi"]["busbw"] + rows["hier"][size]["mpi"]["busbw"]) / 2
    print(f"  {rate:<7} {layout + ' (' + str(n) + ')':<9} {size // 2**20:6d} MiB  {cells[0]:<28} {cells[1]:<28} {mpi:6.3f}       "
          f"{bw['hier'] / bw['ring']:5.2f}x {bw['hier'] / mpi:5.2f}x")
EOF
    done
  done
}

dp() {
  echo "# etr-bench dp across 2 simulated hosts x 1 rank (a CPU each), 2 Gbit/s links"
  up 2 1 2gbit 1
  run 198.18.0.1:1,198.18.0.2:1 2 "$build/bench/etr-bench" dp 2>&1 | grep -v "^--\|^ *$\|^\[etr"
}

elastic() {
  # etr-bench elastic makes (and removes) a cluster of its own.
  "$build/bench/etr-bench" elastic --cluster "$sim" --rounds "${ETR_BENCH_ROUNDS:-3}" 2>&1 | grep -v "^\[etr"
}

for w in $what; do
  case $w in
    allreduce) allreduce ;;
    dp) dp ;;
    elastic) elastic ;;
    *) echo "unknown benchmark '$w' (allreduce, dp, elastic)" >&2; exit 2 ;;
  esac
done
