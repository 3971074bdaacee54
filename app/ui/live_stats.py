"""The numbers on screen while an answer streams, and what a saved answer keeps of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.engine import (
    DoneEvent,
    Event,
    GenerationStats,
    Origin,
    Part,
    PrefillEvent,
    RoundEvent,
    StartEvent,
    TokenEvent,
)


@dataclass
class PartCounts:
    """A thinking model's reasoning or its answer, counted as it streams: drafts are often
    accepted at a different rate in each."""

    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    seconds: float = 0.0  # the decode time of the rounds that started in this part

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_s(self) -> float | None:
        return self.tokens / self.seconds if self.tokens and self.seconds > 0 else None


@dataclass
class LiveStats:
    """Decode speed, acceptance, tokens per target pass and K, updated event by event.

    The speed counts from the end of prefill (the engine's own definition), using the times
    the engine thread produced the events, so a busy screen cannot make it look slower.
    """

    speculative: bool = True
    start: StartEvent | None = None  # how the engine drafts this answer (K, adaptive, drafter)
    prefill: PrefillEvent | None = None
    t_start: float = 0.0
    t_last: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    k: int = 0
    drafter: str = ""  # who drafted the last round: "model", "lookup", "mtp" or "" (no draft)
    lookup_rounds: int = 0
    mtp_rounds: int = 0  # drafted by the target's own heads
    per_round: list[float] = field(default_factory=list)  # tokens per target pass, per round
    final: GenerationStats | None = None
    # A thinking model's reasoning and answer apart (the reasoning's stays empty for others).
    reasoning: PartCounts = field(default_factory=PartCounts)
    answer: PartCounts = field(default_factory=PartCounts)
    _round_part: Part | None = None  # the part this round's first token counts for

    def part(self, name: Part) -> PartCounts:
        return self.reasoning if name == "reasoning" else self.answer

    def feed(self, t: float, ev: Event) -> None:
        if isinstance(ev, TokenEvent):
            # A round's tokens come before its RoundEvent; the round counts for the part it
            # started in (as the engine's GenerationStats does).
            if self._round_part is None:
                self._round_part = ev.part
            counts = self.part(ev.part)
            counts.tokens += 1
            counts.accepted += ev.origin is Origin.DRAFT
        elif isinstance(ev, RoundEvent):
            counts = self.part(self._round_part or "answer")
            counts.drafted += ev.drafted
            counts.seconds += max(0.0, t - self.t_last)
            self._round_part = None
            self.rounds += 1
            self.drafted += ev.drafted
            self.accepted += ev.accepted
            self.generated += ev.emitted
            self.k = ev.k
            self.drafter = ev.drafter
            self.lookup_rounds += ev.drafter == "lookup"
            self.mtp_rounds += ev.drafter == "mtp"
            self.t_last = t
            self.per_round.append(float(ev.emitted))
        elif isinstance(ev, PrefillEvent):
            self.prefill = ev
            self.t_start = self.t_last = t
        elif isinstance(ev, StartEvent):
            self.start = ev
        elif isinstance(ev, DoneEvent):
            self.final = ev.stats

    def parts(self) -> tuple[PartCounts, PartCounts] | None:
        """(reasoning, answer) of a thinking model's answer, the engine's own figures once it
        ended; None when there was no reasoning."""
        if self.final is not None:
            if not self.final.reasoning_tokens:
                return None
            r, a = self.final.reasoning, self.final.answer
            return (
                PartCounts(r.tokens, r.drafted, r.accepted, r.decode_s),
                PartCounts(a.tokens, a.drafted, a.accepted, a.decode_s),
            )
        return (self.reasoning, self.answer) if self.reasoning.tokens else None

    @property
    def tokens_per_s(self) -> float:
        if self.final is not None:
            return self.final.decode_tokens_per_s
        dt = self.t_last - self.t_start
        return self.generated / dt if dt > 0 else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.generated / self.rounds if self.rounds else 0.0


def stats_summary(s: GenerationStats) -> dict[str, Any]:
    """What a saved answer remembers about how it was produced."""
    summary: dict[str, Any] = {
        "mode": s.mode,
        "tokens_per_s": round(s.decode_tokens_per_s, 2),
        "generated": s.generated,
        "acceptance": round(s.acceptance_rate, 4),
        "tokens_per_round": round(s.tokens_per_round, 3),
        "prefill_tokens": s.prefill_tokens,
        "stop_reason": s.stop_reason,
    }
    if s.reasoning_tokens:
        summary["reasoning_tokens"] = s.reasoning_tokens
    return summary
