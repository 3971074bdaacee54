"""One request at a time behind the batched engine's face (submit, run, stop, close, check,
withdraw), so that a server holds one kind of slot whatever its --parallel: `tandem serve
--parallel 1`, and a pair the batched engine cannot take (a recurrent target), answer here,
every drafter kind as `tandem run` runs it.

Requests wait in an inbox, first come first served; the engine's thread answers them one after
another through `ModelPair.generate` and hands their events over a round at a time.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..engine import DoneEvent, Event, GenerationConfig, PrefillEvent, RoundEvent, TandemError
from ..engine.decoding.inbox import Inbox
from .drafting import offered

if TYPE_CHECKING:
    from ..engine import ModelPair, SeqRequest


class SerialEngine:
    """One pair, one generation at a time, in the thread that calls `run`."""

    n_seq = 1  # requests answered at once

    def __init__(self, pair: ModelPair) -> None:
        self.pair = pair
        self._inbox: Inbox[SeqRequest] = Inbox()
        self._group: str | None = None  # whose tokens the pair's caches hold (SeqRequest.cache_group)
        self._current: SeqRequest | None = None  # the request being answered
        self.ready = threading.Event()  # (nothing to measure first)
        self.ready.set()

    @property
    def kinds(self) -> list[str]:
        """The kinds the pair drafts with: every kind it offers."""
        return offered(self.pair)

    def check(self, config: GenerationConfig, speculative: bool) -> GenerationConfig:
        """Every config one sequence can run (ModelPair.check_request says what it cannot)."""
        return config

    def submit(self, req: SeqRequest) -> None:
        self._inbox.put(req)

    def withdraw(self, req: SeqRequest) -> bool:
        """Take a request that has not started out of the inbox; False once it has."""
        return self._inbox.withdraw(req)

    def stop(self) -> None:
        """Take no more requests; the one being answered is cancelled (it ends within a round,
        as the batched engine's do) and those waiting are told."""
        self._inbox.stop()
        current = self._current
        if current is not None:
            current.cancel.set()

    def close(self) -> None:
        """Nothing of its own: the pair is closed by whoever opened it."""

    def run(self) -> None:
        """Answers until stopped; the requests still waiting then are told the server stops."""
        while (req := self._inbox.next()) is not None:
            if req.cache_group is None or req.cache_group != self._group:
                # Nothing cached by another group is reused (nor its time saved, which shows).
                for model in (self.pair.target, self.pair.draft):
                    if model is not None:
                        model.truncate(0, replay=False)
            self._group = req.cache_group
            self._current = req
            if self._inbox.stopped:  # (stopped while it was being taken)
                req.cancel.set()
            _answer(self.pair, req)
            self._current = None
        for req in self._inbox.drain():
            req.fail(TandemError("the server is shutting down"))


def _answer(pair: ModelPair, req: SeqRequest) -> None:
    """One generation, its events handed over a round at a time (the loop does a round's work
    once, not a token's); a failure goes to the request that asked."""
    try:
        batch: list[Event] = []
        events = pair.generate(
            req.prompt, req.config, speculative=req.speculative, cancel=req.cancel, costs=req.costs
        )
        for ev in events:
            batch.append(ev)
            if type(ev) is RoundEvent or isinstance(ev, (PrefillEvent, DoneEvent)):
                req.emit(batch)
                batch = []
        if batch:
            req.emit(batch)
    except BaseException as exc:
        req.fail(exc)
        if not isinstance(exc, Exception):
            raise
