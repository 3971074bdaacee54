"""Building prompts (rendering the chat template, tokenizing) off the event loop, in threads that
the server can stop and wait for.

A prompt is built with the models' tokenizer, so it must never outlive them: each build runs in
a thread of its own, tracked here, with a cancel event the build checks as it goes. A client
that leaves cancels its build; a stopping server cancels every build and joins their threads
before the models are closed (a build stops within one piece of the prompt, milliseconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tandem.engine import PromptCancelled

T = TypeVar("T")


class ClientGone(Exception):
    """The client disconnected while its prompt was being built."""


class StoppedBuilding(Exception):
    """The server is stopping: the prompt was not built."""


class PromptBuilds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[threading.Thread, threading.Event] = {}
        self._stopping = False

    @property
    def running(self) -> int:
        """Prompts being built now (/health)."""
        with self._lock:
            return len(self._running)

    async def build(self, work: Callable[[threading.Event], T], gone: Awaitable[None]) -> T:
        """`work(cancel)` in a thread of its own. Raises ClientGone when `gone` (the client
        disconnecting) finishes first, StoppedBuilding when the server stops meanwhile, and
        what `work` raises."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[T] = loop.create_future()
        cancel = threading.Event()

        def settle(outcome: Callable[[], None]) -> None:
            if not done.done():
                outcome()

        def run() -> None:
            try:
                result = work(cancel)
            except BaseException as exc:  # handed to the request that asked
                error = exc
                _call_soon(loop, settle, lambda: done.set_exception(error))
            else:
                _call_soon(loop, settle, lambda: done.set_result(result))
            finally:
                with self._lock:
                    self._running.pop(threading.current_thread(), None)

        thread = threading.Thread(target=run, name="tandem-prompt", daemon=True)
        with self._lock:
            if self._stopping:
                raise StoppedBuilding
            self._running[thread] = cancel
            try:
                thread.start()
            except BaseException:
                del self._running[thread]
                raise
        watch: asyncio.Future[None] = asyncio.ensure_future(gone)
        try:
            either: list[asyncio.Future[Any]] = [done, watch]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            if not done.done():
                cancel.set()  # the client left (or this request was cancelled): stop the work
                # Nobody will read what the build ends with: cancelled now, `settle` drops it
                # (else asyncio logs "Future exception was never retrieved" when it is freed).
                done.cancel()
        if done.cancelled():
            raise ClientGone
        try:
            return done.result()
        except PromptCancelled:
            raise StoppedBuilding from None

    def stop(self) -> None:
        """Cancel every build, and refuse new ones (callable from any thread)."""
        with self._lock:
            self._stopping = True
            for cancel in self._running.values():
                cancel.set()

    def join(self) -> None:
        """Wait until no build runs (after stop: each ends within a piece of its prompt)."""
        while True:
            with self._lock:
                threads = list(self._running)
            if not threads:
                return
            for thread in threads:
                thread.join()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object) -> None:
    """Hand `callback` to the event loop from a build's thread; nothing to do once the loop has
    closed (the server stopped: nobody waits for this)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)
