#!/usr/bin/env python3
"""Install Tandem into ./.venv with the right llama.cpp build for this machine.

    python3 scripts/install.py          # the app
    python3 scripts/install.py --dev    # the app plus test and lint tools

llama-cpp-python is compiled from source, and which compiler flags are right depends on the
machine, so this script chooses them (the user never has to know CMAKE_ARGS):

* NVIDIA: `nvcc` found and an NVIDIA GPU present -> CUDA build (a CUDA toolkit on a machine
  with no GPU, as on many CI runners, gets the CPU build: the CUDA one would be useless there).
* Apple Silicon: Metal (llama.cpp's default there).
* Vulkan: AMD and Intel GPUs (Linux, Windows), where LM Studio and Ollama use Vulkan too: when
  `vulkaninfo` lists a GPU (not a CPU device such as Mesa's lavapipe) and `glslc` is there. The
  Vulkan headers must be recent enough for this llama.cpp (VK_EXT_layer_settings); set
  VULKAN_SDK to use other headers (the LunarG SDK, or a newer libvulkan-dev unpacked).
* Anything else: CPU build with GGML_NATIVE=OFF and only the instruction sets /proc/cpuinfo
  lists. `-march=native` is avoided on purpose: some VMs advertise AMX but fault on it
  (SIGILL in `tilezero`), and a native build would use it.

Set TANDEM_LLAMA_BUILD=cpu|cuda|metal|vulkan to force a flavour, or CMAKE_ARGS to pass your
own flags. Re-running is cheap: an existing build that matches is kept, and every build is
cached as a wheel under ~/.cache/tandem/llama-wheels (TANDEM_WHEEL_CACHE), one per flavour
and set of flags, so a second venv of the same flavour installs in seconds (pip's own cache
cannot tell a CPU build from a GPU one: it keys wheels by the source alone).

Patches: where a build needs a change to llama.cpp that upstream has not made, the change is a
patch in scripts/patches/ (its reason and upstream links at its top), applied to the sdist's
vendored llama.cpp before the build; the install stops, naming the patch, if it no longer
applies. Today: the Vulkan flavour's batch-invariant kernels (exact output on Vulkan).

Offline (`--offline DIR`): llama-cpp-python's sdist and every other package come from DIR, and
the build uses the build tools already installed (scikit-build-core, cmake, ninja).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import venv
from pathlib import Path

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
ROOT = Path(__file__).resolve().parent.parent
MARKER_NAME = "tandem-llama-build.json"
FLAVOURS = ("cpu", "cuda", "metal", "vulkan")
PATCHES = ROOT / "scripts" / "patches"
# The patches a build takes, by the backend its CMake arguments turn on (applied in this order
# to llama-cpp-python's vendored llama.cpp, with `git apply`, else `patch -p1`).
BACKEND_PATCHES = {"-DGGML_VULKAN=on": ("vulkan-batch-invariant.patch",)}
# The GPU backends' libraries in llama_cpp/lib: a build that has none of them runs on the CPU.
GPU_LIBS = ("ggml-cuda", "ggml-metal", "ggml-vulkan")

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
    # (on standard error, as the build's own output: standard output carries only what
    # --llama-wheel prints)
    print(f"[tandem install] {msg}", file=sys.stderr, flush=True)


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
    if forced not in ("", *FLAVOURS):
        say(f"TANDEM_LLAMA_BUILD must be one of {', '.join(FLAVOURS)}, not {forced!r}")
        sys.exit(2)
    host = cpu_args() if machine in ("x86_64", "amd64") and system == "Linux" else []
    if forced == "metal" or (not forced and system == "Darwin" and machine == "arm64"):
        return "metal", ["-DGGML_METAL=on", *COMMON_ARGS]
    if forced == "cuda" or (not forced and find_nvcc() and nvidia_gpu_present()):
        args = ["-DGGML_CUDA=on", *COMMON_ARGS]
        # Build for the GPU that is actually here when we can tell (much faster compile).
        cap = gpu_compute_capability()
        if cap:
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={cap}")
        # The host code still must not use instructions the CPU lacks.
        return "cuda", args + (cpu_args() if machine in ("x86_64", "amd64") else [])
    if forced == "vulkan" or (not forced and vulkan_gpus()):
        problem = vulkan_problem()
        if problem is None:
            return "vulkan", ["-DGGML_VULKAN=on", *vulkan_args(), *COMMON_ARGS, *host]
        if forced:
            say(f"cannot build for Vulkan: {problem}")
            sys.exit(1)
        say(f"found a Vulkan GPU ({vulkan_gpus()[0]}), but {problem}; building for the CPU instead")
    return "cpu", [*host, *COMMON_ARGS]


def vulkan_gpus() -> list[str]:
    """The GPUs `vulkaninfo` lists (names), leaving out CPU devices (Mesa's lavapipe): a Vulkan
    build would run no faster than the CPU build on those."""
    tool = shutil.which("vulkaninfo")
    if not tool:
        return []
    try:
        out = subprocess.run(
            [tool, "--summary"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus: list[str] = []
    kind = ""
    for line in out.splitlines():
        key, _, value = (part.strip() for part in line.partition("="))
        if key == "deviceType":
            kind = value
        elif key == "deviceName" and kind and kind != "PHYSICAL_DEVICE_TYPE_CPU":
            gpus.append(value)
    return gpus


def vulkan_include_dir() -> Path | None:
    """Where the Vulkan headers the build will use are: $VULKAN_SDK/include, else the system's."""
    sdk = os.environ.get("VULKAN_SDK")
    candidates = [Path(sdk) / "include"] if sdk else [Path("/usr/include"), Path("/usr/local/include")]
    return next((d for d in candidates if (d / "vulkan" / "vulkan_core.h").is_file()), None)


def vulkan_args() -> list[str]:
    include = vulkan_include_dir()
    return [f"-DVulkan_INCLUDE_DIR={include}"] if include is not None and os.environ.get("VULKAN_SDK") else []


def vulkan_problem() -> str | None:
    """Why a Vulkan build cannot work here, in one line, or None."""
    if not shutil.which("glslc") and not (
        os.environ.get("VULKAN_SDK") and (Path(os.environ["VULKAN_SDK"]) / "bin" / "glslc").exists()
    ):
        return "the shader compiler glslc is missing (Debian/Ubuntu: apt install glslc; or the Vulkan SDK)"
    include = vulkan_include_dir()
    if include is None:
        where = f"in $VULKAN_SDK/include ({os.environ['VULKAN_SDK']})" if os.environ.get("VULKAN_SDK") else ""
        return (
            f"no Vulkan headers {where or 'in /usr/include'} (Debian/Ubuntu: apt install libvulkan-dev "
            "spirv-headers; or the LunarG Vulkan SDK with VULKAN_SDK set)"
        )
    header = (include / "vulkan" / "vulkan_core.h").read_text(errors="replace")
    if "VK_EXT_layer_settings" not in header:
        found = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", header)
        version = f"1.3.{found.group(1)}" if found else "unknown version"
        return (
            f"the Vulkan headers in {include} ({version}) are too old for this llama.cpp, which needs "
            "VK_EXT_layer_settings: install newer ones (Debian 13's or Ubuntu 24.04's libvulkan-dev, or "
            "the LunarG Vulkan SDK) and point VULKAN_SDK at them"
        )
    return None


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
    result = subprocess.run(cmd, env=env, stdout=sys.stderr)  # (see say)
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
        f"'gpu': any(g in n for n in libs for g in {GPU_LIBS!r}), "
        "'rpc': bool(llama_cpp.llama_supports_rpc())}))"
    )
    res = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
    if res.returncode != 0:
        return None
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None


