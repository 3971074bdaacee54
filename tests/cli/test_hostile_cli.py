"""Text that is not UTF-8, wherever it comes from (a prompt file, standard input, argv), is a
one-line error naming where it is, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tandem(args: list[str | bytes], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [os.fsencode(sys.executable), b"-m", b"tandem.cli.main", *(os.fsencode(a) for a in args)],
        input=stdin,
        capture_output=True,
        timeout=120,
        cwd=ROOT,
    )


def one_line(res: subprocess.CompletedProcess[bytes]) -> str:
    err = res.stderr.decode("utf-8", errors="replace")
    assert res.returncode == 1 and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tandem: error: "), err
    return lines[0]


def test_a_latin_1_prompt_file_is_named_with_its_line(tiny_target: Path, tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes("chat: hello\nchat: caf\xe9 au lait\n".encode("latin-1"))
    line = one_line(
        tandem(["bench", "--target", str(tiny_target), "--drafter", "lookup", "--prompts", str(prompts)])
    )
    assert f"{prompts}:2: not UTF-8 text (byte 0xe9)" in line


def test_non_utf_8_standard_input_is_refused(tiny_target: Path) -> None:
    line = one_line(tandem(["run", "--target", str(tiny_target), "--baseline", "-"], stdin=b"caf\xe9\n"))
    assert "standard input is not UTF-8 text (byte 0xe9 at offset 3)" in line


def test_a_non_utf_8_byte_in_argv_is_refused(tiny_target: Path) -> None:
    line = one_line(tandem(["run", "--target", str(tiny_target), "--baseline", b"caf\xe9"]))
    assert "the prompt is not UTF-8 text" in line
