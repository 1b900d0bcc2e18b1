# Sourced by scripts/device_bundle.sh and scripts/device_check.sh: which shared libraries
# the GPU machine brings itself, and which Open MPI plugins stay home. One list for both,
# so that what the bundle leaves out is what the check accepts from the machine.

# glibc's and the C++ runtime's (the GPU machine's are newer and backward compatible).
DEVICE_SYSTEM_LIBS='^(ld-linux.*|linux-vdso.*|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
# CUDA's: the driver's, and the toolkit's that the machine's pip (or toolkit) supplies.
DEVICE_CUDA_LIBS='^(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia-.*|libnvrtc.*|libcudnn.*|libnvJitLink|libcufft|libcurand|libcusparse|libcusolver)\.so'
# The machine's RDMA libraries, which NCCL's InfiniBand transport opens by itself.
DEVICE_RDMA_LIBS='^(libibverbs|libmlx[45]|libnl-3|libnl-route-3|librdmacm|libefa)\.so'
# Open MPI plugins that need one of these are left out: networks a single host lacks.
DEVICE_NETWORK_LIBS='^(libucp|libuct|libucs|libucm|libfabric|libibverbs|librdmacm|libpsm2|libpsm_infinipath|libinfinipath|libefa|libnl-3|libnl-route-3|liboshmem)\.so'

# is_elf FILE: true for an ELF object (a program or a shared library).
is_elf() { [[ $(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ') == '177ELF' ]]; }