def wheel_cache() -> Path:
    base = os.environ.get("TANDEM_WHEEL_CACHE")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tandem" / "llama-wheels"


def sdist_in(folder: Path) -> Path:
    """llama-cpp-python's sdist in `folder` (--offline's, or where pip put it); exits if none."""
    sdists = sorted(folder.glob("llama_cpp_python-*.tar.gz"))
    if not sdists:
        say(f"no llama_cpp_python-*.tar.gz in {folder}: put llama-cpp-python's sdist there")
        sys.exit(1)
    return sdists[-1]


def patch_digests(patches: list[Path]) -> dict[str, str]:
    """Each patch's SHA-256, by name: what keys a patched build in the cache and the venv."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in patches}


def build_patches(args: list[str]) -> list[Path]:
    """The patches a build with these CMake arguments takes."""
    on = {a.replace("=ON", "=on").replace("=1", "=on") for a in args}
    return [PATCHES / name for flag, names in BACKEND_PATCHES.items() if flag in on for name in names]


def apply_patch(patch: Path, source: Path) -> None:
    """Applies `patch` to the llama.cpp tree at `source`; exits naming it if it does not apply."""
    git, patch_tool = shutil.which("git"), shutil.which("patch")
    if git:
        check = [git, "apply", "--check", str(patch)]
        apply = [git, "apply", str(patch)]
    elif patch_tool:
        check = [patch_tool, "-p1", "--forward", "--batch", "--dry-run", "-i", str(patch)]
        apply = [patch_tool, "-p1", "--forward", "--batch", "-i", str(patch)]
    else:
        say(f"building llama.cpp with {patch.name} needs git or patch: install one of them")
        sys.exit(1)
    # (git must not take a repository above the sdist for the tree to patch)
    env = dict(os.environ, GIT_CEILING_DIRECTORIES=str(source.parent))
    found = subprocess.run(check, cwd=source, capture_output=True, text=True, env=env)
    if found.returncode != 0:
        detail = (found.stderr or found.stdout).strip().splitlines()
        say(
            f"{patch.relative_to(ROOT)} no longer applies to {LLAMA_CPP_PYTHON}'s llama.cpp "
            f"({detail[0] if detail else 'no detail'}): the patch must be redone for this version"
        )
        sys.exit(1)
    subprocess.run(apply, cwd=source, check=True, capture_output=True, env=env)


def patched_source(py: Path, patches: list[Path], offline: Path | None, work: Path) -> Path:
    """llama-cpp-python's sdist unpacked in `work`, its vendored llama.cpp patched."""
    if offline is None:
        sdist_only = ["--no-deps", "--no-binary", ":all:"]
        run([str(py), "-m", "pip", "download", "-q", *sdist_only, "-d", str(work), LLAMA_CPP_PYTHON])
    with tarfile.open(sdist_in(offline or work)) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(work, filter="data")
        else:  # (Python before 3.10.12: no filters)
            tar.extractall(work)  # (the sdist pip just fetched, or the one the user named)
    source = next(p for p in work.iterdir() if p.is_dir() and p.name.startswith("llama_cpp_python-"))
    for patch in patches:
        say(f"applying {patch.relative_to(ROOT)}")
        apply_patch(patch, source / "vendor" / "llama.cpp")
    return source


