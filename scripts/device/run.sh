#!/usr/bin/env bash
# On a lent NVIDIA machine (scripts/device/prepare.sh filled .device/ first; no network there):
#
#   bash scripts/device/run.sh            # install, the GPU lane, the measurements
#   bash scripts/device/run.sh lane       # install and the lane only
#   bash scripts/device/run.sh measure    # install and the measurements only
#   bash scripts/device/run.sh trained    # install and the trained drafters' costs only
#   bash scripts/device/run.sh lane,measure   # parts, comma-separated
#
# 1. Install: scripts/install.py --here --offline: it chooses CUDA (nvcc and a GPU are there) and
#    takes a wheel carried in .device/wheels (built elsewhere with .device/cmake_args.txt's flags),
#    or builds llama.cpp from the carried sdist with the machine's build tools.
# 2. The GPU lane (pytest --gpu-lane, tests/gpu_lane.py) with every layer on the GPU.
# 3. The measurements (scripts/device/measure.py): Tandem against llama-bench, llama-server and
#    llama-speculative-simple, costs, the memory fit; JSON under $OUT.
# 4. The trained drafters' costs (scripts/trained_cost.py: EAGLE-3 beside an 8B shape, DFlash
#    beside a Qwen3-8B shape), every layer on the GPU; printed into run.log.
# Everything it prints also goes to $OUT/run.log; each part says how long it took.
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
wants() { [ "$what" = all ] || [[ ",$what," == *",$1,"* ]]; }
OUT=${OUT:-/tmp/device-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/run.log") 2>&1
t0=$SECONDS
say() { echo "[device] $*"; }
took() { say "$1: $(( SECONDS - $2 )) s"; }
export PYTHONUNBUFFERED=1 TANDEM_TEST_MODELS=/tmp/tandem-models
mkdir -p "$TANDEM_TEST_MODELS" && cp .device/models/* "$TANDEM_TEST_MODELS/"
[ -f .device/bin.tar.xz ] && tar -C .device -xJf .device/bin.tar.xz  # llama.cpp's programs
nvidia-smi | tee "$OUT/nvidia-smi.txt" | head -12
say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"

# CUDA's runtime libraries where this machine has them (the toolkit, or PyTorch's wheels).
for lib in libcudart.so.13 libcublas.so.13; do
  dir=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets /opt /usr/lib -name "$lib" -print -quit 2>/dev/null | xargs -r dirname)
  [ -n "$dir" ] && export LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"
done

# 1. install
t=$SECONDS
if [ -f .device/cmake_args.txt ]; then
  export CMAKE_ARGS="$(cat .device/cmake_args.txt)" TANDEM_WHEEL_CACHE=$PWD/.device/wheels
  for folder in .device/wheels/*/; do python3 scripts/device/wheel_parts.py join "$folder"; done
fi
python3 scripts/install.py --here --offline .device/whl || { say "install failed"; exit 1; }
python3 -m pip install -q --no-index --find-links .device/whl gguf >/dev/null
site=$(python3 -c "import llama_cpp, pathlib; print(pathlib.Path(llama_cpp.__file__).parent / 'lib')")
export LD_LIBRARY_PATH="$site:$PWD/.device/bin:${LD_LIBRARY_PATH:-}"  # (llama.cpp's tools link these)
# llama.cpp's tools carried in .device/bin (rpc-server, llama-bench) where tandem.bench.llama_tools
# looks for its cached build, so that the RPC test and the bench find them without building.
tools=$(python3 -c "from tandem.bench.llama_tools import _folder; print(_folder('cpu'))" 2>/dev/null) &&
  mkdir -p "$tools" && for p in ggml-rpc-server llama-bench llama-server; do
    [ -e ".device/bin/$p" ] && ln -sf "$PWD/.device/bin/$p" "$tools/$p"; done
took "install" "$t"

rc=0
if wants lane; then
  t=$SECONDS
  # (The RPC test's rpc-server is the one carried in .device/bin, linked above.)
  # (tests/engine alone: the lane's tests are there, and the server's import openai, not carried.)
  # shellcheck disable=SC2086  # (LANE_ARGS: more pytest arguments)
  timeout "${LANE_TIMEOUT_S:-200}" python3 -m pytest tests/engine --gpu-lane -p no:cacheprovider -q -rs \
    --junitxml="$OUT/lane${LANE_NAME:-}.xml" \
    ${LANE_ARGS:-} || { lane_rc=$?; rc=1; say "the GPU lane's pytest exited with $lane_rc"; }
  took "the GPU lane" "$t"
fi
if wants measure; then
  t=$SECONDS
  # shellcheck disable=SC2086  # (MEASURE_ARGS: more options, e.g. smaller shapes for a dry run)
  python3 scripts/device/measure.py --out "$OUT/gpu-measure.json" --llama-bin .device/bin \
    --budget-s "${MEASURE_BUDGET_S:-270}" ${MEASURE_ARGS:-} || rc=1
  took "the measurements" "$t"
fi
if wants trained; then
  t=$SECONDS
  # shellcheck disable=SC2086  # (TRAINED_ARGS: more options, e.g. --kind dflash)
  timeout "${TRAINED_TIMEOUT_S:-150}" python3 scripts/trained_cost.py --gpu-layers -1 --runs 2 --tokens 32 \
    --clean ${TRAINED_ARGS:-} || rc=1
  took "the trained drafters" "$t"
fi
took "in all" "$t0"
exit $rc
