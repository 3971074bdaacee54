"""Small helpers the tests use to run a generation and collect what it yields."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from app.engine import (
    DoneEvent,
    GenerationConfig,
    GenerationStats,
    ModelPair,
    PrefillEvent,
    RoundEvent,
    SamplerSettings,
    TokenEvent,
)


@dataclass
class Run:
    tokens: list[TokenEvent] = field(default_factory=list)
    rounds: list[RoundEvent] = field(default_factory=list)
    prefill: PrefillEvent | None = None
    done: DoneEvent | None = None

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    @property
    def stats(self) -> GenerationStats:
        assert self.done is not None
        return self.done.stats


def run(
    pair: ModelPair,
    prompt: Sequence[int],
    *,
    speculative: bool = True,
    max_tokens: int = 64,
    draft_max: int = 4,
    temperature: float = 0.0,
    top_k: int = 40,
    top_p: float = 1.0,
    min_p: float = 0.0,
    seed: int | None = None,
    stop: tuple[str, ...] = (),
    p_min: float = 0.0,
    cancel: threading.Event | None = None,
    cancel_after: int | None = None,
    adaptive: bool = False,
    drafter: str = "model",
) -> Run:
    """One generation. K is fixed unless adaptive=True, so tests control the paths taken."""
    cfg = GenerationConfig(
        max_tokens=max_tokens,
        draft_max=draft_max,
        adaptive=adaptive,
        drafter=drafter,  # type: ignore[arg-type]
        p_min=p_min,
        sampler=SamplerSettings(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed),
        stop=stop,
    )
    out = Run()
    for ev in pair.generate(prompt, cfg, speculative=speculative, cancel=cancel):
        if isinstance(ev, TokenEvent):
            out.tokens.append(ev)
            if cancel is not None and cancel_after is not None and len(out.tokens) >= cancel_after:
                cancel.set()
        elif isinstance(ev, RoundEvent):
            out.rounds.append(ev)
        elif isinstance(ev, PrefillEvent):
            out.prefill = ev
        elif isinstance(ev, DoneEvent):
            out.done = ev
    return out
