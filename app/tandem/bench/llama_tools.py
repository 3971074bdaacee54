"""llama.cpp's own programs (llama-bench, llama-server, rpc-server), built from the llama.cpp the
installed bindings vendor, with the bindings' own build flags: what users compare Tandem with
(`tandem bench`, the scripts' benchmarks) and the RPC tests' server.

The sources are the llama-cpp-python sdist of the installed version (its vendor/llama.cpp), from
the package registry through pip. The programs are built statically with two jobs: minutes
once, then reused from <user cache>/tandem/llama-tools/<version and flags>/. Two flavours:

* `cpu`: the instruction sets the bindings were built with (scripts/install.py records them in
  the environment's `tandem-llama-build.json`; never -march=native) and llama.cpp's defaults
  otherwise (OpenMP, as in the bindings); what the RPC tests and the CPU benchmarks use;
* `bindings`: every flag the bindings were built with (CUDA, Metal, Vulkan…), so that a target
  Tandem runs on a GPU is compared with llama.cpp on the same GPU.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import platformdirs

from tandem.engine import TandemError

BUILD_TIMEOUT_S = 40 * 60
MARKER = "tandem-llama-build.json"  # (scripts/install.py's MARKER_NAME)
# Which CMake target builds each program.
TARGETS = {"llama-bench": "llama-bench", "llama-server": "llama-server", "ggml-rpc-server": "ggml-rpc-server"}
FIXED_ARGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_RPC=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
]
# The bindings' flags the programs' build sets itself (or that concern the bindings alone).
_NOT_TAKEN = ("-DLLAVA_BUILD", "-DLLAMA_BUILD_TESTS", "-DLLAMA_BUILD_EXAMPLES", "-DGGML_RPC")
# Of the bindings' flags, those that choose CPU instruction sets (the `cpu` flavour's).
_CPU_PREFIXES = ("-DGGML_NATIVE", "-DGGML_SSE", "-DGGML_AVX", "-DGGML_BMI", "-DGGML_FMA", "-DGGML_F16C")


class LlamaToolsError(TandemError):
    """A program could not be built (no cmake or compiler, no network for the sources...)."""


def cache_dir() -> Path:
    env = os.environ.get("TANDEM_LLAMA_TOOLS")
    return Path(env) if env else platformdirs.user_cache_path("tandem") / "llama-tools"


def bindings_args() -> list[str]:
    """The CMake flags the installed bindings were built with, as scripts/install.py recorded
    them; raises where nothing was recorded (a llama-cpp-python installed another way)."""
    marker = Path(sys.prefix) / MARKER
    try:
        args = json.loads(marker.read_text())["cmake_args"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise LlamaToolsError(
            f"no record of how llama.cpp was built here ({marker}): install Tandem with "
            "scripts/install.py, or give the program's path"
        ) from exc
    return [str(a) for a in args if not str(a).startswith(_NOT_TAKEN)]


def flavour_args(flavour: str) -> list[str]:
    args = bindings_args()
    return [a for a in args if a.startswith(_CPU_PREFIXES)] if flavour == "cpu" else args


def cached(program: str, flavour: str = "cpu") -> Path | None:
    """The program if it was built already (for these bindings and flags), else None."""
    try:
        path = _folder(flavour) / program
    except LlamaToolsError:
        return None
    return path if path.exists() else None


def _folder(flavour: str) -> Path:
    version = importlib.metadata.version("llama-cpp-python")
    args = [*FIXED_ARGS, *flavour_args(flavour)]
    key = hashlib.sha256(" ".join([version, *args]).encode()).hexdigest()[:12]
    return cache_dir() / f"{version}-{key}"


def build(*programs: str, flavour: str = "cpu") -> dict[str, Path]:
    """The cached programs, built first where missing (all missing ones in one build)."""
    unknown = [p for p in programs if p not in TARGETS]
    if unknown:
        raise ValueError(f"unknown llama.cpp programs: {', '.join(unknown)}")
    folder = _folder(flavour)
    paths = {p: folder / p for p in programs}
    missing = [p for p, path in paths.items() if not path.exists()]
    if not missing:
        return paths
    version = importlib.metadata.version("llama-cpp-python")
    args = [*FIXED_ARGS, *flavour_args(flavour)]
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tandem-llama-build-") as tmp:
        work = Path(tmp)
        # The sdist alone: --no-binary for this package only (for all, pip would build the
        # sdist's build dependencies from source too, cmake among them).
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "llama-cpp-python"]
        _run([*pip, f"llama-cpp-python=={version}", "-d", str(work)], "download llama.cpp's sources", 600)
        sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):  # refuse links and paths out of `work`
                tar.extractall(work, filter="data")
            else:  # pragma: no cover - Pythons before the extraction filters
                tar.extractall(work)
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        out = work / "build"
        cmake = _cmake()
        _run([cmake, "-S", str(source), "-B", str(out), *args], "configure llama.cpp", 600)
        targets = [TARGETS[p] for p in missing]
        compile_ = [cmake, "--build", str(out), "--target", *targets, "-j", "2"]
        _run(compile_, "build llama.cpp", BUILD_TIMEOUT_S)
        for program in missing:
            built = next(p for p in out.rglob(program) if p.is_file() and os.access(p, os.X_OK))
            partial = paths[program].with_suffix(".partial")
            shutil.copy2(built, partial)
            partial.replace(paths[program])  # whole or absent: a build cut short is never reused
    return paths


def _cmake() -> str:
    found = shutil.which("cmake")
    if found:
        return found
    with contextlib.suppress(ImportError):
        import cmake  # type: ignore[import-not-found]  # the PyPI package (a dev dependency)

        return str(Path(cmake.CMAKE_BIN_DIR) / "cmake")
    raise LlamaToolsError("building llama.cpp's programs needs cmake (pip install cmake, or your system's)")


def _run(cmd: list[str], what: str, timeout: float) -> None:
    try:
        subprocess.run(cmd, check=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LlamaToolsError(f"could not {what}: {exc}") from exc
