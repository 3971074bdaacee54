"""The numbers on screen while an answer streams, and what a saved answer keeps of them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tandem.engine import (
    REASONING,
    DoneEvent,
    Event,
    GenerationStats,
    Origin,
    Part,
    PrefillEvent,
    RoundEvent,
    SpeedupMeter,
    StartEvent,
    Tally,
    TokenEvent,
    with_speedup,
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

    It counts with the engine's own accumulator (stats.Tally, as the generation loop does) and
    reads the engine's record (`record()`: GenerationStats, the names `--json`, the server and
    the benchmark use): the engine's figures once the answer ended, the tally's until then.
    The speed counts from the end of prefill (the engine's own definition), using the times
    the engine thread produced the events, so a busy screen cannot make it look slower. The
    speedup is the engine's own meter (speedup.py) fed the same rounds: against the target
    alone timed during this answer.
    """

    speculative: bool = True
    start: StartEvent | None = None  # how the engine drafts this answer (K, adaptive, drafter)
    prefill: PrefillEvent | None = None
    t_start: float = 0.0
    t_last: float = 0.0
    k: int = 0
    drafter: str = ""  # the kind that drafted the last round, or "" (no draft)
    per_round: list[float] = field(default_factory=list)  # tokens per target pass, per round
    final: GenerationStats | None = None
    tally: Tally = field(default_factory=Tally)
    meter: SpeedupMeter = field(default_factory=SpeedupMeter)
    _round_part: Part | None = None  # the part this round's first token counts for

    def feed(self, t: float, ev: Event) -> None:
        if isinstance(ev, TokenEvent):
            # A round's tokens come before its RoundEvent; the round counts for the part it
            # started in (as the engine's GenerationStats does).
            if self._round_part is None:
                self._round_part = ev.part
            if ev.part == REASONING:
                self.tally.add_reasoning_token(ev.origin is Origin.DRAFT)
        elif isinstance(ev, RoundEvent):
            if self._round_part == REASONING:
                self.tally.add_reasoning_round(ev.drafted, max(0.0, t - self.t_last))
            self._round_part = None
            self.tally.add_round(ev.drafter, ev.drafted, ev.accepted, ev.emitted, ev.draft_s, ev.verify_s)
            self.meter.add(ev.drafted, ev.emitted, ev.wall_s, timed=self.tally.rounds > 1)
            self.k = ev.k
            self.drafter = ev.drafter
            self.t_last = t
            self.per_round.append(float(ev.emitted))
        elif isinstance(ev, PrefillEvent):
            self.prefill = ev
            self.t_start = self.t_last = t
        elif isinstance(ev, StartEvent):
            self.start = ev
        elif isinstance(ev, DoneEvent):
            self.final = ev.stats

    def record(self) -> GenerationStats:
        """The answer's statistics so far: the engine's once it ended."""
        if self.final is not None:
            return self.final
        start = self.start
        base = GenerationStats(
            mode=start.mode if start is not None else "speculative" if self.speculative else "baseline",
            draft_max=start.draft_max if start is not None else 0,
            adaptive=start.adaptive if start is not None else False,
            drafter=start.drafter if start is not None else "",
            prompt_tokens=self.prefill.prompt_tokens if self.prefill is not None else 0,
            prefill_tokens=self.prefill.prefill_tokens if self.prefill is not None else 0,
            prefill_s=self.prefill.seconds if self.prefill is not None else 0.0,
        )
        record = self.tally.record(base, max(0.0, self.t_last - self.t_start))
        return with_speedup(record, self.meter) if record.mode == "speculative" else record

    # The counts so far (the tally's), by the record's names.
    @property
    def rounds(self) -> int:
        return self.tally.rounds

    @property
    def drafted(self) -> int:
        return self.tally.drafted

    @property
    def accepted(self) -> int:
        return self.tally.accepted

    @property
    def generated(self) -> int:
        return self.tally.generated

    def parts(self) -> tuple[PartCounts, PartCounts] | None:
        """(reasoning, answer) of a thinking model's answer; None when there was no reasoning."""
        s = self.record()
        if not s.reasoning_tokens:
            return None
        r, a = s.reasoning, s.answer
        return PartCounts(r.tokens, r.drafted, r.accepted, r.decode_s), PartCounts(
            a.tokens, a.drafted, a.accepted, a.decode_s
        )

    @property
    def tokens_per_s(self) -> float:
        return self.record().decode_tokens_per_s

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        # What each target pass gave: its accepted drafts and its own token (an end-of-generation
        # token too: a 1-token answer's second pass gave one; what a stop string cuts, too).
        return 1 + self.accepted / self.rounds if self.rounds else 0.0


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
    if s.speedup is not None:
        summary["speedup"] = round(s.speedup, 3)
    return summary
