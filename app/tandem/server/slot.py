"""The requests a server answers, and the bounded queue in front of them: one class whatever
`--parallel` says.

The session's runner (session/runner.py) answers them in its engine's thread (llama.cpp
releases the GIL while it computes): with `--parallel N` above 1 the batched engine advances up
to N requests a round at a time in one batch; with 1 (or a pair the batched engine cannot take)
the serial engine answers one after another, every drafter kind as `tandem run`.
Up to `max_waiting` more requests wait in the engine's inbox (first come, first served) and start
as sequences free up; past that a 429, which clients retry. A client that leaves while waiting
leaves the queue (it never runs); one that leaves while answered cancels its own generation
within a round. A client that reads its stream slowly pauses only its own sequence.

Events reach the event loop a round at a time, through one mailbox with one wakeup for all a
round sends (`Mailbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tandem.engine import DoneEvent, Event, GenerationConfig, SeqRequest
from tandem.session.handoff import Handoff
from tandem.session.runner import out_of_memory

from .errors import ApiError
from .stopping import Stopping

if TYPE_CHECKING:
    from tandem.session.runner import Runner


def shutting_down() -> ApiError:
    return ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")


@dataclass
class _Failure:
    error: BaseException


_END = object()


class Mailbox:
    """What the engine's thread hands the event loop: calls, run on the loop in order, with one
    wakeup for all a round sends (session/handoff.py: every `call_soon_threadsafe` costs a
    self-pipe write and a wakeup of the loop, a syscall each, and a round emits to every
    sequence)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._box: Handoff[tuple[Callable[..., object], tuple[object, ...]]] = Handoff(self._wake)

    def _wake(self) -> None:
        # (nothing to do once the loop has closed: the server stopped, nobody waits)
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._run)

    def post(self, fn: Callable[..., object], *args: object) -> None:
        self._box.push((fn, args))

    def _run(self) -> None:
        for fn, args in self._box.drain():
            try:
                fn(*args)
            except Exception as exc:  # (as the loop treats a failing callback: logged, not fatal)
                failure = {"message": "a generation's callback failed", "exception": exc}
                self.loop.call_exception_handler(failure)


class Generation:
    """One request's generation: its events, a round at a time, and how to stop it."""

    def __init__(self, leave: Callable[[Generation], None]) -> None:
        self.cancel = threading.Event()
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self._leave = leave

    def stop(self) -> None:
        """Its client is gone or the answer is dropped: out of the queue if it has not started,
        else cancelled (it ends within a round). Idempotent."""
        if not self.cancel.is_set():
            self.cancel.set()
            self._leave(self)

    async def batches(self) -> AsyncIterator[list[Event]]:
        """The events, grouped a round at a time (the last batch holds the DoneEvent). Leaving
        the loop early (the client went away) stops the generation."""
        try:
            while True:
                item = await self.queue.get()
                if item is _END:
                    return
                if isinstance(item, _Failure):
                    raise item.error
                assert isinstance(item, list)
                yield item
        finally:
            self.stop()  # a no-op once it ended


class Slot:
    """One pair, up to `n_seq` generations at once and `max_waiting` more queued."""

    def __init__(self, runner: Runner, max_waiting: int) -> None:
        self.runner = runner
        self.n_seq = runner.n_seq
        self.max_waiting = max_waiting
        self._in_flight = 0  # started and not ended (answered, or in the engine's inbox)
        self._running: dict[Generation, SeqRequest] = {}
        self._mailbox: Mailbox | None = None  # made in the serving loop, on first use
        self.stopping = Stopping()  # set at shutdown
        # Answers given so far, by how they ended ("eog", "max_tokens", "cancelled"...): /health.
        self.ended: Counter[str] = Counter()

    @property
    def busy(self) -> bool:
        return self._in_flight > 0

    @property
    def waiting(self) -> int:
        return max(0, self._in_flight - self.n_seq)

    def admit(self) -> None:
        """Admit the request, or raise ApiError 429 (every sequence busy and the queue full) or
        503 (shutting down). Waiting happens in the engine's inbox; a client that leaves while it
        waits stops its Generation, which withdraws it."""
        if self.stopping.is_set():
            raise shutting_down()
        if self._in_flight >= self.n_seq + self.max_waiting:
            answered = "one request is" if self.n_seq == 1 else f"{self.n_seq} requests are"
            raise ApiError(
                429,
                f"the server is busy: {answered} being answered and {self.waiting} are waiting, "
                f"the most it queues (tandem serve --queue {self.max_waiting}); retry shortly",
                type="rate_limit_error",
                code="queue_full",
            )
        self._in_flight += 1

    def prepare(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool
    ) -> GenerationConfig:
        """Refuse now what the engine would refuse (TandemError; ContextOverflowError for a prompt
        that does not fit), before the request waits; the config as the engine runs it."""
        return self.runner.check(prompt, config, speculative=speculative)

    def start(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        *,
        speculative: bool = True,
        cache_group: str | None = "",
    ) -> Generation:
        """Hand an admitted request (after `admit`) to the engine; `cache_group`: whose cached
        prefixes it may reuse (SeqRequest.cache_group)."""
        loop = asyncio.get_running_loop()
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = Mailbox(loop)
        post = self._mailbox.post
        finished = False

        def end() -> None:
            self._in_flight -= 1
            self._running.pop(gen, None)

        def leave(gen: Generation) -> None:  # (on the loop: the client went away)
            req = self._running.get(gen)
            if req is not None and self.runner.withdraw(req):
                # It never ran (the engine will not call emit or fail): not an answer, and its
                # place is free now.
                gen.queue.put_nowait(_END)
                end()

        gen = Generation(leave)
        put = gen.queue.put_nowait

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
            post(put, _Failure(out_of_memory(exc)))
            post(put, _END)
            post(end)

        req = SeqRequest(prompt, config, speculative, emit, fail, gen.cancel, gen.queue.qsize, cache_group)
        self._running[gen] = req
        if self.stopping.is_set():
            gen.cancel.set()
        self.runner.submit(req)
        return gen

    def join(self) -> None:
        """Stop the engine's thread and wait for it: it may still be in llama.cpp when the server
        stops, and the models must not be closed under it (the running answers end, cancelled,
        within a round or a prompt chunk)."""
        self.runner.close()

    def shutdown(self) -> None:
        """Stop the running generations (within a round); refuse the waiting and new requests."""
        self.stopping.set()
        if not self.runner.ready.is_set():  # (still timing its decodes: stop that now)
            self.runner.stop()
        for gen in list(self._running):
            gen.cancel.set()
