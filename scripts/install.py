#!/usr/bin/env python3
"""Install Tandem into ./.venv with the right llama.cpp build for this machine.

    python3 scripts/install.py          # the app
    python3 scripts/install.py --dev    # the app plus test and lint tools

llama-cpp-python is compiled from source, and which compiler flags are right depends on the
machine, so this script chooses them (the user never has to know CMAKE_ARGS):

* NVIDIA: `nvcc` found and an NVIDIA GPU present -> CUDA build (a CUDA toolkit on a machine
  with no GPU, as on many CI runners, gets the CPU build: the CUDA one would be useless there).
* Apple Silicon: Metal (llama.cpp's default there).
* Anything else: CPU build with GGML_NATIVE=OFF and only the instruction sets /proc/cpuinfo
  lists. `-march=native` is avoided on purpose: some VMs advertise AMX but fault on it
  (SIGILL in `tilezero`), and a native build would use it.

Set TANDEM_LLAMA_BUILD=cpu|cuda|metal to force a flavour, or CMAKE_ARGS to pass your own
flags. Re-running is cheap: an existing build that
matches is kept, and pip caches the compiled wheel.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import venv
from pathlib import Path

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
ROOT = Path(__file__).resolve().parent.parent
MARKER_NAME = "tandem-llama-build.json"

# /proc/cpuinfo flag -> ggml CMake option. AMX is deliberately absent (see module docstring).
X86_FLAGS = {
    "sse4_2": "GGML_SSE42",
    "avx": "GGML_AVX",
    "avx2": "GGML_AVX2",
    "bmi2": "GGML_BMI2",
    "fma": "GGML_FMA",
    "f16c": "GGML_F16C",
    "avx_vnni": "GGML_AVX_VNNI",
    "avx512f": "GGML_AVX512",
    "avx512vbmi": "GGML_AVX512_VBMI",
    "avx512_vnni": "GGML_AVX512_VNNI",
    "avx512_bf16": "GGML_AVX512_BF16",
}
# GGML_RPC: llama.cpp's RPC backend, so that `--rpc HOST:PORT` can spread a target over other
# machines running rpc-server (README); it adds one small library and costs nothing unused.
RPC_ARG = "-DGGML_RPC=ON"
COMMON_ARGS = ["-DLLAVA_BUILD=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", RPC_ARG]


def say(msg: str) -> None:
    print(f"[tandem install] {msg}", flush=True)


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").exists():
            return str(Path(home) / "bin" / "nvcc")
    return None


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def nvidia_gpu_present() -> bool:
    if Path("/proc/driver/nvidia/gpus").is_dir() and any(Path("/proc/driver/nvidia/gpus").iterdir()):
        return True
    return gpu_compute_capability() is not None


def choose_build() -> tuple[str, list[str]]:
    """Return (flavour, cmake args) for this machine."""
    system, machine = platform.system(), platform.machine().lower()
    forced = os.environ.get("TANDEM_LLAMA_BUILD", "").lower()
    if forced not in ("", "cpu", "cuda", "metal"):
        say(f"TANDEM_LLAMA_BUILD must be cpu, cuda or metal, not {forced!r}")
        sys.exit(2)
    if forced == "metal" or (not forced and system == "Darwin" and machine == "arm64"):
        return "metal", ["-DGGML_METAL=on", *COMMON_ARGS]
    if forced == "cuda" or (not forced and find_nvcc() and nvidia_gpu_present()):
        args = ["-DGGML_CUDA=on", *COMMON_ARGS]
        # Build for the GPU that is actually here when we can tell (much faster compile).
        cap = gpu_compute_capability()
        if cap:
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={cap}")
        # The host code still must not use instructions the CPU lacks.
        args += cpu_args() if machine in ("x86_64", "amd64") else []
        return "cuda", args
    if machine in ("x86_64", "amd64") and system == "Linux":
        return "cpu", [*cpu_args(), *COMMON_ARGS]
    # Other CPUs (aarch64 Linux, Intel macOS): llama.cpp's native detection is safe there.
    return "cpu", COMMON_ARGS[:]


def cpu_args() -> list[str]:
    flags = cpu_flags()
    args = ["-DGGML_NATIVE=OFF"]
    for flag, option in X86_FLAGS.items():
        args.append(f"-D{option}={'ON' if flag in flags else 'OFF'}")
    return args


def gpu_compute_capability() -> str | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    caps = sorted({c.replace(".", "") for c in out if c.replace(".", "").isdigit()})
    return ";".join(caps) or None


def venv_python(venv_dir: Path) -> Path:
    if os.name == "nt":
        return venv_dir / "Scripts" / "python.exe"
    return venv_dir / "bin" / "python"


def run(cmd: list[str], env: dict[str, str] | None = None) -> None:
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        say(f"command failed (exit {result.returncode}): {' '.join(cmd)}")
        sys.exit(result.returncode)


def installed_build(py: Path) -> dict[str, object] | None:
    """What llama_cpp in the venv is, or None if it does not import."""
    # 'gpu' from the GPU backend's library, not llama_supports_gpu_offload(): with the RPC
    # backend built in, that is true of a CPU-only build too.
    probe = (
        "import json, pathlib, llama_cpp; "
        "libs = [p.name for p in (pathlib.Path(llama_cpp.__file__).parent / 'lib').glob('*')]; "
        "print(json.dumps({'version': llama_cpp.__version__, "
        "'gpu': any(g in n for n in libs for g in ('ggml-cuda', 'ggml-metal')), "
        "'rpc': bool(llama_cpp.llama_supports_rpc())}))"
    )
    res = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
    if res.returncode != 0:
        return None
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def ensure_llama(py: Path, venv_dir: Path, force: bool) -> None:
    user_args = os.environ.get("CMAKE_ARGS")
    if user_args:
        flavour, args = "custom", user_args.split()
    else:
        flavour, args = choose_build()
    wanted = {"package": LLAMA_CPP_PYTHON, "flavour": flavour, "cmake_args": args}
    marker = venv_dir / MARKER_NAME
    have = installed_build(py)
    wants_rpc = RPC_ARG in args
    if not force and have is not None and marker.exists() and have.get("rpc") == wants_rpc:
        try:
            if json.loads(marker.read_text()) == wanted:
                say(f"llama.cpp ({flavour}) already built, keeping it")
                return
        except ValueError:
            pass

    say(f"building llama.cpp for {flavour}: {' '.join(args)}")
    say("the first build compiles C++ for several minutes; later installs reuse pip's cache")
    env = dict(os.environ, CMAKE_ARGS=" ".join(args))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    cmd = [str(py), "-m", "pip", "install", "--upgrade", LLAMA_CPP_PYTHON]
    run([*cmd, "--force-reinstall", "--no-deps"] if have is not None else cmd, env=env)
    have = installed_build(py)
    no_gpu = have is not None and flavour in ("cuda", "metal") and not have["gpu"]
    no_rpc = have is not None and wants_rpc and not have.get("rpc")
    if no_gpu or no_rpc:
        # pip's wheel cache is keyed by the sdist, not by CMAKE_ARGS: a wheel built earlier
        # with other flags (CPU only, or before the RPC backend was built in) may have been
        # reused. Build again without the cache.
        say(f"the cached build has no {'GPU' if no_gpu else 'RPC'} support; rebuilding without pip's cache")
        run([*cmd, "--force-reinstall", "--no-deps", "--no-cache-dir"], env=env)
        have = installed_build(py)
    if have is None:
        say("llama_cpp does not import after the build; see the pip output above")
        sys.exit(1)
    marker.write_text(json.dumps(wanted, indent=2))
    say(f"llama-cpp-python {have['version']} ready (GPU offload: {have['gpu']}, RPC: {have.get('rpc')})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dev", action="store_true", help="also install test and lint tools")
    parser.add_argument("--venv", default=os.environ.get("TANDEM_VENV", str(ROOT / ".venv")))
    parser.add_argument("--rebuild", action="store_true", help="rebuild llama.cpp even if present")
    opts = parser.parse_args()

    if sys.version_info < (3, 10):  # noqa: UP036 - this script runs under any python3
        say(f"Tandem needs Python 3.10 or newer; this is {platform.python_version()}")
        sys.exit(1)
    venv_dir = Path(opts.venv)
    py = venv_python(venv_dir)
    if not py.exists():
        say(f"creating virtual environment in {venv_dir}")
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    quiet = ["-q", "--disable-pip-version-check"]
    run([str(py), "-m", "pip", "install", *quiet, "--upgrade", "pip"])
    ensure_llama(py, venv_dir, opts.rebuild)
    target = f"{ROOT}[dev]" if opts.dev else str(ROOT)
    say("installing Tandem" + (" with dev tools" if opts.dev else ""))
    run([str(py), "-m", "pip", "install", *quiet, "-e", target])
    say("done")


if __name__ == "__main__":
    main()
