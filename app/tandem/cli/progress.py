"""Download progress on stderr: one updating line per file on a terminal, plain lines otherwise.

On a terminal each file gets a bar that redraws in place (`\\r`) and becomes a summary line
when the file is done. In a log or a pipe, a line when a file starts, one every 10%, and one
when it is done, so CI logs stay readable.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from tandem.catalog import DownloadProgress
from tandem.catalog.units import format_bytes

BAR_WIDTH = 24


def format_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "--:--"
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@dataclass
class _FileState:
    started: float
    saw_transfer: bool = False
    last_step: int = -1  # last 10% step printed (plain mode)
    start_bytes: int = 0


@dataclass
class ProgressPrinter:
    """Callable for download_file / pull_pair's on_progress."""

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    tty: bool | None = None
    files: dict[str, _FileState] = field(default_factory=dict)
    open_line: bool = False

    def __post_init__(self) -> None:
        if self.tty is None:
            self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, p: DownloadProgress) -> None:
        state = self.files.get(p.filename)
        if state is None:
            # A file first seen done was already in the cache; any other one is being fetched.
            state = self.files[p.filename] = _FileState(
                time.monotonic(), saw_transfer=not p.done, start_bytes=p.downloaded
            )
            if not p.done and not self.tty:
                resumed = f", resuming at {format_bytes(p.downloaded)}" if p.downloaded else ""
                size = format_bytes(p.total) if p.total else "size unknown"
                self._line(f"downloading {p.filename} ({size}{resumed})")
        if p.done:
            self._finish(p, state)
            return
        if self.tty:
            self._draw(p)
        else:
            step = int(10 * p.downloaded / p.total) if p.total else -1
            if step > state.last_step and 0 < step < 10:
                state.last_step = step
                self._line(f"  {p.filename}: {self._numbers(p)}")

    def close(self) -> None:
        """End a half-drawn bar line (after an error or Ctrl+C)."""
        if self.open_line:
            self.stream.write("\n")
            self.stream.flush()
            self.open_line = False

    # ------------------------------------------------------------------ drawing
    @staticmethod
    def _numbers(p: DownloadProgress) -> str:
        pct = f"{100 * p.downloaded / p.total:3.0f}%" if p.total else "   ?"
        size = (
            f"{format_bytes(p.downloaded)}/{format_bytes(p.total)}" if p.total else format_bytes(p.downloaded)
        )
        speed = f"{format_bytes(p.bytes_per_s)}/s" if p.bytes_per_s else "--"
        return f"{pct}  {size}  {speed}  ETA {format_duration(p.eta_s)}"

    def _draw(self, p: DownloadProgress) -> None:
        width = shutil.get_terminal_size((100, 20)).columns
        frac = min(1.0, p.downloaded / p.total) if p.total else 0.0
        filled = int(frac * BAR_WIDTH)
        bar = "█" * filled + "░" * (BAR_WIDTH - filled)
        tail = f" {bar} {self._numbers(p)}"
        room = max(10, width - len(tail) - 3)
        name = p.filename.rsplit("/", 1)[-1]
        if len(name) > room:
            name = "…" + name[-(room - 1) :]
        self.stream.write(f"\r  {name}{tail}\x1b[K")
        self.stream.flush()
        self.open_line = True

    def _finish(self, p: DownloadProgress, state: _FileState) -> None:
        name = p.filename.rsplit("/", 1)[-1] if self.tty else p.filename
        if state.saw_transfer:
            took = time.monotonic() - state.started
            got = p.downloaded - state.start_bytes
            rate = f", {format_bytes(got / took)}/s" if took > 0 else ""
            text = f"  ✓ {name}  {format_bytes(p.total)} in {format_duration(took)}{rate}, checksum verified"
        else:
            text = f"  ✓ {name}  {format_bytes(p.total)} (already downloaded)"
        if self.tty:
            self.stream.write(f"\r{text}\x1b[K\n")
            self.stream.flush()
            self.open_line = False
        else:
            self._line(text.replace("✓", "done:", 1))

    def _line(self, text: str) -> None:
        self.close()
        self.stream.write(text + "\n")
        self.stream.flush()
