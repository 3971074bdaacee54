"""The one way a front-end gets answers: a loaded pair, the engine that answers its requests in
a thread of its own, the queue in front of it and the hand-off of events back.

    Runner.open(pair, parallel=N)   the serial engine (session/serial.py: one request at a
                                    time, every drafter kind) for N = 1, the batched one
                                    (engine/decoding/batch.py) above
    runner.submit(request)          events reach the request's `emit` a round at a time, from
                                    the engine's thread: the server posts them to its event
                                    loop, the app to its screen (both through session/handoff.py)
    runner.stream(prompt, config)   the same as an iterator the caller's thread waits on (the
                                    CLI, the benchmark); leaving it early cancels the answer
    with runner.using():            the pair held open for work beside the engine (a prompt
                                    rendered and tokenized while another answer runs)
    runner.close()                  the running answers cancelled (within a round), the waiting
                                    ones told, the thread joined: the pair can then be closed

No front-end calls the engine itself, so none runs llama.cpp in its own loop, and every one of
them gets the same queue, cancelling and failures.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from ..engine import DoneEvent, Event, GenerationConfig, TandemError
from .handoff import Handoff
from .serial import SerialEngine

if TYPE_CHECKING:
    from ..engine import CostModel, ModelPair, SeqRequest


# How often `stream` takes what the engine has produced, at most: text shown 20 times a second
# reads as live, and each wake of the reader's thread costs the engine (below).
STREAM_DRAIN_S = 0.05


class Engine(Protocol):
    """What a runner drives: engine.BatchEngine, or SerialEngine."""

    n_seq: int  # requests answered at once
    ready: threading.Event  # set once it takes requests (the batched engine times its decodes first)

    @property
    def kinds(self) -> list[str]: ...  # the drafter kinds it drafts with

    def check(self, config: GenerationConfig, speculative: bool) -> GenerationConfig: ...
    def submit(self, req: SeqRequest) -> None: ...
    def withdraw(self, req: SeqRequest) -> bool: ...
    def run(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...


def out_of_memory(exc: BaseException) -> BaseException:
    """A MemoryError from the engine as the one line a user acts on."""
    if isinstance(exc, MemoryError):
        return TandemError("out of memory while generating: use a smaller context (--ctx) or model")
    return exc


class Runner:
    """One pair and its engine's thread. The pair stays its opener's to close, after `close`."""

    def __init__(self, pair: ModelPair, engine: Engine) -> None:
        self.pair = pair
        self.engine = engine
        self.n_seq = engine.n_seq
        self._open = threading.Lock()  # held by `using` and by `close`
        self.closed = False
        self._thread = threading.Thread(target=engine.run, name="tandem-engine", daemon=True)
        self._thread.start()

    @classmethod
    def open(
        cls,
        pair: ModelPair,
        *,
        parallel: int = 1,
        speculative: bool = True,
        warn: Callable[[str], None] | None = None,
    ) -> Runner:
        """`parallel` > 1: the batched engine, which drafts with the kinds that serve several
        sequences (`warn` is told the kinds it leaves out, with why; a target it cannot take
        falls back to one request at a time, also told); 1: the serial engine,
        every kind exactly as a single answer runs it."""
        if parallel == 1:
            return cls(pair, SerialEngine(pair))
        from ..engine import BatchEngine  # (numpy and the batched loop: only when asked for)

        draft = pair.draft if speculative else None
        lost = BatchEngine.left_out(pair.target, pair.draft) if speculative else []
        try:
            # (From what an earlier engine measured here: what it calibrated is not timed again.)
            engine = BatchEngine(pair.target, draft, pair.batch_costs)
        except TandemError as exc:
            if warn is not None:
                warn(f"{exc}; answering one request at a time")
            return cls(pair, SerialEngine(pair))
        pair.batch_costs = engine.costs  # (kept with the pair: session/learnt.py)
        if lost and warn is not None:
            kinds = ", ".join(engine.kinds) or "nothing"
            warn(
                f"parallel sequences draft with {kinds}, not with {'; '.join(lost)} (--parallel 1 keeps them)"
            )
        return cls(pair, engine)

    @property
    def kinds(self) -> list[str]:
        """The drafter kinds its engine drafts with."""
        return self.engine.kinds

    @property
    def ready(self) -> threading.Event:
        return self.engine.ready

    def check(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool
    ) -> GenerationConfig:
        """Refuse now what the engine would refuse (TandemError; ContextOverflowError for a prompt
        that does not fit), before the request waits; the config as the engine runs it."""
        config = self.engine.check(config, speculative)
        self.pair.check_request(prompt, config, speculative=speculative)
        return config

    # ------------------------------------------------------------------ asking
    def submit(self, req: SeqRequest) -> None:
        """Queue `req`; its `emit` and `fail` are called from the engine's thread."""
        if self.closed:
            raise TandemError("the model pair was unloaded; load a pair to continue")
        self.engine.submit(req)

    def withdraw(self, req: SeqRequest) -> bool:
        """Take a request that has not started out of the queue; False once it has."""
        return self.engine.withdraw(req)

    def stream(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        *,
        speculative: bool = True,
        cancel: threading.Event | None = None,
        cache_group: str | None = "",
        costs: CostModel | None = None,
    ) -> Iterator[Event]:
        """One answer's events in the caller's thread, which waits for each round's (a failure
        is raised here). Leaving the loop early cancels the answer."""
        from ..engine import SeqRequest

        woken = threading.Event()
        box: Handoff[list[Event] | BaseException] = Handoff(woken.set)

        def fail(exc: BaseException) -> None:
            box.push(out_of_memory(exc))

        own_cancel = cancel if cancel is not None else threading.Event()
        req = SeqRequest(
            prompt, config, speculative, box.push, fail, own_cancel, cache_group=cache_group, costs=costs
        )
        self.submit(req)
        ended = False
        try:
            while not ended:
                woken.wait()
                woken.clear()
                for item in box.drain():
                    if isinstance(item, BaseException):
                        ended = True
                        raise item
                    yield from item
                    if item and isinstance(item[-1], DoneEvent):
                        ended = True
                if not ended:
                    # Rounds come faster than a reader needs them (a token a round for the target
                    # alone), and each wake of this thread takes the GIL from the engine's for a
                    # moment: woken per round, 41 us more a token outside llama.cpp (SmolLM2
                    # Q4_0, one thread; every 20 ms, 18 us; every 50 ms, within the noise).
                    # What arrives meanwhile waits in the box.
                    time.sleep(STREAM_DRAIN_S)
        finally:
            if not ended:
                req.cancel.set()
                self.withdraw(req)

    # ------------------------------------------------------------------ lifetime
    @contextlib.contextmanager
    def using(self) -> Iterator[ModelPair]:
        """The pair, kept open while the caller uses it beside the engine (its vocabulary and
        template: llama.cpp's tokenizer reads the model, never a context)."""
        with self._open:
            if self.closed:
                raise TandemError("the model pair was unloaded; load a pair to continue")
            yield self.pair

    def stop(self) -> None:
        """Take no more requests: the running ones end within a round (cancelled), the waiting
        ones are told the engine stops."""
        self.engine.stop()

    def close(self) -> None:
        """Stop, wait for the engine's thread (it may be inside llama.cpp: the models must not
        be closed under it) and free the engine's own contexts. Idempotent."""
        with self._open:
            if self.closed:
                return
            self.closed = True
        self.engine.stop()
        self._thread.join()
        self.engine.close()

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
