"""Typed events a generation yields, in order:

    StartEvent, PrefillEvent, then per round: TokenEvent* RoundEvent, and finally one DoneEvent.

The front-ends (the CLI, the app, the benchmark) consume only these; nothing about llama.cpp
leaks through them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, Literal

from .config import DrafterChoice
from .drafters import DrafterKind


class Origin(str, Enum):
    """Who produced a token the user sees."""

    DRAFT = "draft"  # a drafter's guess (the draft model's or prompt lookup's), accepted by the target
    TARGET = "target"  # the target's own token: a correction after a rejection (or no draft)
    BONUS = "bonus"  # the target's extra token after a fully accepted draft run


StopReason = Literal["eog", "max_tokens", "stop_string", "cancelled", "context_full"]
# Which part of the output a token belongs to: a thinking model's reasoning, or the answer
# (reasoning.py splits them; every token of a model that does not think is "answer").
Part = Literal["reasoning", "answer"]
Mode = Literal["speculative", "baseline"]


@dataclass(frozen=True, slots=True)
class StartEvent:
    """How this generation drafts, as the engine will run it (not as asked: a seeded sampling
    run drafts a fixed K, `auto` without a draft model drafts with prompt lookup alone)."""

    mode: Mode
    drafter: DrafterChoice | Literal[""]  # "" for the target alone
    draft_max: int  # K: the most per round (adaptive) or every round (fixed); 0 for the target alone
    adaptive: bool


# TokenEvent and RoundEvent are built for every token and every round, so they are plain slotted
# dataclasses: a frozen one is built through object.__setattr__ field by field, which costs
# three times as much. Consumers treat every event as read-only all the same.
@dataclass(slots=True)
class TokenEvent:
    id: int
    # The token's text in the answer: may be "" while a multi-byte character is incomplete, for
    # a token of the reasoning and for a reasoning tag (`<think>`), which is in neither part.
    text: str
    origin: Origin
    part: Part = "answer"  # the part it counts for (a reasoning tag counts for the reasoning)
    # The token's text in the reasoning. A token holds text of one part, except the rare one
    # that straddles the boundary (a tag split over tokens: "done.</" + "think>Hi"): it holds
    # the end of the reasoning here and the start of the answer in `text`.
    reasoning: str = ""


@dataclass(frozen=True, slots=True)
class PrefillEvent:
    prompt_tokens: int  # tokens in the whole prompt
    prefill_tokens: int  # tokens the target actually processed (the rest reused its cache)
    seconds: float


@dataclass(slots=True)
class RoundEvent:
    drafted: int  # draft tokens proposed this round
    accepted: int  # of which the target accepted
    emitted: int  # tokens this round added to the answer (fewer than `tokens` if it ended here)
    draft_s: float
    verify_s: float
    k: int = 0  # draft length chosen for the round (adaptive drafting varies it)
    drafter: DrafterKind | Literal[""] = ""  # who drafted: "model", "lookup", or "" (no draft)
    # Tokens the draft model decoded in this round's first batch: 1 normally, 2 after a fully
    # accepted round, more after rounds it sat out (prompt lookup drafted); 0 if it did not run.
    caught_up: int = 0
    # Of the drafted tokens, how many prompt lookup proposed: all of a lookup round's; in an
    # auto round the draft model's tokens may be followed by a lookup continuation.
    looked_up: int = 0
    first_draft_s: float = 0.0  # of draft_s, the draft model's first batch (catch-up included)
    draft_passes: int = 0  # draft-model decode calls (the first batch included)
    # The round's tokens: the accepted drafts, then the target's own (a correction or the bonus).
    tokens: tuple[int, ...] = ()
    # Of verify_s, what undoing rejected drafts cost: copying a recurrent target's state before
    # the batch (checkpoint_s; 0 for attention models), and after a rejection rolling both
    # models back (restore_s: for a recurrent state its restore and the re-decoding of the kept
    # tokens, for attention models just the truncate; 0 when nothing was rejected).
    checkpoint_s: float = 0.0
    restore_s: float = 0.0

    def origin(self, i: int) -> Origin:
        """Who produced tokens[i]."""
        if i < self.accepted:
            return Origin.DRAFT
        return Origin.BONUS if self.drafted and self.accepted == self.drafted else Origin.TARGET


@dataclass(frozen=True)
class GenerationStats:
    mode: Mode
    draft_max: int  # as run (see StartEvent): 0 for the target alone
    adaptive: bool = False
    drafter: DrafterChoice | Literal[""] = ""  # as run: "model", "lookup", "auto"; "" target alone
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    generated: int = 0  # tokens in the answer (end-of-generation token excluded)
    decode_s: float = 0.0  # wall time from the first round to the last, prefill excluded
    rounds: int = 0  # target forward passes during decoding
    lookup_rounds: int = 0  # of which drafted by prompt lookup
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    llama_s: float = 0.0  # of decode_s, time inside llama_decode (both models)
    stop_reason: StopReason = "max_tokens"
    # Of the above, the reasoning's share (a thinking model's; all 0 for the others): its
    # tokens, the drafts proposed and accepted in rounds that started in it, and those rounds'
    # time. The answer's share is the rest (`answer`).
    reasoning_tokens: int = 0
    reasoning_drafted: int = 0
    reasoning_accepted: int = 0
    reasoning_decode_s: float = 0.0

    @property
    def reasoning(self) -> PartStats:
        return PartStats(
            self.reasoning_tokens, self.reasoning_drafted, self.reasoning_accepted, self.reasoning_decode_s
        )

    @property
    def answer(self) -> PartStats:
        return PartStats(
            self.generated - self.reasoning_tokens,
            self.drafted - self.reasoning_drafted,
            self.accepted - self.reasoning_accepted,
            max(0.0, self.decode_s - self.reasoning_decode_s),
        )

    @property
    def decode_tokens_per_s(self) -> float:
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.generated / self.rounds if self.rounds else 0.0

    @property
    def python_overhead(self) -> float:
        """Share of decode time spent outside llama.cpp (sampling, bookkeeping, Python)."""
        return max(0.0, 1.0 - self.llama_s / self.decode_s) if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            decode_tokens_per_s=self.decode_tokens_per_s,
            acceptance_rate=self.acceptance_rate,
            tokens_per_round=self.tokens_per_round,
            python_overhead=self.python_overhead,
            reasoning=self.reasoning.to_dict(),
            answer=self.answer.to_dict(),
        )
        return d


@dataclass(frozen=True, slots=True)
class PartStats:
    """One part's share of a generation (GenerationStats.reasoning / .answer): drafts are
    often accepted at a different rate in a model's reasoning than in its answer."""

    tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.decode_s if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "decode_s": self.decode_s,
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_s": self.tokens_per_s,
        }


@dataclass(frozen=True, slots=True)
class DoneEvent:
    stats: GenerationStats
    text: str  # the whole answer as streamed (a thinking model's reasoning apart, below)
    reasoning: str = ""  # the reasoning, without its tags ("" for a model that does not think)


Event = StartEvent | TokenEvent | PrefillEvent | RoundEvent | DoneEvent
