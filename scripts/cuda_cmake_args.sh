# The CMake flags of a CUDA llama.cpp build, one list for the build on the GPU machine
# (gpu-check.sh build_llama_cuda) and the one made here (build_cuda_wheel.sh), so the prebuilt
# package is the build the check would make. Sourced; prints them.
#   cuda_cmake_args ARCH FA      e.g. cuda_cmake_args 90 OFF
# CPU flags as ./dev sets them where a VM reports AMX it does not allow; the GPU does the work.
cuda_cmake_args() {
  echo "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=$1-real -DGGML_CUDA_FA=$2 \
-DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON \
-DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF"
}
