#!/bin/sh
# The ctest layer_upward_call (tests/CMakeLists.txt): configures the project of
# tests/layers/ against this etr build tree's layers (layer_checks/package/), then
#   1. builds runtime_piece_with_parallel, which must link (the whole runtime-level
#      library beside etr::parallel, the layer it calls), and
#   2. builds runtime_piece_link_check, which must fail, and on an undefined
#      describe_partition (parallel/pipeline_partition.h): the upward call.
# Its work directory is <etr build>/layer_checks/upward_call (kept: a rerun reconfigures
# in a second and recompiles nothing).
#
# Usage: upward_call_test.sh <etr build dir> <its libetr_parallel.a> <etr source dir>
#                            <cmake> <generator> <C compiler> <C++ compiler> <build type>
set -eu
build_dir=$1 parallel_lib=$2 src_dir=$3 cmake=$4 generator=$5 cc=$6 cxx=$7 build_type=$8
[ -f "$parallel_lib" ] || { echo "FAIL: $parallel_lib is not built (build etr first)" >&2; exit 1; }
work=$build_dir/layer_checks/upward_call
mkdir -p "$work"

echo "== configure tests/layers against $build_dir/layer_checks/package"
"$cmake" -S "$src_dir/tests/layers" -B "$work/build" -G "$generator" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type" \
  -Detr_DIR="$build_dir/layer_checks/package" -DETR_SOURCE_DIR="$src_dir" \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }

echo "== the runtime-level library beside etr::parallel must link"
"$cmake" --build "$work/build" --target runtime_piece_with_parallel

echo "== its link check, with the runtime layer only, must fail on describe_partition"
if "$cmake" --build "$work/build" --target runtime_piece_link_check >"$work/check.log" 2>&1; then
  cat "$work/check.log"
  echo "FAIL: runtime_piece_link_check linked: the upward call went unnoticed" >&2
  exit 1
fi
if ! grep -Eq "undefined (reference to|symbol).*describe_partition" "$work/check.log"; then
  cat "$work/check.log"
  echo "FAIL: runtime_piece_link_check failed, but not on the undefined describe_partition" >&2
  exit 1
fi
grep -E "undefined (reference to|symbol).*describe_partition" "$work/check.log" | head -n 1
echo "OK: the upward call fails the layer's link check"
