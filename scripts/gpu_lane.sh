#!/usr/bin/env bash
# The GPU lane: the engine tests that matter on a GPU (pytest's `gpu` marker), on a real GPU
# backend without a GPU: llama.cpp's Vulkan backend on Mesa's CPU Vulkan driver (lavapipe,
# "llvmpipe"), every layer offloaded. CI runs it after the suite; run it yourself with
#
#     scripts/gpu_lane.sh                 # as root on Debian/Ubuntu, or with the packages below
#     scripts/gpu_lane.sh -k mtp          # more arguments go to pytest
#
# 1. Debian's glslc, libvulkan-dev, mesa-vulkan-drivers and spirv-headers (apt-get, as root;
#    otherwise it says what to install).
# 2. Vulkan headers new enough for this llama.cpp (it needs VK_EXT_layer_settings, which Debian
#    12's 1.3.239 lack): where the system's are too old, Debian 13's libvulkan-dev is downloaded
#    and unpacked into a private folder (never installed), with apt's lists kept apart too.
# 3. Tandem with llama.cpp built for Vulkan, in its own venv (.venv-vulkan): the first build
#    compiles the shaders for about 10 minutes on 2 cores; scripts/install.py caches the wheel.
# 4. pytest --gpu-lane, with GGML_VK_VISIBLE_DEVICES=0 (ggml skips a CPU-type Vulkan device
#    unless told to use it).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${TANDEM_LANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tandem/gpu-lane}
VENV=${TANDEM_LANE_VENV:-$PWD/.venv-vulkan}
mkdir -p "$CACHE"
t0=$SECONDS
say() { echo "[gpu lane] $*"; }
took() { say "$1: $(( SECONDS - $2 )) s"; }

# 1. packages
t=$SECONDS
missing=()
for pkg in glslc libvulkan-dev mesa-vulkan-drivers spirv-headers; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    say "needs these packages: sudo apt-get install ${missing[*]}"
    exit 1
  fi
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
took "packages" "$t"

# 2. headers
t=$SECONDS
if grep -q VK_EXT_layer_settings /usr/include/vulkan/vulkan_core.h 2>/dev/null; then
  unset VULKAN_SDK
else
  root="$CACHE/vulkan-headers"
  if ! grep -q VK_EXT_layer_settings "$root/usr/include/vulkan/vulkan_core.h" 2>/dev/null; then
    say "the system's Vulkan headers are too old for this llama.cpp: fetching Debian 13's libvulkan-dev"
    apt_dir="$CACHE/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
    echo "deb http://deb.debian.org/debian trixie main" > "$apt_dir/sources.list"
    opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root")
    apt-get "${opts[@]}" update -qq
    rm -f "$apt_dir"/debs/*.deb
    (cd "$apt_dir/debs" && apt-get "${opts[@]}" download libvulkan-dev/trixie >/dev/null)
    rm -rf "$root" && mkdir -p "$root"
    dpkg -x "$apt_dir"/debs/libvulkan-dev_*.deb "$root"
  fi
  export VULKAN_SDK="$root/usr"  # scripts/install.py builds with $VULKAN_SDK/include
fi
took "headers" "$t"

# 3. the Vulkan build
t=$SECONDS
TANDEM_VENV="$VENV" TANDEM_LLAMA_BUILD=vulkan python3 scripts/install.py --dev
took "Vulkan build and install" "$t"

# 4. the lane
t=$SECONDS
export GGML_VK_VISIBLE_DEVICES=0
set +e
"$VENV/bin/python" -m pytest --gpu-lane -p no:cacheprovider -q -rs "$@"
rc=$?
set -e
took "the lane's tests" "$t"
took "the GPU lane in all" "$t0"
exit $rc
