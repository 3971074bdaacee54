"""Driving the batched engine (engine/decoding/batch.py) in tests: a loop in a thread, requests
that record what they were told."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tandem.engine import (
    BatchEngine,
    DoneEvent,
    Event,
    GenerationConfig,
    ModelPair,
    PrefillEvent,
    SeqRequest,
    TokenEvent,
)


@contextmanager
def running(pair: ModelPair) -> Iterator[BatchEngine]:
    """A BatchEngine over `pair`, its loop in a thread, stopped and closed at the end."""
    eng = BatchEngine(pair.target, pair.draft)
    thread = threading.Thread(target=eng.run, daemon=True)
    thread.start()
    try:
        yield eng
    finally:
        eng.stop()
        thread.join(30)
        eng.close()
    assert not thread.is_alive()


@dataclass
class Asked:
    """One request's events as the engine told them, and its end."""

    prompt: list[int]
    config: GenerationConfig
    speculative: bool = True
    events: list[Event] = field(default_factory=list)
    done: DoneEvent | None = None
    error: BaseException | None = None
    ended: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)
    unread: int = 0
    first_token_at: float = 0.0
    prefilled_at: float = 0.0

    @property
    def tokens(self) -> list[int]:
        return [e.id for e in self.events if isinstance(e, TokenEvent)]


def submit(engine: BatchEngine, asked: Asked) -> None:
    def emit(events: list[Event]) -> None:
        now = time.perf_counter()
        if not asked.first_token_at and any(isinstance(e, TokenEvent) for e in events):
            asked.first_token_at = now
        if any(isinstance(e, PrefillEvent) for e in events):
            asked.prefilled_at = now
        asked.events.extend(events)
        if events and isinstance(events[-1], DoneEvent):
            asked.done = events[-1]
            asked.ended.set()

    def fail(exc: BaseException) -> None:
        asked.error = exc
        asked.ended.set()

    config = engine.check(asked.config, asked.speculative)
    engine.submit(
        SeqRequest(asked.prompt, config, asked.speculative, emit, fail, asked.cancel, lambda: asked.unread)
    )


def run(engine: BatchEngine, asks: list[Asked], timeout: float = 120) -> list[Asked]:
    for a in asks:
        submit(engine, a)
    for a in asks:
        assert a.ended.wait(timeout), "an answer did not end"
        assert a.error is None, a.error
    return asks


def fresh(a: Asked) -> Asked:
    return Asked(a.prompt, a.config, a.speculative)
