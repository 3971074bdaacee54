"""Whether the server is stopping: for threads (the generation, prompt builds) and for the event
loop (a request still reading its body), set from a signal handler or any thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class Stopping:
    def __init__(self) -> None:
        self._set = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None  # made in the serving loop, on first wait

    def is_set(self) -> bool:
        return self._set.is_set()

    def set(self) -> None:
        with self._lock:
            self._set.set()
            loop, event = self._loop, self._event
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(event.set)

    async def wait(self) -> None:
        with self._lock:
            if self._event is None:
                self._loop = asyncio.get_running_loop()
                self._event = asyncio.Event()
            event = self._event
            if self._set.is_set():
                return
        await event.wait()
