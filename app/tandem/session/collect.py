"""Running a generation to its end and keeping what it produced, and its stats as JSON."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tandem.engine import DoneEvent, Event, GenerationStats, PrefillEvent, RoundEvent, StartEvent, TokenEvent


@dataclass
class Outcome:
    """Everything one generation yielded, sorted by kind."""

    start: StartEvent | None = None
    prefill: PrefillEvent | None = None
    tokens: list[TokenEvent] = field(default_factory=list)
    rounds: list[RoundEvent] = field(default_factory=list)
    done: DoneEvent | None = None

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    @property
    def text(self) -> str:
        """The answer (a thinking model's reasoning apart: `reasoning`)."""
        return self.done.text if self.done is not None else "".join(t.text for t in self.tokens)

    @property
    def reasoning(self) -> str:
        """A thinking model's reasoning, without its tags ("" for the others)."""
        return self.done.reasoning if self.done is not None else "".join(t.reasoning for t in self.tokens)

    @property
    def stats(self) -> GenerationStats:
        if self.done is None:
            raise RuntimeError("the generation did not finish")
        return self.done.stats


def collect(events: Iterable[Event], on_round: Callable[[Outcome], None] | None = None) -> Outcome:
    """Run `events` to the end. `on_round` (streaming output) sees the outcome so far after
    each round and once at the end; a round's tokens arrive together, so a front-end that
    shows text needs nothing finer."""
    out = Outcome()
    tokens, rounds = out.tokens, out.rounds
    for ev in events:
        if type(ev) is TokenEvent:  # (exact type checks, most frequent first: once a token)
            tokens.append(ev)
        elif type(ev) is RoundEvent:
            rounds.append(ev)
            if on_round is not None:
                on_round(out)
        elif isinstance(ev, PrefillEvent):
            out.prefill = ev
        elif isinstance(ev, StartEvent):
            out.start = ev
        elif isinstance(ev, DoneEvent):
            out.done = ev
            if on_round is not None:
                on_round(out)
    return out


def token_json(t: TokenEvent) -> dict[str, Any]:
    """A token as JSON: its id, its text in the answer, who produced it, the part it counts for,
    and its text in the reasoning when it has some (`tandem run --json`, the server)."""
    entry: dict[str, Any] = {"id": t.id, "text": t.text, "origin": t.origin.value, "part": t.part}
    if t.reasoning:
        entry["reasoning"] = t.reasoning
    return entry


def token_origins(tokens: Iterable[TokenEvent]) -> list[dict[str, Any]]:
    """Every token as JSON (token_json), in order: `tandem run --json`'s `tokens` and the
    server's `tandem.tokens` are this one list."""
    return [token_json(t) for t in tokens]


def outcome_json(out: Outcome) -> dict[str, Any]:
    """The answer, the reasoning beside it, every token with its origin and part, and the stats
    (`tandem run --json`)."""
    return {
        "text": out.text,
        "reasoning": out.reasoning,
        "tokens": token_origins(out.tokens),
        "stats": out.stats.to_dict(),
    }
