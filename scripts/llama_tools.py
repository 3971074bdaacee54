#!/usr/bin/env python3
"""llama.cpp's own programs (llama-bench, llama-server, rpc-server), built from the same llama.cpp
as the installed bindings, for the benchmarks that compare Tandem with them and the RPC tests.

    .venv/bin/python scripts/llama_tools.py llama-bench llama-server   # build (cached), print paths

The sources are the llama-cpp-python sdist of the installed version (its vendor/llama.cpp), from
the package registry through pip. The programs are built statically, for the CPU with the
instruction sets scripts/install.py picks (never -march=native) and llama.cpp's defaults
otherwise (OpenMP, as in the wheel), with two jobs: minutes once, then reused from
<user cache>/tandem/llama-tools/<version and flags>/.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import platformdirs

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("TANDEM_LLAMA_TOOLS") or platformdirs.user_cache_path("tandem") / "llama-tools")
BUILD_TIMEOUT_S = 40 * 60
# The sdist alone: --no-binary for this package only (for all, pip would build the sdist's build
# dependencies from source too, cmake among them).
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "llama-cpp-python"]
# Which CMake target builds each program.
TARGETS = {"llama-bench": "llama-bench", "llama-server": "llama-server", "ggml-rpc-server": "ggml-rpc-server"}


def cpu_args() -> list[str]:
    """scripts/install.py's choice of x86 instruction sets, so the programs run where Tandem does."""
    if platform.machine().lower() not in ("x86_64", "amd64") or platform.system() != "Linux":
        return []
    spec = importlib.util.spec_from_file_location("tandem_install", ROOT / "scripts" / "install.py")
    assert spec is not None and spec.loader is not None
    install = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(install)
    args: list[str] = install.cpu_args()
    return args


def _cmake() -> str:
    found = shutil.which("cmake")
    if found:
        return found
    with contextlib.suppress(ImportError):
        import cmake  # the PyPI package (a dev dependency), where no system cmake is installed

        return str(Path(cmake.CMAKE_BIN_DIR) / "cmake")
    raise RuntimeError("building llama.cpp's programs needs cmake")


def build(*programs: str) -> dict[str, Path]:
    """The cached programs, built first where missing (all missing ones in one build)."""
    unknown = [p for p in programs if p not in TARGETS]
    if unknown:
        raise ValueError(f"unknown llama.cpp programs: {', '.join(unknown)}")
    version = importlib.metadata.version("llama-cpp-python")
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_RPC=ON",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_TOOLS=ON",
        *cpu_args(),
    ]
    key = hashlib.sha256(" ".join([version, *args]).encode()).hexdigest()[:12]
    folder = CACHE / f"{version}-{key}"
    paths = {p: folder / p for p in programs}
    missing = [p for p, path in paths.items() if not path.exists()]
    if not missing:
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tandem-llama-build-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [*PIP_DOWNLOAD, f"llama-cpp-python=={version}", "-d", str(work)], check=True, timeout=600
        )
        sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):  # refuse links and paths out of `work`
                tar.extractall(work, filter="data")
            else:  # pragma: no cover - Pythons before the extraction filters
                tar.extractall(work)
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        out = work / "build"
        cmake = _cmake()
        subprocess.run([cmake, "-S", str(source), "-B", str(out), *args], check=True, timeout=600)
        targets = [TARGETS[p] for p in missing]
        subprocess.run(
            [cmake, "--build", str(out), "--target", *targets, "-j", "2"], check=True, timeout=BUILD_TIMEOUT_S
        )
        for program in missing:
            built = next(p for p in out.rglob(program) if p.is_file() and os.access(p, os.X_OK))
            partial = paths[program].with_suffix(".partial")
            shutil.copy2(built, partial)
            partial.replace(paths[program])  # whole or absent: a build cut short is never reused
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("programs", nargs="+", choices=sorted(TARGETS))
    args = parser.parse_args()
    for program, path in build(*args.programs).items():
        print(f"{program}: {path}")


if __name__ == "__main__":
    main()
