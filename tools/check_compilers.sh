#!/usr/bin/env bash
# Portability check (`make check-compilers`, run by .ci/run):
#  1. clang 16 (Debian's) compiles the core and every plugin with
#     -DDRAGON_WERROR=ON: warning-free with a second compiler (the cuda
#     plugin when nvcc is on PATH, clang 16 as nvcc's host compiler);
#  2. Debian's aarch64 cross compiler configures and compiles the core,
#     cpu_eigen and vision_ops for aarch64 (compile and link only: nothing
#     runs). mkldnn is x86-64 only here (the oneDNN wheel it builds against
#     is x86-64 only).
# gcc 12 is covered by `make install` itself (-Werror). The compilers come
# from apt when missing; a machine that cannot install them fails here, it
# does not skip. Objects go through ccache, so a rerun takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=$ROOT/.venv
VPY=$VENV/bin/python
export PATH="$VENV/bin:$PATH"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

need=()
command -v clang++-16 >/dev/null || need+=(clang-16)
[ -e /usr/lib/llvm-16/lib/libomp.so ] || need+=(libomp-16-dev)
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
if [ ${#need[@]} -gt 0 ]; then
  echo "check-compilers: installing ${need[*]} (apt)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get install -y -q "${need[@]}" >/dev/null || {
    $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q "${need[@]}" >/dev/null; }
fi

SITE=$($VPY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PREFIX="$SITE/dragon_sdk;$($VPY -m pybind11 --cmakedir)"

# build NAME SOURCE [cmake args...]: configure and compile one project.
build() {
  local name=$1 src=$2; shift 2
  local dir=$ROOT/build/compilers/$name
  mkdir -p "$ROOT/build/compilers"
  echo "check-compilers: $name"
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER_LAUNCHER="$VENV/bin/ccache" -DDRAGON_WERROR=ON \
    -DPython_EXECUTABLE="$VPY" -DCMAKE_PREFIX_PATH="$PREFIX" "$@" >"$dir.log" 2>&1 \
    || { cat "$dir.log"; exit 1; }
  cmake --build "$dir" >>"$dir.log" 2>&1 || { cat "$dir.log"; exit 1; }
  # -Werror makes any warning fail the build; also refuse one that was only
  # printed (e.g. a -Wno-error category).
  if grep -n "warning:" "$dir.log"; then echo "check-compilers: $name has warnings"; exit 1; fi
}

CLANG=(-DCMAKE_CXX_COMPILER=clang++-16 -DCMAKE_C_COMPILER=clang-16)
build clang16-core dragon_core "${CLANG[@]}"
build clang16-cpu_eigen plugins/cpu_eigen "${CLANG[@]}"
build clang16-mkldnn plugins/mkldnn "${CLANG[@]}"
build clang16-vision_ops plugins/vision_ops "${CLANG[@]}" -DDRAGON_VISION_CUDA=OFF
# The cuda plugin, when nvcc is on PATH (as for `make install`): clang 16
# compiles its C++ files and is nvcc's host compiler for the .cu files
# (CUDA 13 supports clang 3.3-20 as host compiler). nvcc hands clang one
# preprocessed file holding CUDA's own headers, so -Wunused-function fires
# on their unused `static inline` helpers (cuda_fp16.hpp): it is off for
# the .cu files only. Only PTX is generated (compute_90): the check is the
# host compiler's, and it skips ptxas. The host compiler is given as
# CUDAHOSTCXX, not -DCMAKE_CUDA_HOST_COMPILER: the plugin's check_language
# (CUDA) probes nvcc before that cache entry is read, and CMake would keep
# the default host compiler (gcc); the check below makes sure it did not.
if command -v nvcc >/dev/null; then
  export CUDAHOSTCXX=clang++-16
  build clang16-cuda plugins/cuda "${CLANG[@]}" \
    -DCMAKE_CUDA_COMPILER_LAUNCHER="$VENV/bin/ccache" -DCMAKE_CUDA_ARCHITECTURES=90-virtual \
    -DCMAKE_CUDA_FLAGS=-Xcompiler=-Wno-unused-function
  unset CUDAHOSTCXX
  grep -q 'CMAKE_CUDA_HOST_COMPILER_ID "Clang"' "$ROOT"/build/compilers/clang16-cuda/CMakeFiles/*/CMakeCUDACompiler.cmake \
    || { echo "check-compilers: nvcc's host compiler is not clang 16"; exit 1; }
fi

ARM=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64
     -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc)
# The core compiles against this Python's headers (no aarch64 Python here:
# its pyconfig.h is the host's, with the same LP64 sizes as aarch64).
PYINC=$($VPY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
build aarch64-core dragon_core "${ARM[@]}" -DPython_INCLUDE_DIR="$PYINC" \
  -DPython_SOABI="cpython-$($VPY -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')-aarch64-linux-gnu"
build aarch64-cpu_eigen plugins/cpu_eigen "${ARM[@]}"
build aarch64-vision_ops plugins/vision_ops "${ARM[@]}" -DDRAGON_VISION_CUDA=OFF
# What was built is aarch64 code, and cpu_eigen has no x86 ISA builds in it.
for so in "$ROOT"/build/compilers/aarch64-*/*.so; do
  aarch64-linux-gnu-readelf -h "$so" | grep -q "Machine:.*AArch64" || { echo "check-compilers: $so is not aarch64"; exit 1; }
done
if aarch64-linux-gnu-nm -C "$ROOT"/build/compilers/aarch64-cpu_eigen/libdragon_cpu_eigen.so \
    | grep -q "gemm_v[234]\|ew_v[234]"; then
  echo "check-compilers: aarch64 cpu_eigen holds x86 ISA builds"; exit 1
fi
echo "check-compilers: clang 16 and aarch64 builds are clean"
