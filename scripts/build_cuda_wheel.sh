#!/usr/bin/env bash
# A llama-cpp-python wheel with CUDA for the lent GPUs (H100, H200: sm_90), built here on the CPU
# machines, so the GPU check spends its device minutes measuring rather than compiling (its own
# build there took 236 s of a 600-s call).
#
#   scripts/build_cuda_wheel.sh [OUT_DIR]     default gpu-bundle/cuda (half an hour on 2 cores)
#
# It leaves OUT_DIR/llama_cpp-cuda-sm90.tar.xz: the llama_cpp package with one copy of each
# library (the wheel stores every symlink as a copy, and twice: 107 MB) and its other names as
# symlinks, for the device tool's 64 MiB bundle.
#
# What it needs here: nvcc (CUDA 13.0, /usr/local/cuda: this machine's image has it) and the
# package index, for the llama-cpp-python source and cuBLAS's headers and libraries
# (nvidia-cublas 13.0, about 400 MB, unpacked into a copy of the toolkit; nothing is installed).
# The build links libcuda.so.1 (the driver) against a stub written from cuda.h's names, as the
# toolkit's own stubs/ does: the real driver on the GPU machine supplies them. The wheel needs
# the GPU machine's libcudart.so.13 and libcublas.so.13 (CUDA 13.x, which its image has);
# scripts/gpu-check.sh run finds them and unpacks the package instead of building.
# The flags are gpu-check.sh build_llama_cuda's (scripts/cuda_cmake_args.sh), flash attention off.
#   scripts/build_cuda_wheel.sh --pack-only [OUT_DIR]   pack a wheel built before (in $CUDA_BUILD_DIR)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT_DIR=${1:-$REPO/gpu-bundle/cuda}
[ "${1:-}" = --pack-only ] && OUT_DIR=${2:-$REPO/gpu-bundle/cuda}
LLAMA_VERSION=0.3.36
CUBLAS_VERSION=${CUBLAS_VERSION:-13.0.0.19}
ARCH=${CUDA_ARCH:-90}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
PY=${PYTHON:-$REPO/.venv/bin/python}
[ -x "$PY" ] || PY=python3
WORK=${CUDA_BUILD_DIR:-$(mktemp -d)}
# shellcheck source=scripts/cuda_cmake_args.sh
. "$REPO/scripts/cuda_cmake_args.sh"
say() { printf '\n== %s [%s]\n' "$*" "$(date +%T)"; }

toolkit() {  # a copy of the toolkit with cuBLAS and a driver stub in it: $WORK/cuda
  local tk=$WORK/cuda
  [ -x "$CUDA_HOME/bin/nvcc" ] || { echo "no nvcc under $CUDA_HOME (set CUDA_HOME)" >&2; exit 1; }
  say "toolkit: $("$CUDA_HOME/bin/nvcc" --version | tail -1), cuBLAS $CUBLAS_VERSION"
  rm -rf "$tk" && cp -a "$(readlink -f "$CUDA_HOME")" "$tk"
  "$PY" -m pip download -q --no-deps --only-binary=:all: "nvidia-cublas==$CUBLAS_VERSION" -d "$WORK/wheels"
  "$PY" -m zipfile -e "$WORK"/wheels/nvidia_cublas-"$CUBLAS_VERSION"-*.whl "$WORK/cublas"
  cp "$WORK"/cublas/nvidia/cu13/include/*.h "$tk/include/"
  cp "$WORK"/cublas/nvidia/cu13/lib/lib*.so.13 "$tk/lib/"
  local so
  for so in libcublas libcublasLt; do ln -sf "$so.so.13" "$tk/lib/$so.so"; done
  mkdir -p "$tk/lib/stubs"
  # every cu* name cuda.h declares or #defines (cuMemAlloc -> cuMemAlloc_v2 and both), as a
  # function of no body: the link only needs the names, the driver gives the code
  grep -oE '\bcu[A-Z][A-Za-z0-9_]*' "$tk/include/cuda.h" | sort -u \
    | awk '{ print "void " $1 "(void) {}" }' >"$WORK/cuda_stub.c"
  cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$tk/lib/stubs/libcuda.so" "$WORK/cuda_stub.c"
}

wheel() {
  local tk=$WORK/cuda
  say "llama-cpp-python $LLAMA_VERSION with CUDA for sm_$ARCH ($(nproc) cores)"
  export CUDAToolkit_ROOT=$tk CUDACXX=$tk/bin/nvcc PATH=$tk/bin:$PATH
  CMAKE_ARGS="$(cuda_cmake_args "$ARCH" OFF) -DCUDAToolkit_ROOT=$tk -DCMAKE_CUDA_COMPILER=$tk/bin/nvcc"
  export CMAKE_ARGS
  export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)}
  echo "CMAKE_ARGS=$CMAKE_ARGS"
  mkdir -p "$WORK/wheel"
  "$PY" -m pip wheel --no-cache-dir --no-deps --no-binary :all: -w "$WORK/wheel" "llama-cpp-python==$LLAMA_VERSION"
}

pack() {  # the package, each library once (its versioned file), its other names as symlinks
  local whl pkg=$WORK/pack/llama_cpp real base
  whl=$(ls "$WORK"/wheel/llama_cpp_python-"$LLAMA_VERSION"-*.whl)
  rm -rf "$WORK/pack" && mkdir -p "$WORK/pack"
  "$PY" -m zipfile -e "$whl" "$WORK/unzipped"
  cp -r "$WORK/unzipped/llama_cpp" "$WORK/pack/"
  rm -rf "$pkg/lib" && mkdir -p "$pkg/lib"
  for real in "$WORK"/unzipped/llama_cpp/lib/lib*.so.*.*; do  # libggml-cuda.so.0.25.3, ...
    base=$(basename "$real")
    cp "$real" "$pkg/lib/$base"
    ln -s "$base" "$pkg/lib/${base%%.so.*}.so.0"
    ln -s "$base" "$pkg/lib/${base%%.so.*}.so"
  done
  mkdir -p "$OUT_DIR"
  tar -cJf "$OUT_DIR/llama_cpp-cuda-sm$ARCH.tar.xz" -C "$WORK/pack" llama_cpp
}

check() {  # what the CUDA library links, and the archive's size
  say "$(du -h "$OUT_DIR/llama_cpp-cuda-sm$ARCH.tar.xz" | cut -f1) $OUT_DIR/llama_cpp-cuda-sm$ARCH.tar.xz"
  ls -la "$WORK/pack/llama_cpp/lib"
  readelf -d "$WORK"/pack/llama_cpp/lib/libggml-cuda.so.*.* | grep NEEDED
}

[ "${1:-}" = --pack-only ] && { pack; check; exit; }
toolkit
wheel
pack
check
echo "carry it with the bundle: scripts/gpu-check.sh run installs it where it is there"
