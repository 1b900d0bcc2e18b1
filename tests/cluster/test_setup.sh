# Sourced by the cluster tests:  source "$(dirname "$0")/test_setup.sh" PREFIX "$@"
# Sets build, config, compare (the tests' arguments: BUILD_DIR CONFIG CKPT_COMPARE), sim
# (sim_cluster.sh) and work (a temporary directory); names the test's cluster PREFIX<pid>
# (ETR_CLUSTER_NAME); exits 77 with the reason where no cluster can be made (ctest: skipped).
# At exit: the test's on_exit (when it defines one), then the cluster and work are removed.
# fail MESSAGE: says FAIL and exits 1.
set -u
build=$2 config=$3 compare=$4
sim=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/sim_cluster.sh
export ETR_CLUSTER_NAME=$1$$
"$sim" check || exit 77
work=$(mktemp -d)
cleanup() {
  if declare -F on_exit >/dev/null; then on_exit; fi
  "$sim" down
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