def llama_wheel(py: Path, flavour: str, args: list[str], offline: Path | None, force: bool) -> Path:
    """The llama-cpp-python wheel built with these flags: from the cache, else built into it."""
    patches = build_patches(args)
    wanted = [LLAMA_CPP_PYTHON, flavour, args, platform.machine()]
    if patches:  # (a build without patches keeps the key it had before patches existed)
        wanted.append(list(patch_digests(patches).values()))
    key = hashlib.sha256(json.dumps(wanted).encode()).hexdigest()[:16]
    folder = wheel_cache() / f"{flavour}-{key}"
    found = sorted(folder.glob("llama_cpp_python-*.whl"))
    if found and not force:
        say(f"using the llama.cpp build cached in {folder}")
        return found[-1]
    say(f"building llama.cpp for {flavour}: {' '.join(args)}")
    say("the first build compiles C++ for several minutes; it is cached for later installs")
    part = folder.with_name(folder.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    env = dict(os.environ, CMAKE_ARGS=" ".join(args))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    # No pip cache: it keys built wheels by the source alone, and may hand back another flavour.
    cmd = [str(py), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", str(part)]
    if offline is not None:
        cmd += ["--no-index", "--find-links", str(offline), "--no-build-isolation"]
    with tempfile.TemporaryDirectory(prefix="tandem-llama-src-") as work:
        if patches:
            cmd.append(str(patched_source(py, patches, offline, Path(work))))
        elif offline is not None:
            cmd.append(str(sdist_in(offline)))
        else:
            cmd.append(LLAMA_CPP_PYTHON)
        run(cmd, env=env)
    built = sorted(part.glob("llama_cpp_python-*.whl"))
    if not built:
        say(f"pip built no wheel in {part}; see its output above")
        sys.exit(1)
    shutil.rmtree(folder, ignore_errors=True)
    part.rename(folder)
    return folder / built[-1].name


def chosen_build() -> tuple[str, list[str]]:
    """The user's CMAKE_ARGS ("custom"), else the flavour and flags chosen for this machine."""
    user_args = os.environ.get("CMAKE_ARGS")
    return ("custom", user_args.split()) if user_args else choose_build()


def ensure_llama(py: Path, venv_dir: Path, force: bool, offline: Path | None) -> None:
    flavour, args = chosen_build()
    wanted: dict[str, object] = {"package": LLAMA_CPP_PYTHON, "flavour": flavour, "cmake_args": args}
    patches = build_patches(args)
    if patches:  # (a venv built before a patch changed is rebuilt)
        wanted["patches"] = {name: digest[:16] for name, digest in patch_digests(patches).items()}
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

    wheel = llama_wheel(py, flavour, args, offline, force)
    cmd = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if offline is not None:
        cmd += ["--no-index", "--find-links", str(offline)]
    run([*cmd, "--force-reinstall", "--no-deps", str(wheel)] if have is not None else [*cmd, str(wheel)])
    have = installed_build(py)
    if have is None:
        say("llama_cpp does not import after the build; see the pip output above")
        sys.exit(1)
    if (flavour in ("cuda", "metal", "vulkan") and not have["gpu"]) or (wants_rpc and not have.get("rpc")):
        lacks = "the GPU backend" if not have["gpu"] else "RPC"
        say(f"the build in {wheel.parent} lacks {lacks}: run again with --rebuild")
        sys.exit(1)
    marker.write_text(json.dumps(wanted, indent=2))
    gpu, rpc = have["gpu"], have.get("rpc")
    say(f"llama-cpp-python {have['version']} ready ({flavour}; GPU offload: {gpu}, RPC: {rpc})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dev", action="store_true", help="also install test and lint tools")
    parser.add_argument("--venv", default=os.environ.get("TANDEM_VENV", str(ROOT / ".venv")))
    parser.add_argument("--rebuild", action="store_true", help="rebuild llama.cpp even if present")
    parser.add_argument(
        "--offline",
        metavar="DIR",
        type=Path,
        help="no package index: llama-cpp-python's sdist and every package from DIR (wheels)",
    )
    parser.add_argument(
        "--here",
        action="store_true",
        help="install into the Python running this script, no venv (a throwaway machine whose "
        "Python already has the build tools and numpy: the GPU machine, scripts/device/)",
    )
    parser.add_argument(
        "--llama-wheel",
        action="store_true",
        help="only build (or find in the cache) llama.cpp's wheel for this machine and print its "
        "path, for installing Tandem as a tool: pipx install --preinstall WHEEL . (README)",
    )
    opts = parser.parse_args()

    if sys.version_info < (3, 10):  # noqa: UP036 - this script runs under any python3
        say(f"Tandem needs Python 3.10 or newer; this is {platform.python_version()}")
        sys.exit(1)
    if opts.llama_wheel:
        flavour, args = chosen_build()
        print(llama_wheel(Path(sys.executable), flavour, args, opts.offline, opts.rebuild))
        return
    venv_dir = Path(sys.prefix if opts.here else opts.venv)
    py = Path(sys.executable) if opts.here else venv_python(venv_dir)
    if not py.exists():
        say(f"creating virtual environment in {venv_dir}")
        venv.EnvBuilder(with_pip=True).create(venv_dir)
    quiet = ["-q", "--disable-pip-version-check"]
    index = ["--no-index", "--find-links", str(opts.offline)] if opts.offline else []
    if not opts.offline:
        run([str(py), "-m", "pip", "install", *quiet, "--upgrade", "pip"])
    ensure_llama(py, venv_dir, opts.rebuild, opts.offline)
    target = f"{ROOT}[dev]" if opts.dev else str(ROOT)
    say("installing Tandem" + (" with dev tools" if opts.dev else ""))
    run([str(py), "-m", "pip", "install", *quiet, *index, "-e", target])
    say("done")


if __name__ == "__main__":
    main()
