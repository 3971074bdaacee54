"""A bad file beside a good target never stops the target (issue 38).

Companions are found without the user naming them (session/pairs.py), so one that cannot be
used must not cost the user their target: a companion whose header is refused is named in a note
and never loaded; one that passes its header but that llama.cpp refuses to load is skipped with
a note, and the next one drafts (or the target runs without any); both in `tandem run` and in
`tandem serve`, whose first chat request used to kill the server. A drafter the user names with
--draft must still load: it is an error, in one line.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

import trained
from catalogs import link_or_copy
from gguf_edit import with_metadata
from serve_helpers import start_serve, stop_serve
from tandem.cli.main import main

FAST = ["--threads", "1", "--ctx", "512", "-n", "24"]
PROMPT = "Write a story about the ocean and a lighthouse keeper."


def _broken_eagle3(dest: Path) -> Path:
    """Passes every header check, and llama.cpp refuses to load it (no attention heads: its
    weights do not have the shapes that implies)."""
    return with_metadata(trained.eagle3(), dest, {"eagle3.attention.head_count": 0})


def _crashing_eagle3(dest: Path) -> Path:
    """A rotary dimension beyond its heads: llama.cpp's first decode with it aborted the process
    (ops.cpp GGML_ASSERT(n_dims <= ne0)); now its header is refused."""
    return with_metadata(trained.eagle3(), dest, {"eagle3.rope.dimension_count": 1000})


def _run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, Any], list[str]]:
    assert main(["run", *args, *FAST, "--json", PROMPT]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), [
        line.removeprefix("note: ") for line in err.splitlines() if line.startswith("note: ")
    ]


@pytest.fixture
def alone(capsys: pytest.CaptureFixture[str]) -> str:
    """The target's own answer (the reference: drafting changes nothing)."""
    answer, _ = _run_json(["--target", str(trained.target()), "--baseline"], capsys)
    text: str = answer["text"]
    return text


def test_a_companion_llama_cpp_refuses_is_skipped_and_the_next_drafts(
    tmp_path: Path, alone: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "models"
    target = link_or_copy(trained.target(), folder / "tiny-target.gguf")
    _broken_eagle3(folder / "eagle3-broken.gguf")
    link_or_copy(trained.dflash(), folder / "dflash-good.gguf")
    answer, notes = _run_json(["--target", str(target)], capsys)
    assert answer["text"] == alone
    assert answer["stats"]["drafters"]["dflash"]["drafted"] > 0
    (skipped,) = [n for n in notes if n.startswith("eagle3-broken.gguf")]
    assert skipped.startswith(
        "eagle3-broken.gguf, found beside tiny-target.gguf, is not used (llama.cpp could not"
    )
    assert skipped.endswith(": trying dflash-good.gguf")
    assert "drafting with dflash-good.gguf, found beside tiny-target.gguf" in notes

    # Alone beside the target: the target runs without it (prompt lookup drafts).
    (folder / "dflash-good.gguf").unlink()
    answer, notes = _run_json(["--target", str(target)], capsys)
    assert answer["text"] == alone and answer["stats"]["drafters"].get("eagle3", {}).get("drafted", 0) == 0
    assert any(n.endswith(": tiny-target.gguf runs without it") for n in notes), notes

    # Named with --draft, it must load: one line, exit 1.
    assert (
        main(["run", "--target", str(target), "--draft", str(folder / "eagle3-broken.gguf"), *FAST, "hi"])
        == 1
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "tandem: error: llama.cpp could not load eagle3-broken.gguf"
    )


def test_a_companion_whose_header_is_refused_is_named_and_never_loaded(
    tmp_path: Path, alone: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "models"
    target = link_or_copy(trained.target(), folder / "tiny-target.gguf")
    _crashing_eagle3(folder / "eagle3-x.gguf")
    answer, notes = _run_json(["--target", str(target)], capsys)
    assert answer["text"] == alone
    assert (
        "eagle3-x.gguf, found beside tiny-target.gguf, is not used: eagle3-x.gguf is not a usable GGUF file: "
        "eagle3.rope.dimension_count is 1000, and a rotary dimension must be an even number from 2 to the "
        "head size (16) (llama.cpp would crash on it)"
    ) in notes


def _chat(port: int) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 8}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\n" + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
        )
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    head, _, rest = got.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), json.loads(rest)


def test_serve_answers_beside_bad_companions(tmp_path: Path) -> None:
    """The first chat request used to abort the server (SIGABRT, the slot never freed)."""
    folder = tmp_path / "models"
    target = link_or_copy(trained.target(), folder / "tiny-target.gguf")
    _crashing_eagle3(folder / "eagle3-x.gguf")
    _broken_eagle3(folder / "eagle3-broken.gguf")
    proc, port = start_serve(target)
    try:
        for _ in range(2):
            status, answer = _chat(port)
            assert status == 200 and answer["choices"][0]["message"]["content"], answer
    finally:
        code, _, err = stop_serve(proc)
    assert code == 0 and "Traceback" not in err, err
