"""Bad requests get OpenAI-style error JSON with the right status (never a 500 or a traceback),
and the server answers the next request; the command itself fails with one line, and stops
cleanly and quickly on Ctrl+C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from serve_helpers import request, serving
from tandem.engine import ModelPair
from tandem.server.run import bind

HI = [{"role": "user", "content": "Hi"}]

CASES: list[tuple[str, str, bytes | dict[str, Any], int, str | None]] = [
    # (name, path, body, status, the param the error names)
    ("malformed JSON", "/v1/chat/completions", b'{"messages": [', 400, None),
    ("not an object", "/v1/chat/completions", b"[1, 2]", 400, None),
    ("missing messages", "/v1/chat/completions", {"max_tokens": 5}, 400, "messages"),
    ("empty messages", "/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("messages not a list", "/v1/chat/completions", {"messages": "Hi"}, 400, "messages"),
    (
        "unknown role",
        "/v1/chat/completions",
        {"messages": [{"role": "wizard", "content": "x"}]},
        400,
        "messages.0.role",
    ),
    (
        "content a number",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": 5}]},
        400,
        "messages.0.content",
    ),
    (
        "an image part",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        400,
        "messages.0.content",
    ),
    (
        "temperature a string",
        "/v1/chat/completions",
        {"messages": HI, "temperature": "hot"},
        400,
        "temperature",
    ),
    ("temperature too high", "/v1/chat/completions", {"messages": HI, "temperature": 7}, 400, "temperature"),
    ("top_p zero", "/v1/chat/completions", {"messages": HI, "top_p": 0}, 400, "top_p"),
    ("negative top_k", "/v1/chat/completions", {"messages": HI, "top_k": -1}, 400, "top_k"),
    ("min_p one", "/v1/chat/completions", {"messages": HI, "min_p": 1.0}, 400, "min_p"),
    ("max_tokens zero", "/v1/chat/completions", {"messages": HI, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens a float", "/v1/chat/completions", {"messages": HI, "max_tokens": 2.5}, 400, "max_tokens"),
    ("seed a string", "/v1/chat/completions", {"messages": HI, "seed": "x"}, 400, "seed"),
    ("stop empty", "/v1/chat/completions", {"messages": HI, "stop": [""]}, 400, "stop"),
    ("stream not a bool", "/v1/chat/completions", {"messages": HI, "stream": "yes"}, 400, "stream"),
    ("several choices", "/v1/chat/completions", {"messages": HI, "n": 3}, 400, "n"),
    ("tools", "/v1/chat/completions", {"messages": HI, "tools": [{"type": "function"}]}, 400, "tools"),
    ("a penalty", "/v1/chat/completions", {"messages": HI, "presence_penalty": 1.0}, 400, "presence_penalty"),
    ("exact not a bool", "/v1/chat/completions", {"messages": HI, "exact": "yes"}, 400, "exact"),
    # The tiny models' F32 matrices cannot be exact: asked for, it is refused with the reason.
    ("exact where impossible", "/v1/chat/completions", {"messages": HI, "exact": True}, 400, None),
    ("unknown model", "/v1/chat/completions", {"model": "gpt-9", "messages": HI}, 404, "model"),
    ("missing prompt", "/v1/completions", {"max_tokens": 5}, 400, "prompt"),
    ("empty prompt", "/v1/completions", {"prompt": ""}, 400, "prompt"),
    ("several prompts", "/v1/completions", {"prompt": ["a", "b"]}, 400, "prompt"),
]


def test_each_bad_request_gets_its_error_and_the_server_goes_on(tiny_pair: ModelPair) -> None:
    with serving(tiny_pair) as served:
        for name, path, body, status, param in CASES:
            got, answer = request(served, "POST", path, body)
            assert got == status, (name, answer)
            error = answer["error"]
            assert error["message"] and "Traceback" not in error["message"], name
            assert error["type"] == "invalid_request_error", name
            assert error["param"] == param, (name, error)
            ok, after = request(served, "POST", "/v1/chat/completions", {"messages": HI, "max_tokens": 3})
            assert ok == 200, (name, after)
            assert after["usage"]["completion_tokens"] == 3


def test_exact_output_where_it_is_impossible_is_refused_only_when_required(tiny_pair: ModelPair) -> None:
    with serving(tiny_pair) as served:
        status, answer = request(served, "POST", "/v1/chat/completions", {"messages": HI, "exact": True})
        assert status == 400
        assert answer["error"]["message"].startswith(
            "exact output is not possible here: the target has float"
        )
        for asked in ({}, {"exact": False}):  # left to the server (where possible), or off
            status, answer = request(
                served, "POST", "/v1/chat/completions", {"messages": HI, "max_tokens": 3, **asked}
            )
            assert status == 200 and answer["usage"]["tandem"]["exact"] is False


def test_a_prompt_over_the_context_is_refused_by_name(tiny_pair: ModelPair) -> None:
    long = " ".join(["word"] * 3000)  # the tiny pair's context holds 1,024 tokens
    with serving(tiny_pair) as served:
        for path, body in (
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": long}]}),
            ("/v1/completions", {"prompt": long}),
        ):
            status, answer = request(served, "POST", path, body)
            assert status == 400
            assert answer["error"]["code"] == "context_length_exceeded"
            assert "1,024" in answer["error"]["message"] and "--ctx" in answer["error"]["message"]
        # A long answer asked for is not an error: it stops where the context ends.
        status, answer = request(served, "POST", "/v1/completions", {"prompt": "Hello", "max_tokens": 5000})
        assert status == 200 and answer["choices"][0]["finish_reason"] == "length"
        assert answer["usage"]["total_tokens"] >= 1000


def test_unknown_paths_methods_and_keys_get_json_errors(tiny_pair: ModelPair) -> None:
    with serving(tiny_pair, api_key="k") as served:
        status, answer = request(served, "GET", "/v1/nothing-here", Authorization="Bearer k")
        assert status == 404 and answer["error"]["message"]
        status, answer = request(served, "GET", "/v1/chat/completions", Authorization="Bearer k")
        assert status == 405 and answer["error"]["message"]
        status, answer = request(served, "POST", "/v1/chat/completions", {"messages": HI})
        assert status == 401 and answer["error"]["code"] == "invalid_api_key"
        status, answer = request(served, "GET", "/health")  # open, for load balancers and scripts
        assert status == 200 and answer["status"] == "ok"


# ------------------------------------------------------------------------------ the command
def _serve_process(target: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tandem.cli.main", "serve", "--target", str(target), "--threads", "1", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_ctrl_c_stops_the_server_within_three_seconds_mid_answer(
    smollm2_f16: Path, smollm2_q4_1: Path
) -> None:
    proc = _serve_process(smollm2_f16, "--draft", str(smollm2_q4_1), "--port", "0")
    try:
        assert proc.stderr is not None
        port = None
        for line in proc.stderr:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/v1", line)
            if m:
                port = int(m.group(1))
                break
        assert port, "the server did not say where it listens"
        import socket

        s = socket.create_connection(("127.0.0.1", port))
        body = json.dumps(
            {
                "messages": [{"role": "user", "content": "Tell a very long story."}],
                "max_tokens": 2000,
                "stream": True,
            }
        ).encode()
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        got = b""
        while got.count(b"data: ") < 4:
            got += s.recv(4096)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read()
        code = proc.wait(10)
        took = time.perf_counter() - t0
        tail = b""
        while chunk := s.recv(65536):
            tail += chunk
        s.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert took < 3.0, took
    assert code == 0
    assert "stopped" in rest and "Traceback" not in rest
    assert b"shutting down" in tail  # the client is told why its answer ended


def test_a_port_in_use_is_one_line(tiny_target: Path) -> None:
    taken = bind("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        proc = _serve_process(tiny_target, "--port", str(port))
        _, err = proc.communicate(timeout=60)
    finally:
        taken.close()
    assert proc.returncode == 1
    assert err.strip() == (
        f"tandem: error: port {port} on 127.0.0.1 is already in use: stop what listens there, "
        "or pick another with --port"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000"], "port"),
        (["--queue", "-1"], "queue"),
        (["--port", "0", "--exact"], "exact output is not possible here"),  # (F32 weights), at start
    ],
)
def test_bad_server_options_are_one_line(tiny_target: Path, args: list[str], message: str) -> None:
    proc = _serve_process(tiny_target, *args)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
