"""llama.cpp's rpc-server for the RPC tests (and its llama-bench for the bench's comparison): built
from the same llama.cpp as the bindings, cached (tandem.bench.llama_tools: a few minutes once),
and started on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BINARY = "ggml-rpc-server"


# The programs the tests use, built together where missing (one configure, one build).
PROGRAMS = (BINARY, "llama-bench")


def binary() -> Path:
    """The cached rpc-server (tandem.bench.llama_tools), built first if needed."""
    return build(BINARY)


def build(program: str) -> Path:
    from tandem.bench.llama_tools import build as build_programs

    return build_programs(*PROGRAMS)[program]


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
