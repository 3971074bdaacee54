#!/usr/bin/env bash
# Fill .device/ (git-ignored) for a run on a lent NVIDIA machine, which has no network: what
# scripts/device/run.sh needs there, under the 64 MiB a call may carry.
#
#   scripts/device/prepare.sh                       # build llama.cpp there, from the sdist
#   scripts/device/prepare.sh --wheel W --args "A"  # or carry a CUDA wheel built here with
#                                                   # CMAKE_ARGS="A" (nvcc builds for sm_90 on
#                                                   # any machine), saving the build's minutes
#   ... --tools DIR                                 # and llama.cpp's own tools built with it
#
# .device/whl        wheels for Python 3.12 of Tandem's dependencies and the tests' that the
#                    machine lacks (it has numpy, scipy, pytest, hypothesis...), setuptools;
#                    llama-cpp-python's sdist (trimmed) when no wheel is given
# .device/wheels     the given wheel (its CUDA library apart, xz-packed), where
#                    scripts/install.py's build cache looks for it
# .device/models     SmolLM2's tokenizer (tests/model_files.py writes every test model from it)
# .device/bin.tar.xz llama.cpp's programs (--tools): llama-speculative-simple, llama-bench,
#                    llama-server, ggml-rpc-server and the libraries they need beside the wheel's
set -euo pipefail
cd "$(dirname "$0")/../.."
wheel="" args="" tools="" py=3.12
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) wheel=$2; shift 2 ;;
    --args) args=$2; shift 2 ;;
    --tools) tools=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;  # the machine's Python (3.12 on the GPU machines)
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
D=.device
rm -rf "$D" && mkdir -p "$D/whl" "$D/models"
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
V=$(sed -n 's/^LLAMA_CPP_PYTHON = "llama-cpp-python==\(.*\)"$/\1/p' scripts/install.py)  # what install.py builds

# Tandem's dependencies and what the GPU lane's tests import, resolved by pip for Python 3.12.
python3 - > "$D/reqs.txt" <<'PY'
import re, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
skip = r"(llama-cpp-python|numpy|cmake|ruff|mypy|scipy|pytest|hypothesis|openai|pytest-textual-snapshot)\b"
deps = [d for d in p["dependencies"] + p["optional-dependencies"]["dev"] if not re.match(skip, d)]
# llama-cpp-python's own (it needs diskcache, typing-extensions, jinja2, numpy); the build tools
print("\n".join([*deps, "diskcache>=5.6.1", "typing-extensions>=4.5", "setuptools>=68", "wheel"]))
PY
python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$py" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform any -d "$D/whl" -r "$D/reqs.txt"
# What the machine's Python has already (KINDS.md's package list): its numpy (PyTorch is built
# against it), huggingface-hub and what they need. Left out, the rest fits the 64 MiB.
# (setuptools stays: Tandem's editable install builds with it in an isolated environment.)
for have in numpy hf_xet huggingface_hub httpx2 httpcore2 fsspec pygments pyyaml \
            requests urllib3 certifi idna charset_normalizer tqdm packaging filelock jinja2 markupsafe \
            click h11 anyio markdown_it_py mdurl; do
  rm -f "$D"/whl/"$have"-*.whl
done

if [ -n "$wheel" ]; then
  [ -n "$args" ] || { echo "--wheel needs --args: the CMAKE_ARGS it was built with"; exit 2; }
  # scripts/install.py's cache folder for these flags ("custom": CMAKE_ARGS given by hand).
  key=$(python3 -c "
import hashlib, json, platform, sys
print(hashlib.sha256(json.dumps(['llama-cpp-python==$V', 'custom', sys.argv[1].split(), platform.machine()]).encode()).hexdigest()[:16])
" "$args")
  # (xz packs its CUDA library tighter than the wheel's zip: run.sh joins the parts again)
  python3 scripts/device/wheel_parts.py split "$wheel" "$D/wheels/custom-$key"
  printf '%s' "$args" > "$D/cmake_args.txt"
else
  T=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary=:all: -d "$T" "llama-cpp-python==$V"
  tar xzf "$T"/llama_cpp_python-*.tar.gz -C "$T"
  S=$(ls -d "$T"/llama_cpp_python-*/)
  rm -rf "$S/.git" "$S/vendor/llama.cpp/docs" "$S/vendor/llama.cpp/media" "$S/vendor/llama.cpp/.github" \
         "$S/vendor/llama.cpp/benches" "$S/vendor/llama.cpp/.devops" "$S"/vendor/llama.cpp/models/*.gguf \
         "$S/vendor/llama.cpp/tools/server/public" "$S/vendor/llama.cpp/tools/server/webui"
  # (named as pip names an sdist, so that --find-links and install.py --offline find it)
  tar czf "$D/whl/llama_cpp_python-$V.tar.gz" -C "$T" "$(basename "$S")"
  rm -rf "$T"
fi
if [ -n "$tools" ]; then
  mkdir -p "$D/bin"
  for t in "$tools"/*; do  # (what cuda_wheel.sh put there)
    cp -L "$t" "$D/bin/" && strip --strip-unneeded "$D/bin/$(basename "$t")"
  done
  # (xz-packed: 10 MB of programs would push a call past its 64 MiB; run.sh unpacks them)
  tar -C "$D" -cJf "$D/bin.tar.xz" bin && rm -rf "$D/bin"
fi

# The tokenizer every test model is written with (the machine cannot fetch SmolLM2 from PyPI).
.venv/bin/python -c "import sys; sys.path.insert(0, 'tests'); import model_files; model_files._smollm2_tokenizer()"
cache=$(.venv/bin/python -c "import sys; sys.path.insert(0, 'tests'); import model_files; print(model_files.CACHE)")
cp "$cache/smollm2-tokenizer.json" "$D/models/"

du -sh "$D"
size=$(du -sm "$D" | cut -f1)
[ "$size" -le 56 ] || echo "WARNING: .device is $size MiB: with the tree, a call carries at most 64 MiB"
