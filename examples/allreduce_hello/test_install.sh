#!/bin/sh
# The "install" test (examples/CMakeLists.txt): installs an etr build tree into a
# temporary prefix, builds examples/allreduce_hello against it with find_package(etr)
# as a user's project would, and runs it on 2 ranks with the installed etr-mpirun.
# Passes only if all of that works (and the package exports etr::etr and its four
# layers); the temporary directory is removed either way.
#
# Usage: test_install.sh <etr build dir> <example source dir> <cmake> <generator>
#                        <C++ compiler> <build type>
set -eu
build_dir=$1 src_dir=$2 cmake=$3 generator=$4 cxx=$5 build_type=$6

tmp=$(mktemp -d "${TMPDIR:-/tmp}/etr-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "== install $build_dir -> $tmp/prefix"
"$cmake" --install "$build_dir" --prefix "$tmp/prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; exit 1; }

echo "== the installed package exports the whole and its layers"
targets=$(find "$tmp/prefix" -name etrTargets.cmake -print -quit)
for t in etr::etr etr::runtime etr::collectives etr::checkpoint etr::parallel; do
  grep -q "^add_library($t " "$targets" || { echo "FAIL: $t is not exported"; exit 1; }
done

echo "== configure $src_dir against the installed etr"
"$cmake" -S "$src_dir" -B "$tmp/build" -G "$generator" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE="$build_type"
echo "== build"
"$cmake" --build "$tmp/build"

echo "== run on 2 ranks"
"$tmp/prefix/bin/etr-mpirun" -np 2 "$tmp/build/allreduce_hello"
