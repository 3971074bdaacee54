"""`tandem serve` in a thread of the test process, on a free port of 127.0.0.1, over the session's
real pairs (the same server `tandem serve` runs: app/tandem/server/run.py's make_server)."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from tandem.engine import ModelPair
from tandem.server import ServeSettings
from tandem.server.run import bind, make_server
from tandem.session.options import Options


class Served:
    def __init__(self, port: int, settings: ServeSettings) -> None:
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.settings = settings

    @property
    def v1(self) -> str:
        return self.base_url + "/v1"


@contextmanager
def serving(pair: ModelPair, **settings: object) -> Iterator[Served]:
    """Serve `pair` until the block ends; settings: ServeSettings fields over test defaults."""
    base = ServeSettings(model_id="test-pair", options=Options(n_threads=1))
    s = replace(base, **settings)  # type: ignore[arg-type]
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    ready = threading.Event()
    server = make_server(pair, s, ready.set)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert ready.wait(20), "the server did not start"
        yield Served(port, s)
    finally:
        server.stop()
        thread.join(10)
        server.stop_generating()
        sock.close()
        assert not thread.is_alive(), "the server did not stop"


def request(
    served: Served, method: str, path: str, body: bytes | dict[str, Any] | None = None, **headers: str
) -> tuple[int, Any]:
    """One plain HTTP request (no client library in between): the status and the JSON answer."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    try:
        hdrs = {"Content-Type": "application/json", **{k.replace("_", "-"): v for k, v in headers.items()}}
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def wait_idle(served: Served, timeout: float = 5.0) -> float:
    """Seconds until /health says no generation runs and none waits (fails after `timeout`)."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        _, health = request(served, "GET", "/health")
        if not health["busy"] and health["waiting"] == 0:
            return time.perf_counter() - t0
        time.sleep(0.01)
    raise AssertionError(f"the server was still busy after {timeout} s")


def launch_serve(target: Path, *args: str) -> subprocess.Popen[str]:
    """A real `tandem serve` process on a free port of 127.0.0.1 (`--threads 1`), just launched:
    its stderr is a pipe, unbuffered, for the caller to read."""
    command = [sys.executable, "-m", "tandem.cli.main", "serve", "--target", str(target)]
    proc = subprocess.Popen(
        [*command, "--threads", "1", "--port", "0", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stderr is not None
    return proc


def start_serve(target: Path, *args: str) -> tuple[subprocess.Popen[str], int]:
    """`launch_serve`, once it listens: the process (stderr read past the line that says where
    it listens) and the port."""
    proc = launch_serve(target, *args)
    assert proc.stderr is not None
    for line in proc.stderr:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
        if m:
            return proc, int(m.group(1))
    proc.wait(10)
    raise AssertionError(f"the server did not start (exit {proc.returncode})")


def stop_serve(proc: subprocess.Popen[str]) -> tuple[int, float, str]:
    """SIGTERM: the exit code, the seconds it took, and what it wrote to stderr meanwhile."""
    assert proc.stderr is not None
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        rest = proc.stderr.read()
        code = proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return code, time.perf_counter() - t0, rest


def streamed_text(client: Any, content: str, max_tokens: int) -> str:
    """One streamed chat answer through OpenAI's client (`openai.OpenAI`), its text joined."""
    stream = client.chat.completions.create(
        model="test-pair", messages=[{"role": "user", "content": content}], max_tokens=max_tokens, stream=True
    )
    return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
