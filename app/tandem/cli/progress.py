"""Download progress on stderr: rich's bars on a terminal, plain lines otherwise.

On a terminal each file gets a bar (rich.progress: size, speed, time left) that becomes a
summary line when the file is done. In a log or a pipe, a line when a file starts, one every
10%, and one when it is done, so CI logs stay readable.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

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
    bars: Progress | None = None  # (on a terminal, while a file downloads)
    tasks: dict[str, TaskID] = field(default_factory=dict)

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
        """Stop the bars (after the last file, an error or Ctrl+C): the terminal's line is free."""
        if self.bars is not None:
            self.bars.stop()
            self.bars = None
            self.tasks.clear()

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
        if self.bars is None:
            self.bars = Progress(
                TextColumn("  {task.description}"),
                BarColumn(bar_width=BAR_WIDTH),
                DownloadColumn(),
                TransferSpeedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=Console(file=self.stream, force_terminal=True),
            )
            self.bars.start()
        task = self.tasks.get(p.filename)
        if task is None:
            name = p.filename.rsplit("/", 1)[-1]
            task = self.tasks[p.filename] = self.bars.add_task(name, total=p.total or None)
        self.bars.update(task, completed=p.downloaded, total=p.total or None)

    def _finish(self, p: DownloadProgress, state: _FileState) -> None:
        name = p.filename.rsplit("/", 1)[-1] if self.tty else p.filename
        if state.saw_transfer:
            took = time.monotonic() - state.started
            got = p.downloaded - state.start_bytes
            rate = f", {format_bytes(got / took)}/s" if took > 0 else ""
            text = f"  ✓ {name}  {format_bytes(p.total)} in {format_duration(took)}{rate}, checksum verified"
        else:
            text = f"  ✓ {name}  {format_bytes(p.total)} (already downloaded)"
        task = self.tasks.pop(p.filename, None)
        if self.bars is not None:  # (printed above the bars of the files still downloading)
            if task is not None:
                self.bars.remove_task(task)
            self.bars.console.print(text, markup=False, highlight=False, soft_wrap=True)
            if not self.tasks:
                self.close()
        else:
            self._line(text if self.tty else text.replace("✓", "done:", 1))

    def _line(self, text: str) -> None:
        self.close()
        self.stream.write(text + "\n")
        self.stream.flush()
