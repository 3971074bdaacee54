"""A generation's statistics: one record (GenerationStats) with one set of names, read by
`tandem run --json`, the server's `tandem` usage field, the app's live panel and the benchmark;
and one accumulator (Tally) that counts it, in the generation loop and in the live panel.

Drafting is counted per kind (`drafters`: rounds, drafted, accepted, time), whatever kinds the
engine has: a front-end shows what is there and needs no list of kinds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Literal


class Origin(str, Enum):
    """Who produced a token the user sees."""

    DRAFT = "draft"  # a drafter's guess (whichever drafted the round), accepted by the target
    TARGET = "target"  # the target's own token: a correction after a rejection (or no draft)
    BONUS = "bonus"  # the target's extra token after a fully accepted draft run


StopReason = Literal["eog", "max_tokens", "stop_string", "cancelled", "context_full"]
# Which part of the output a token belongs to: a thinking model's reasoning, or the answer
# (reasoning.py splits them; every token of a model that does not think is "answer").
Part = Literal["reasoning", "answer"]
Mode = Literal["speculative", "baseline"]


@dataclass(slots=True)
class DrafterStats:
    """One drafter kind's share of a generation: the rounds it drafted, its tokens proposed
    and accepted, and the seconds of those rounds (drafting and verifying)."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    seconds: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0


class KindRounds:
    """`stats.<kind>_rounds`: the rounds a kind drafted (the names `--json` has always had,
    e.g. lookup_rounds), read from the per-kind record."""

    drafters: dict[str, DrafterStats]

    def __getattr__(self, name: str) -> int:
        if name.endswith("_rounds") and not name.startswith("_"):
            kinds = self.__dict__.get("drafters")
            if kinds is not None:
                d = kinds.get(name[: -len("_rounds")])
                return d.rounds if d is not None else 0
        raise AttributeError(name)


