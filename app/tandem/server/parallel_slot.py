"""Several requests answered at once (`tandem serve --parallel N`): the batched engine's loop.

The same face as slot.py's `Slot` (acquire, prepare, start, shutdown, join) over the engine's
`BatchEngine` (engine/decoding/batch.py), whose one thread advances every running request a round at a
time in one batch. Up to N requests run; up to `max_waiting` more wait in its inbox (first
come, first served) and join between rounds as sequences free up; past that a 429. A client
that reads its stream slowly only pauses its own sequence (the engine skips a sequence whose
reader has fallen MAX_UNREAD rounds behind), and a client that leaves cancels its own.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from tandem.engine import BatchEngine, DoneEvent, Event, GenerationConfig, SeqRequest, TandemError

from .errors import ApiError
from .slot import _END, ClientGone, Generation, _call_soon, _Failure, _shutting_down
from .stopping import Stopping

if TYPE_CHECKING:
    from tandem.engine import ModelPair


class _Mailbox:
    """What the engine's thread hands the event loop, with one wakeup for all a round sends:
    every `call_soon_threadsafe` costs a self-pipe write and a wakeup of the loop, a syscall
    each, and a round emits to every sequence."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., object], tuple[object, ...]]] = []

    def post(self, fn: Callable[..., object], *args: object) -> None:
        with self._lock:
            first = not self._calls
            self._calls.append((fn, args))
        if first:
            _call_soon(self.loop, self._run)

    def _run(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception as exc:  # (as the loop treats a failing callback: logged, not fatal)
                failure = {"message": "a generation's callback failed", "exception": exc}
                self.loop.call_exception_handler(failure)


class ParallelSlot:
    """One pair, up to `n_seq` generations advanced together."""

    def __init__(self, pair: ModelPair, engine: BatchEngine, max_waiting: int) -> None:
        self.pair = pair
        self.engine = engine
        self.n_seq = engine.n_seq
        self.max_waiting = max_waiting
        self._in_flight = 0  # started and not ended (running or in the engine's inbox)
        self._running: set[Generation] = set()
        self._mailbox: _Mailbox | None = None  # made in the serving loop, on first use
        self.stopping = Stopping()
        self.ended: Counter[str] = Counter()
        self._thread = threading.Thread(target=engine.run, name="tandem-batch", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._in_flight > 0

    @property
    def waiting(self) -> int:
        return max(0, self._in_flight - self.n_seq)

    async def acquire(self, gone: Awaitable[None]) -> None:
        """Admit the request, or raise ApiError 429 (all sequences busy and the queue full) or 503
        (shutting down). Waiting happens in the engine, between rounds."""
        asyncio.ensure_future(gone).cancel()  # (nothing to wait for here)
        if self.stopping.is_set():
            raise _shutting_down()
        if self._in_flight >= self.n_seq + self.max_waiting:
            raise ApiError(
                429,
                f"the server is busy: {self.n_seq} requests are being answered and {self.waiting} are "
                f"waiting, the most it queues (tandem serve --queue {self.max_waiting}); retry shortly",
                type="rate_limit_error",
                code="queue_full",
            )
        self._in_flight += 1

    def prepare(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool
    ) -> GenerationConfig:
        """The config as a parallel sequence runs it; TandemError for what it cannot run."""
        config = self.engine.check(config, speculative)
        self.pair.check_request(prompt, config, speculative=speculative)
        return config

    def start(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool = True
    ) -> Generation:
        loop = asyncio.get_running_loop()
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = _Mailbox(loop)
        post = self._mailbox.post
        gen = Generation(loop)
        put = gen._queue.put_nowait
        self._running.add(gen)
        finished = False

        def end() -> None:
            self._in_flight -= 1
            self._running.discard(gen)

        def emit(events: list[Event]) -> None:
            nonlocal finished
            post(put, events)
            if events and isinstance(events[-1], DoneEvent):
                self.ended[events[-1].stats.stop_reason] += 1
                finished = True
                post(put, _END)
                post(end)

        def fail(exc: BaseException) -> None:
            nonlocal finished
            if finished:
                return
            finished = True
            if isinstance(exc, MemoryError):
                exc = TandemError("out of memory while generating: use a smaller context (--ctx) or model")
            post(put, _Failure(exc))
            post(put, _END)
            post(end)

        if self.stopping.is_set():
            gen.cancel.set()
        self.engine.submit(SeqRequest(prompt, config, speculative, emit, fail, gen.cancel, gen._queue.qsize))
        return gen

    def join(self) -> None:
        """Stop the engine's loop (the running answers end, cancelled, within a round)."""
        self.engine.stop()
        self._thread.join()
        self.engine.close()

    def shutdown(self) -> None:
        self.stopping.set()
        for gen in list(self._running):
            gen.cancel.set()


__all__ = ["ClientGone", "ParallelSlot"]
