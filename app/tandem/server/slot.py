"""The one generation a pair runs at a time, and the bounded queue in front of it.

A pair has one llama.cpp context per model, so it serves one request at a time. Requests that
arrive meanwhile wait their turn in a queue of bounded length (first come, first served); past
it they get a 429 at once, which clients retry. A request whose client goes away while waiting
leaves the queue.

The generation runs in a thread of its own (llama.cpp releases the GIL while it computes): its
events reach the event loop a round at a time, so the loop does a round's work once, not a
token's. Its `cancel` stops it within a round (the engine checks it before every round and
inside a long prefill). The turn passes to the next request only when the thread has really
ended, so the next request never meets a pair that is still busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tandem.engine import DoneEvent, Event, GenerationConfig, PrefillEvent, RoundEvent, TandemError

from .errors import ApiError
from .stopping import Stopping

if TYPE_CHECKING:
    from tandem.engine import ModelPair


class ClientGone(Exception):
    """The client disconnected while its request waited for its turn."""


def _shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")


@dataclass
class _Failure:
    error: BaseException


_END = object()


class Generation:
    """One running generation: its events, a round at a time, and how to stop it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.cancel = threading.Event()
        self._loop = loop
        self._queue: asyncio.Queue[object] = asyncio.Queue()

    def _put(self, item: object) -> None:
        _call_soon(self._loop, self._queue.put_nowait, item)

    async def batches(self) -> AsyncIterator[list[Event]]:
        """The events, grouped a round at a time (the last batch holds the DoneEvent). Leaving
        the loop early (the client went away) cancels the generation."""
        try:
            while True:
                item = await self._queue.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                assert isinstance(item, list)
                yield item
        finally:
            self.cancel.set()  # a no-op once it ended


class Slot:
    """One pair, one generation at a time, at most `max_waiting` requests queued behind it."""

    n_seq = 1  # requests answered at once

    def __init__(self, pair: ModelPair, max_waiting: int) -> None:
        self.pair = pair
        self.max_waiting = max_waiting
        self._waiting = 0
        self._turn: asyncio.Lock | None = None  # made in the serving loop, on first use
        self._running: Generation | None = None
        self._thread: threading.Thread | None = None
        self.stopping = Stopping()  # set at shutdown
        # Answers given so far, by how they ended ("eog", "max_tokens", "cancelled"...): /health.
        self.ended: Counter[str] = Counter()

    @property
    def busy(self) -> bool:
        return self._turn is not None and self._turn.locked()

    @property
    def waiting(self) -> int:
        return self._waiting

    def _lock(self) -> asyncio.Lock:
        if self._turn is None:
            self._turn = asyncio.Lock()  # fair: waiters get it in the order they came
        return self._turn

    async def acquire(self, gone: Awaitable[None]) -> None:
        """Wait for this request's turn. Raises ApiError 429 when the queue is full, 503 when
        the server is shutting down, and ClientGone when `gone` (the client disconnecting)
        finishes first. The turn then belongs to the next `start`."""
        watch = asyncio.ensure_future(gone)
        try:
            if self.stopping.is_set():
                raise _shutting_down()
            lock = self._lock()
            if lock.locked() and self._waiting >= self.max_waiting:
                raise ApiError(
                    429,
                    f"the server is busy: one request is being answered and {self._waiting} are "
                    f"waiting, the most it queues (tandem serve --queue {self.max_waiting}); retry shortly",
                    type="rate_limit_error",
                    code="queue_full",
                )
            self._waiting += 1
            take = asyncio.ensure_future(lock.acquire())
            try:
                await asyncio.wait({take, watch}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._waiting -= 1
                if not take.done():
                    take.cancel()  # (asyncio.Lock passes the turn on to the next waiter)
            if not take.done() or take.cancelled():
                raise ClientGone
            if self.stopping.is_set():
                lock.release()
                raise _shutting_down()
        finally:
            watch.cancel()

    def prepare(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool
    ) -> GenerationConfig:
        """Refuse now what the engine would refuse (TandemError; ContextOverflowError for a prompt
        that does not fit), before waiting for the pair; the config to start with."""
        self.pair.check_request(prompt, config, speculative=speculative)
        return config

    def start(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool = True
    ) -> Generation:
        """Start the generation whose turn it is (after `acquire`)."""
        loop = asyncio.get_running_loop()
        gen = Generation(loop)
        self._running = gen

        def release() -> None:
            self._running = None
            self._lock().release()

        def work() -> None:
            try:
                batch: list[Event] = []
                for ev in _events(self.pair, prompt, config, gen.cancel, speculative):
                    batch.append(ev)
                    if type(ev) is RoundEvent or isinstance(ev, (PrefillEvent, DoneEvent)):
                        if isinstance(ev, DoneEvent):
                            self.ended[ev.stats.stop_reason] += 1
                        gen._put(batch)
                        batch = []
                if batch:
                    gen._put(batch)
            except BaseException as exc:  # answered to the request that asked
                gen._put(_Failure(exc))
            finally:
                gen._put(_END)
                _call_soon(loop, release)

        if self.stopping.is_set():
            gen.cancel.set()
        thread = threading.Thread(target=work, name="tandem-generation", daemon=True)
        try:
            thread.start()
        except BaseException:
            release()
            raise
        self._thread = thread
        return gen

    def join(self) -> None:
        """Wait for the last generation's thread to end: it may still be in llama.cpp when the
        server stops, and the models must not be closed under it (once cancelled, it ends
        within a round, or a prompt chunk)."""
        if self._thread is not None:
            self._thread.join()

    def shutdown(self) -> None:
        """Stop the running generation (within a round); refuse the waiting and new requests."""
        self.stopping.set()
        running = self._running
        if running is not None:
            running.cancel.set()


def _call_soon(loop: asyncio.AbstractEventLoop, callback: Callable[..., object], *args: object) -> None:
    """Hand `callback` to the event loop from the generation's thread; nothing to do once the
    loop has closed (the server stopped: nobody waits for this)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(callback, *args)


def _events(
    pair: ModelPair,
    prompt: Sequence[int],
    config: GenerationConfig,
    cancel: threading.Event,
    speculative: bool,
) -> Iterator[Event]:
    try:
        yield from pair.generate(prompt, config, speculative=speculative, cancel=cancel)
    except MemoryError:
        raise TandemError("out of memory while generating: use a smaller context (--ctx) or model") from None
