"""Let the engine have the CPU first: the UI thread runs at a lower scheduling priority.

On a CPU-only machine llama.cpp keeps every core busy while it decodes, and whenever the UI
thread draws, it takes a core from one of llama.cpp's threads while the others wait for it at
the next barrier: on the 2-core test machine a UI using 6% of a core cost the engine ~12% of
its speed. Lowering the UI thread's priority (Linux: per-thread nice) makes the scheduler run
it in the gaps instead, so drawing slows down a little when the CPU is saturated and the engine
does not. With the model on a GPU the CPU has room for both and nothing changes.

A thread starts with the priority of the thread that created it, and an unprivileged process
cannot raise a priority back. So the engine's threads (Textual thread workers, and through them
llama.cpp's own) must not be created by the UI thread once it is lowered: `WorkerPool` starts
its threads from a launcher thread that keeps the normal priority, and the app makes it the
event loop's default executor (which Textual's thread workers use) before lowering the UI.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

UI_NICE = 19  # the lowest priority: the UI gets the CPU the engine leaves

# A call to start on the pool, and where its Future (or the error) goes back.
_Request = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], "queue.SimpleQueue[Any]"]


class WorkerPool(ThreadPoolExecutor):
    """A thread pool whose threads are created by a launcher thread with normal priority."""

    def __init__(self) -> None:
        super().__init__(thread_name_prefix="tandem-worker")
        self._requests: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._launcher = threading.Thread(target=self._launch, name="tandem-launcher", daemon=True)
        self._launcher.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        if threading.current_thread() is self._launcher:
            return super().submit(fn, *args, **kwargs)
        # The pool starts a new thread inside submit() when none is idle, so submit() itself
        # runs on the launcher; the caller waits only for that hand-off.
        reply: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._requests.put((fn, args, kwargs, reply))
        ok, value = reply.get()
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def _launch(self) -> None:
        while True:
            fn, args, kwargs, reply = self._requests.get()
            try:
                reply.put((True, ThreadPoolExecutor.submit(self, fn, *args, **kwargs)))
            except BaseException as exc:  # e.g. submit after shutdown: the caller raises it
                reply.put((False, exc))


def ui_nice() -> int:
    """The nice value for the UI thread: UI_NICE, or TANDEM_UI_NICE (0 turns this off)."""
    try:
        return max(0, min(19, int(os.environ.get("TANDEM_UI_NICE", UI_NICE))))
    except ValueError:
        return UI_NICE


def thread_nice() -> int | None:
    """The calling thread's nice value (Linux), None where threads have no nice of their own."""
    if not sys.platform.startswith("linux"):
        return None
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def lower_this_thread(nice: int) -> bool:
    """Lower the calling thread's priority to `nice` (never raises it). True when it applied.

    Linux only: there, setpriority on a thread id applies to that thread alone. Elsewhere
    (macOS runs the model on the GPU with Metal) it would apply to the whole process, so it is
    left alone."""
    current = thread_nice()
    if current is None or nice <= current:
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except OSError:
        return False
    return True
