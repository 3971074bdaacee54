"""Typed events a generation yields, in order:

    StartEvent, PrefillEvent, then per round: TokenEvent* RoundEvent, and finally one DoneEvent.

The front-ends (the CLI, the app, the benchmark, the server) consume only these; nothing about
llama.cpp leaks through them. The statistics (GenerationStats, and the accumulator both the
generation loop and the app's live panel count with) are in stats.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from .stats import GenerationStats, Mode, Origin, Part, PartStats, StopReason

__all__ = ["GenerationStats", "Mode", "Origin", "Part", "PartStats", "StopReason"]


@dataclass(frozen=True, slots=True)
class StartEvent:
    """How this generation drafts, as the engine will run it (not as asked: a seeded sampling
    run drafts a fixed K, `auto` without a draft model drafts with prompt lookup alone)."""

    mode: Mode
    drafter: str  # the choice as run: "auto" or a kind (drafters/registry.py); "" the target alone
    draft_max: int  # K: the most per round (adaptive) or every round (fixed); 0 for the target alone
    adaptive: bool

    def stats(self, prompt_tokens: int, device: str, exact: bool) -> GenerationStats:
        """The statistics of the generation this starts, before any of it has run."""
        return GenerationStats(
            mode=self.mode,
            draft_max=self.draft_max,
            adaptive=self.adaptive,
            drafter=self.drafter,
            prompt_tokens=prompt_tokens,
            device=device,
            exact=exact,
        )


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
    drafter: str = ""  # the kind that drafted (drafters/registry.py), or "" (no draft)
    # Tokens the drafter decoded in this round's first batch: 1 normally, 2 after a fully
    # accepted round, more after rounds it sat out (another kind drafted); 0 if it did not run.
    caught_up: int = 0
    # Of the drafted tokens, how many prompt lookup proposed: all of a lookup round's; in an
    # auto round the draft model's tokens may be followed by a lookup continuation.
    looked_up: int = 0
    first_draft_s: float = 0.0  # of draft_s, the drafter's first batch (catch-up included)
    # The drafter's decode calls (a draft model's or the heads'; 0: lookup); for a draft of
    # another tokenizer the target tokens it proposed (its rounds are priced per target token).
    draft_passes: int = 0
    # The round's tokens: the accepted drafts, then the target's own (a correction or the bonus).
    tokens: tuple[int, ...] = ()
    # Of verify_s, what undoing rejected drafts cost: copying a recurrent target's state before
    # the batch (checkpoint_s; 0 for attention models), and after a rejection rolling both
    # models back (restore_s: for a recurrent state its restore and the re-decoding of the kept
    # tokens, for attention models just the truncate; 0 when nothing was rejected).
    checkpoint_s: float = 0.0
    restore_s: float = 0.0
    # Of draft_s, re-encoding text between the draft's tokenizer and the target's (cross.py).
    translate_s: float = 0.0
    # The round's wall time, from the end of the round before (planning, drafting, verifying,
    # and the front-end's handling of the tokens): what a speedup is measured in (speedup.py).
    wall_s: float = 0.0

    @property
    def target_s(self) -> float:
        """The target's verify batch alone (undoing rejected drafts excluded)."""
        return self.verify_s - self.checkpoint_s - self.restore_s

    def origin(self, i: int) -> Origin:
        """Who produced tokens[i]."""
        if i < self.accepted:
            return Origin.DRAFT
        return Origin.BONUS if self.drafted and self.accepted == self.drafted else Origin.TARGET


@dataclass(frozen=True, slots=True)
class DoneEvent:
    stats: GenerationStats
    text: str  # the whole answer as streamed (a thinking model's reasoning apart, below)
    reasoning: str = ""  # the reasoning, without its tags ("" for a model that does not think)


Event = StartEvent | TokenEvent | PrefillEvent | RoundEvent | DoneEvent
