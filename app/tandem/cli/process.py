"""Process-level helpers for the CLI: Ctrl+C handling and memory readings."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def interrupt_sets(cancel: threading.Event) -> Iterator[None]:
    """While active, the first Ctrl+C asks the generation to stop (it finishes the current step,
    keeps what was written and leaves the caches consistent); a second one aborts at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(_sig: int, _frame: FrameType | None) -> None:
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB
