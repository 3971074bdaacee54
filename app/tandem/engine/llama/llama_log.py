"""Route llama.cpp's log output away from the terminal and keep the recent lines.

llama.cpp logs hundreds of lines per model load to stderr, which would garble the CLI's output
and the TUI's screen. We install one process-wide callback that keeps the last lines in memory
(load failures are explained from them) and echoes them only when TANDEM_LLAMA_LOG=1.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections import deque

from .llama_lib import llama_cpp

LEVEL_WARN = 3
LEVEL_ERROR = 4  # ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5
_LEVEL_CONT = 5

_lock = threading.Lock()
_lines: deque[tuple[int, int, str]] = deque(maxlen=400)  # (sequence number, level, text)
_partial: list[str] = []
_next_seq = 0
_last_level = 1
_installed = False
_echo = os.environ.get("TANDEM_LLAMA_LOG", "") not in ("", "0")


@llama_cpp.llama_log_callback  # type: ignore[untyped-decorator,misc]
def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
    global _last_level, _next_seq
    msg = text.decode("utf-8", errors="replace") if text else ""
    if _echo:
        sys.stderr.write(msg)
    with _lock:
        if level != _LEVEL_CONT:
            _last_level = level
        _partial.append(msg)
        if msg.endswith("\n"):
            _lines.append((_next_seq, _last_level, "".join(_partial).rstrip()))
            _next_seq += 1
            _partial.clear()


def install() -> None:
    """Install the callback once (llama-cpp-python installs its own at import)."""
    global _installed
    if not _installed:
        llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
        _installed = True


def mark() -> int:
    """A position in the log; lines_since(mark) returns what was logged after it."""
    with _lock:
        return _next_seq


def lines_since(position: int, min_level: int = 0) -> list[str]:
    with _lock:
        return [text for seq, level, text in _lines if seq >= position and level >= min_level]
