"""Run many `tandem` command lines in child processes, each watched for a signal or a hang.

A file that makes llama.cpp abort ends the process it runs in, so the fuzz tests run Tandem in
a child. Starting a child per case would cost 0.4 s of imports each; instead one child runs the
cases one after the other, in-process (`tandem.cli.main.main`, as the `tandem` command does),
and reports each on its standard output. When a case kills it (SIGABRT, SIGSEGV) or runs past
its time, the parent records that case with what ended it, and starts a new child for the
rest. So a crash is always pinned on its case, and a run of cases that all behave costs one
start.

A case may name files to write just before it runs and to delete once it has (`Case.edits`,
through gguf_edit.with_metadata): hundreds of edited copies of a 14 MB model would otherwise
sit on disk at once.

`python native_child.py` is the child: it reads the cases (pickled) on standard input.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    """One `tandem` command line, and the edited files it needs: (source, destination, the
    metadata changes), written just before it runs and removed after."""

    argv: tuple[str, ...]
    edits: tuple[tuple[Path, Path, dict[str, Any]], ...] = ()


@dataclass(frozen=True)
class Outcome:
    """How one command line ended."""

    argv: tuple[str, ...]
    rc: int | None  # the command's exit status; None when it never returned
    err: str = ""  # what it wrote to standard error (the one line, or more)
    signal: int | None = None  # the signal that ended the child while it ran this case
    hung: bool = False  # it ran past its time and was killed
    seconds: float = 0.0
    native: str = ""  # what the child's process wrote outside Python (llama.cpp's assert)

    @property
    def assertion(self) -> str:
        """The llama.cpp / ggml assertion that ended the child, if it said one."""
        found = [
            line.strip() for line in self.native.splitlines() if "GGML_ASSERT" in line or "error" in line
        ]
        return found[0] if found else self.native.strip()[-300:]

    @property
    def lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]

    def describe(self) -> str:
        how = (
            f"signal {self.signal}"
            if self.signal is not None
            else "hung"
            if self.hung
            else f"rc {self.rc} in {self.seconds:.1f}s"
        )
        return f"{' '.join(self.argv)}: {how}: {self.err.strip()[-400:]} {self.assertion}"


def run_cases(cases: list[Case], *, timeout: float = 60.0) -> list[Outcome]:
    """Run each case (arguments of `tandem`) and return how each ended, in order. `timeout`:
    the seconds one case may take before it counts as a hang."""
    out: list[Outcome] = []
    while len(out) < len(cases):
        out += _one_child(cases[len(out) :], timeout)
    return out


def _one_child(cases: list[Case], timeout: float) -> list[Outcome]:
    """Run cases in one child until they end or the child dies; the outcomes it reached (at
    least one: the case that killed it)."""
    # (GGML_NO_BACKTRACE: an assert ends the child at once, without ggml asking gdb for a trace)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "GGML_NO_BACKTRACE": "1"}
    child = subprocess.Popen(
        [sys.executable, __file__],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdin.write(pickle.dumps(cases))
    child.stdin.close()
    os.set_blocking(child.stderr.fileno(), False)
    native = bytearray()
    outcomes: list[Outcome] = []
    started: float | None = None
    pending = b""
    while len(outcomes) < len(cases):
        wait = timeout if started is None else max(0.0, started + timeout - time.monotonic())
        ready, _, _ = select.select([child.stdout, child.stderr], [], [], wait)
        if child.stderr in ready:
            with contextlib.suppress(BlockingIOError, TypeError):
                native += child.stderr.read() or b""
        if child.stdout not in ready:
            if started is not None and time.monotonic() >= started + timeout:
                child.kill()
                child.wait()
                case = cases[len(outcomes)]
                outcomes.append(Outcome(case.argv, None, hung=True, seconds=timeout))
                _remove(case)
                return outcomes
            continue
        chunk = os.read(child.stdout.fileno(), 1 << 16)
        if not chunk:  # the child ended while a case ran
            rc = child.wait()
            with contextlib.suppress(BlockingIOError, TypeError):
                native += child.stderr.read() or b""
            case = cases[len(outcomes)]
            seconds = time.monotonic() - started if started is not None else 0.0
            sig = -rc if rc < 0 else None
            text = native.decode(errors="replace")
            ended = Outcome(case.argv, rc if rc >= 0 else None, signal=sig, seconds=seconds, native=text)
            outcomes.append(ended)
            _remove(case)
            return outcomes
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            try:
                msg = json.loads(line)
            except ValueError:
                native += line + b"\n"  # (not a report)
                continue
            if "start" in msg:
                started = time.monotonic()
                native.clear()
            else:
                case = cases[len(outcomes)]
                outcomes.append(
                    Outcome(
                        case.argv,
                        msg["rc"],
                        msg["err"],
                        seconds=msg["seconds"],
                        native=native.decode(errors="replace"),
                    )
                )
                started = None
    child.wait()
    return outcomes


def _remove(case: Case) -> None:
    """Delete a case's edited files (the parent does, for a case that ended the child)."""
    for _, dest, _ in case.edits:
        dest.unlink(missing_ok=True)


def _child() -> None:
    """Run each case of the list on standard input through `tandem`'s main, reporting a start
    and an end line for each on standard output (the real one: what the command prints goes to
    a buffer)."""
    from gguf_edit import with_metadata
    from tandem.cli.main import main

    report = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # (what native code prints: with stderr)
    cases: list[Case] = pickle.load(sys.stdin.buffer)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    for i, case in enumerate(cases):
        for src, dest, changes in case.edits:
            with_metadata(src, dest, changes)
        argv = list(case.argv)
        report.write(json.dumps({"start": i}) + "\n")
        err, out = io.StringIO(), io.StringIO()
        t0 = time.monotonic()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                rc = main(argv)
            except SystemExit as exc:  # (argparse's usage errors)
                rc = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # a traceback: the test reports it as such
                import traceback

                rc = 99
                err.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        _remove(case)
        report.write(json.dumps({"rc": rc, "err": err.getvalue(), "seconds": time.monotonic() - t0}) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    _child()
