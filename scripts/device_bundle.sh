#!/usr/bin/env bash
# Builds etr for a GPU machine and packs it into one self-contained archive
# (docs/gpu.md, "The device bundle"). The GPU machine has the NVIDIA driver, CUDA's
# libraries (from pip) and a glibc, but no Open MPI, OpenBLAS, protobuf or xxHash, and no
# package registry: everything else a program needs travels in the archive.
#
#   scripts/device_bundle.sh                    # build build-device/, write .device/bundle.tar.xz
#   scripts/device_bundle.sh --build-dir build  # pack an existing build (the bundle test does)
#   scripts/device_bundle.sh --out FILE         # another archive path
#
# What goes in:
#   bin/      the programs (etr-train, etr-run, etr-ckpt, etr-tokenize, etr-bench), stripped
#   tests/    every test labelled `gpu` (as ctest lists it), stripped, with tests.tsv:
#             name, ranks (1: run as an MPI singleton; N: under mpirun -np N), timeout
#   lib/      libetr_sentencepiece.so (dlopened by the programs from bin/../lib) and
#             the closure of their shared libraries by SONAME, minus glibc, libstdc++,
#             libgcc_s and CUDA's own (libcuda, libcudart, libcublas*, libnccl, ...)
#   ompi/     Open MPI relocatable under OPAL_PREFIX: bin/orterun (mpirun), bin/orted, the
#             plugins a single host needs (none that needs InfiniBand, UCX, libfabric or
#             PSM), share/openmpi; pmix/: PMIx's plugins and help files (PMIX_PREFIX)
#   configs/  the repository's configs (the check's smoke run uses configs/tiny.pbtxt)
#   BUNDLE    what was built: commit, date, compiler flags, CUDA targets, nvcc version
#
# The default build (build-device/) targets a portable CPU (ETR_DEVICE_CPU_ARCH, default
# x86-64-v3: AVX2 and FMA; never `native`, the GPU machine's CPU differs) and CUDA sm_90
# machine code plus compute_90 PTX. Environment: ETR_JOBS, ETR_DEVICE_CPU_ARCH,
# ETR_BUNDLE_XZ_OPT (xz's options, default "-6 -T0"; the bundle test packs with -0).
set -euo pipefail
# A command that fails without a message of its own still says where (set -e would end the
# script silently).
trap 'echo "device_bundle: error: line $LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR
ETR_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir=""
out="$ETR_ROOT/.device/bundle.tar.xz"
while (($#)); do
  case $1 in
    --build-dir) build_dir=$(realpath "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "device_bundle: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "device_bundle: error: $*" >&2; exit 1; }

PROGRAMS=(etr-train etr-run etr-ckpt etr-tokenize etr-bench)
# DEVICE_SYSTEM_LIBS, DEVICE_CUDA_LIBS (not packed: the GPU machine brings them),
# DEVICE_NETWORK_LIBS (the Open MPI plugins that need them stay home), is_elf.
source "$ETR_ROOT/scripts/device_libs.sh"

# --- Build -------------------------------------------------------------------------------
if [[ -z $build_dir ]]; then
  ETR_SETUP_BUILD=0 source "$ETR_ROOT/scripts/setup.sh"
  build_dir="$ETR_ROOT/build-device"
  arch="${ETR_DEVICE_CPU_ARCH:-x86-64-v3}"
  [[ $arch == native ]] && die "ETR_DEVICE_CPU_ARCH=native would tie the bundle to this CPU"
  if [[ ! -f $build_dir/build.ninja ]]; then
    mkdir -p "$build_dir"
    cmake -S "$ETR_ROOT" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release $(etr_compiler_launcher) \
      -DETR_CPU_ARCH="$arch" -DETR_WITH_CUDA=ON -DETR_BUILD_TESTS=ON \
      >"$build_dir/configure.log" 2>&1 || { cat "$build_dir/configure.log" >&2; exit 1; }
  fi
fi
[[ -f $build_dir/CMakeCache.txt ]] || die "$build_dir is not a configured build tree"

# The gpu tests as ctest knows them: name, ranks, timeout, executable. (The listing is
# taken once more after a failure: under a running ctest of the same tree, as the
# device_bundle test runs, it can fail once; a silent exit here would say nothing.)
list_gpu_tests() { (cd "$build_dir" && ctest -N -L gpu --show-only=json-v1); }
gpu_json=$(list_gpu_tests 2>/dev/null) || { sleep 2; gpu_json=$(list_gpu_tests 2>/dev/null); } ||
  die "ctest -N -L gpu failed twice in $build_dir: its gpu tests cannot be listed"
gpu_tests=$(python3 -c '
import json, os, sys
for t in json.load(sys.stdin)["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    # An executable not built yet has no command: etr_gpu_test names it after the test,
    # in the test folder.
    cmd = t.get("command") or [os.path.join(props["WORKING_DIRECTORY"], t["name"])]
    ranks, exe = 1, cmd[0]
    if os.path.basename(cmd[0]) == "etr-mpirun":
        ranks = int(cmd[cmd.index("-np") + 1])
        exe = [c for c in cmd[1:] if os.path.isabs(c)][-1]
    print(t["name"], ranks, int(props.get("TIMEOUT", 300)), exe, sep="\t")
' <<<"$gpu_json") || die "the gpu tests of $build_dir could not be read from ctest's listing"

[[ -n $gpu_tests ]] ||
  die "$build_dir has no test labelled gpu: it was configured without CUDA (no nvcc or NCCL found)"
if [[ $build_dir == "$ETR_ROOT/build-device" ]]; then
  targets=("${PROGRAMS[@]}" etr_sentencepiece)
  while IFS=$'\t' read -r _ _ _ exe; do targets+=("$(basename "$exe")"); done <<<"$gpu_tests"
  echo "device_bundle: building ${targets[*]} in $build_dir"
  ninja -C "$build_dir" -j "${ETR_JOBS:-$(nproc)}" --quiet "${targets[@]}"
fi

# --- Stage -------------------------------------------------------------------------------
stage=$(mktemp -d "${TMPDIR:-/tmp}/etr-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,tests,lib,configs}

find_program() {  # the program's path in the build tree
  local p
  p=$(find "$build_dir" -path "$build_dir/CMakeFiles" -prune -o -type f -name "$1" -perm -u+x -print -quit)
  [[ -n $p ]] || die "$1 is not built in $build_dir"
  echo "$p"
}
for prog in "${PROGRAMS[@]}"; do cp "$(find_program "$prog")" "$stage/bin/"; done
# etr's SentencePiece shim, which the programs dlopen from <bin>/../lib.
cp "$(find_program libetr_sentencepiece.so)" "$stage/lib/"
: >"$stage/tests/tests.tsv"
while IFS=$'\t' read -r name ranks timeout exe; do
  [[ -x $exe ]] || die "the gpu test $name is not built ($exe)"
  cp "$exe" "$stage/tests/"
  printf '%s\t%s\t%s\t%s\n' "$name" "$ranks" "$timeout" "$(basename "$exe")" >>"$stage/tests/tests.tsv"
done <<<"$gpu_tests"
cp "$ETR_ROOT"/configs/*.pbtxt "$stage/configs/"

# Open MPI, laid out under its own prefix as Debian installs it under /usr, so that
# OPAL_PREFIX=<bundle>/ompi relocates every directory derived from the prefix.
ompi_pkglibdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
ompi_pkgdatadir=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
ompi_prefix=$(ompi_info --path prefix --parsable | sed -n 's/^path:prefix://p')
[[ -d $ompi_pkglibdir && -d $ompi_pkgdatadir ]] || die "Open MPI's plugin or data folder not found"
ompi="$stage/ompi"
mkdir -p "$ompi/bin" "$ompi${ompi_pkglibdir#"$ompi_prefix"}" "$(dirname "$ompi${ompi_pkgdatadir#"$ompi_prefix"}")" "$ompi/etc"
cp "$(command -v orterun)" "$(command -v orted)" "$ompi/bin/"
ln -s orterun "$ompi/bin/mpirun"
cp -r "$ompi_pkgdatadir" "$ompi${ompi_pkgdatadir#"$ompi_prefix"}"
# Debian's /etc/openmpi/openmpi-mca-params.conf, which the check names through
# OMPI_MCA_mca_base_param_files (sysconfdir does not follow OPAL_PREFIX).
[[ -f /etc/openmpi/openmpi-mca-params.conf ]] && cp /etc/openmpi/openmpi-mca-params.conf "$ompi/etc/"
# PMIx (Open MPI 4.1 on Debian uses the external libpmix2): its plugins and help files.
# (awk reads all of ldconfig's list: leaving early would end ldconfig with SIGPIPE, which
# pipefail turns into this script's failure)
pmix_lib=$(ldconfig -p | awk '$1 == "libpmix.so.2" && !found {print $NF; found = 1}')
pmix_home=""
if [[ -n $pmix_lib ]]; then
  pmix_home=$(dirname "$(dirname "$(realpath "$pmix_lib")")")
  mkdir -p "$stage/pmix/lib"
  [[ -d $pmix_home/lib/pmix ]] && cp -r "$pmix_home/lib/pmix" "$stage/pmix/lib/"
  [[ -d $pmix_home/share ]] && cp -r "$pmix_home/share" "$stage/pmix/"
  [[ -d $pmix_home/etc ]] && cp -r "$pmix_home/etc" "$stage/pmix/"
fi

# Each object's needed libraries: SONAME <tab> path, or SONAME <tab> "not found".
needed() {
  ldd "$1" 2>/dev/null | awk '/=>/ { if ($3 == "not") print $1 "\tnot found"; else print $1 "\t" $3 }'
}
kept=0 dropped=()
for plugin in "$ompi_pkglibdir"/*.so; do
  if needed "$plugin" | cut -f1 | grep -Eq "$DEVICE_NETWORK_LIBS"; then
    dropped+=("$(basename "$plugin" .so)")
  else
    cp "$plugin" "$ompi${ompi_pkglibdir#"$ompi_prefix"}/"
    kept=$((kept + 1))
  fi
done
echo "device_bundle: Open MPI plugins: $kept kept; left out (they need a network library): ${dropped[*]:-none}"

# The closure of shared libraries, by SONAME, into lib/.
declare -A have=()
missing=()
while IFS=$'\t' read -r soname path; do
  [[ -n ${have[$soname]:-} ]] && continue
  have[$soname]=1
  if [[ $soname =~ $DEVICE_SYSTEM_LIBS || $soname =~ $DEVICE_CUDA_LIBS ]]; then continue; fi
  [[ $path == "not found" ]] && { missing+=("$soname"); continue; }
  cp -L "$path" "$stage/lib/$soname"
  echo -e "$soname\t$(realpath "$path")" >>"$stage/lib/SOURCES.tsv"
done < <(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -print |
         while read -r f; do is_elf "$f" && needed "$f"; done | sort -u -t$'\t' -k1,1)
((${#missing[@]} == 0)) || die "libraries not found on this machine: ${missing[*]}"

# Strip what was built here (Debian's libraries are stripped already).
strip --strip-unneeded "$stage"/bin/* "$stage"/tests/*_test* "$stage/lib/libetr_sentencepiece.so"

{
  echo "commit: $(git -C "$ETR_ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(
    git -C "$ETR_ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "build tree: $build_dir"
  echo "cpu arch: $(sed -n 's/^ETR_CPU_ARCH:STRING=//p' "$build_dir/CMakeCache.txt")"
  echo "cuda targets: $(sed -n 's/^ETR_CUDA_ARCHITECTURES:STRING=//p' "$build_dir/CMakeCache.txt")"
  echo "nvcc: $(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' "$build_dir/CMakeCache.txt")"
  echo "open mpi: $(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p')"
  echo "pmix home: ${pmix_home:-none}"
} >"$stage/BUNDLE"

mkdir -p "$(dirname "$out")"
trap 'rm -rf "$stage" "$out.tmp"' EXIT
XZ_OPT="${ETR_BUNDLE_XZ_OPT:--6 -T0}" tar -C "$stage" -cJf "$out.tmp" .
size=$(stat -c %s "$out.tmp")
# Refused before it replaces the last good bundle: at most 64 MiB travel with a device call.
((size < 60 * 1024 * 1024)) || die "the bundle would be $((size >> 20)) MiB; at most 60 MiB may travel to the GPU machine"
mv "$out.tmp" "$out"
echo "device_bundle: wrote $out ($((size >> 20)) MiB; $(du -sh "$stage" | cut -f1) unpacked): ${#PROGRAMS[@]} programs, $(wc -l <"$stage/tests/tests.tsv") gpu tests, $(ls "$stage/lib" | grep -vc SOURCES) libraries"
