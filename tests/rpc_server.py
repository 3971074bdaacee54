"""llama.cpp's rpc-server for the RPC tests: built from the same llama.cpp as the bindings, cached,
and started on 127.0.0.1.

The sources are the llama-cpp-python sdist of the installed version (its vendor/llama.cpp), from
the package registry through pip. Only the `ggml-rpc-server` target is built, statically, for the
CPU with the instruction sets scripts/install.py picks (never -march=native: see there), with two
jobs: a few minutes once, then the binary is reused from
$TANDEM_TEST_MODELS/../rpc-server/<version and flags>/ (the user cache directory by default).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import model_files

ROOT = Path(__file__).resolve().parent.parent
CACHE = model_files.CACHE.parent / "rpc-server"
BINARY = "ggml-rpc-server"
BUILD_TIMEOUT_S = 40 * 60
# The sdist alone: --no-binary for this package only (for all, pip would build the sdist's build
# dependencies from source too, cmake among them).
PIP_DOWNLOAD = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", "llama-cpp-python"]


def _cpu_args() -> list[str]:
    """scripts/install.py's choice of x86 instruction sets, so the server runs where the tests do."""
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
    raise RuntimeError("building rpc-server for the RPC tests needs cmake")


def binary() -> Path:
    """The cached rpc-server, built first if needed."""
    version = importlib.metadata.version("llama-cpp-python")
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        "-DGGML_RPC=ON",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_CURL=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_TOOLS=ON",
        *_cpu_args(),
    ]
    key = hashlib.sha256(" ".join([version, *args]).encode()).hexdigest()[:12]
    dest = CACHE / f"{version}-{key}" / BINARY
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tandem-rpc-build-") as tmp:
        work = Path(tmp)
        subprocess.run(
            [*PIP_DOWNLOAD, f"llama-cpp-python=={version}", "-d", str(work)],
            check=True,
            timeout=600,
        )
        sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):  # refuse links and paths out of `work`
                tar.extractall(work, filter="data")
            else:  # pragma: no cover - Pythons before the extraction filters
                tar.extractall(work)
        source = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = work / "build"
        cmake = _cmake()
        subprocess.run([cmake, "-S", str(source), "-B", str(build), *args], check=True, timeout=600)
        subprocess.run(
            [cmake, "--build", str(build), "--target", BINARY, "-j", "2"], check=True, timeout=BUILD_TIMEOUT_S
        )
        built = next(build.rglob(BINARY))
        partial = dest.with_suffix(".partial")
        shutil.copy2(built, partial)
        partial.replace(dest)  # whole or absent: a build cut short is never reused
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RpcServer:
    """One rpc-server process on 127.0.0.1 (CPU device, one thread per test machine core)."""

    def __init__(self, path: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="rpc-server-", suffix=".log", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(path), "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, GGML_RPC_NO_RDMA="1"),
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"rpc-server exited: {Path(self.log.name).read_text()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("rpc-server did not start listening within 30 s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)


@contextlib.contextmanager
def running(path: Path) -> Iterator[RpcServer]:
    server = RpcServer(path)
    try:
        yield server
    finally:
        server.stop()