@dataclass(frozen=True)
class GenerationStats(KindRounds):
    mode: Mode
    draft_max: int  # as run (see StartEvent): 0 for the target alone
    adaptive: bool = False
    drafter: str = ""  # the choice as run ("auto", or a kind); "" for the target alone
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    prefill_s: float = 0.0
    generated: int = 0  # tokens in the answer (end-of-generation token excluded)
    decode_s: float = 0.0  # wall time from the first round to the last, prefill excluded
    rounds: int = 0  # target forward passes during decoding
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    llama_s: float = 0.0  # of decode_s, time inside llama_decode (both models)
    # Where the target's layers ran (LoadedModel.device_label): "CPU", "CUDA0 (NVIDIA …)"...
    device: str = ""
    # Whether the target computed every row it verified as it computes it alone (exact.py):
    # the output is then bit-identical to the target alone's in the same mode.
    exact: bool = False
    stop_reason: StopReason = "max_tokens"
    # Of the above, the reasoning's share (a thinking model's; all 0 for the others): its
    # tokens, the drafts proposed and accepted in rounds that started in it, and those rounds'
    # time. The answer's share is the rest (`answer`).
    reasoning_tokens: int = 0
    reasoning_drafted: int = 0
    reasoning_accepted: int = 0
    reasoning_decode_s: float = 0.0
    # Per drafter kind (every kind the engine has, drafting or not): see DrafterStats.
    drafters: dict[str, DrafterStats] = field(default_factory=dict)
    # Against the target alone, timed during this generation (speedup.py; None for the target
    # alone, or before a target-alone step was timed): the figure, a ~95% interval, the target
    # alone's tokens/s over the same period, the steps it rests on, and whether the machine's
    # speed changed mid-answer.
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    target_alone_tps: float | None = None
    speedup_steps: int = 0
    load_changed: bool = False
    # CPU threads at the end, and how often the count followed the machine (threads.py).
    threads: int = 0
    threads_changed: int = 0

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
        # What each target pass gave: its accepted drafts and its own token (an end-of-generation
        # token too: a 1-token answer's second pass gave one; what a stop string cuts, too).
        return 1 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def speedup_how(self) -> str:
        """How the speedup was obtained, in words (the CLI, --json and the server say it)."""
        if self.speedup is None:
            return "" if self.mode == "baseline" else "not measured: no target-alone step was timed"
        steps = f"{self.speedup_steps} target step{'s' if self.speedup_steps != 1 else ''}"
        how = f"target alone timed in {steps} during this answer"
        return how + "; the machine's speed changed mid-answer" if self.load_changed else how

    @property
    def python_overhead(self) -> float:
        """Share of decode time spent outside llama.cpp (sampling, bookkeeping, Python)."""
        return max(0.0, 1.0 - self.llama_s / self.decode_s) if self.decode_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON: every field, the derived figures, each part's share, and each
        kind's rounds also as `<kind>_rounds`."""
        d = asdict(self)
        for kind, k in self.drafters.items():
            d["drafters"][kind]["acceptance_rate"] = k.acceptance_rate
            d[f"{kind}_rounds"] = k.rounds
        d.update(
            decode_tokens_per_s=self.decode_tokens_per_s,
            acceptance_rate=self.acceptance_rate,
            tokens_per_round=self.tokens_per_round,
            python_overhead=self.python_overhead,
            speedup_how=self.speedup_how,
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


class Tally:
    """Counts a generation as its events happen: the generation loop's totals, and the app's
    live panel's while an answer streams. `record()` is the GenerationStats so far.

    Round by round: `add_round` (each RoundEvent), and for a thinking model `add_reasoning_round`
    (a round that started in the reasoning: its drafts and seconds) and `add_reasoning_token`
    (each token released into the reasoning)."""

    __slots__ = (
        "accepted",
        "draft_s",
        "drafted",
        "drafters",
        "generated",
        "r_accepted",
        "r_drafted",
        "r_seconds",
        "r_tokens",
        "rounds",
        "verify_s",
    )

    def __init__(self, kinds: tuple[str, ...] = ()) -> None:
        self.rounds = self.drafted = self.accepted = self.generated = 0
        self.draft_s = self.verify_s = 0.0
        self.r_tokens = self.r_drafted = self.r_accepted = 0
        self.r_seconds = 0.0
        self.drafters: dict[str, DrafterStats] = {kind: DrafterStats() for kind in kinds}

    def add_round(
        self, drafter: str, drafted: int, accepted: int, emitted: int, draft_s: float, verify_s: float
    ) -> None:
        """One round (RoundEvent's fields: passed apart, which costs less than reading them
        here, and this runs once a round)."""
        self.rounds += 1
        self.drafted += drafted
        self.accepted += accepted
        self.generated += emitted
        self.draft_s += draft_s
        self.verify_s += verify_s
        if drafter:
            k = self.drafters.get(drafter)
            if k is None:
                k = self.drafters[drafter] = DrafterStats()
            k.rounds += 1
            k.drafted += drafted
            k.accepted += accepted
            k.draft_s += draft_s
            k.seconds += draft_s + verify_s

    def add_reasoning_round(self, drafted: int, seconds: float) -> None:
        self.r_drafted += drafted
        self.r_seconds += seconds

    def add_reasoning_token(self, accepted_draft: bool) -> None:
        self.r_tokens += 1
        self.r_accepted += accepted_draft

    def record(self, base: GenerationStats, decode_s: float, **more: Any) -> GenerationStats:
        """`base` (what the generation is: mode, drafter, prompt, prefill) with the counts so
        far, over `decode_s` seconds of decoding; `more`: further fields (llama_s, stop_reason)."""
        return GenerationStats(
            **{
                **{f: getattr(base, f) for f in _BASE_FIELDS},
                "generated": self.generated,
                "decode_s": decode_s,
                "rounds": self.rounds,
                "drafted": self.drafted,
                "accepted": self.accepted,
                "draft_s": self.draft_s,
                "verify_s": self.verify_s,
                "reasoning_tokens": self.r_tokens,
                "reasoning_drafted": self.r_drafted,
                "reasoning_accepted": self.r_accepted,
                "reasoning_decode_s": self.r_seconds,
                "drafters": {kind: DrafterStats(**asdict(k)) for kind, k in self.drafters.items()},
                **more,
            }
        )


_BASE_FIELDS = (
    "mode",
    "draft_max",
    "adaptive",
    "drafter",
    "prompt_tokens",
    "prefill_tokens",
    "prefill_s",
    "device",
    "exact",
)
