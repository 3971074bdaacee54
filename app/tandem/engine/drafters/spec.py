"""How a drafter kind describes itself to the rest of the engine (registry.py lists them).

A kind is one module of drafters/ with one `SPEC`: its name and label, what it needs from a
loaded pair, how it is built for a generation, what its rounds cost (the cost model and the
benchmark ask it), and, where it follows the target's decodes, how it attaches to the target.
Its drafter then takes part in scheduling through two calls: `offer` (this round's K and the
rate it expects) and `credit` (what a round it ran teaches each kind's policy).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from ..config import GenerationConfig
from ..draft_policy import AdaptivePolicy, CostModel, FixedPolicy
from ..events import RoundEvent
from ..gguf_info import GGUFInfo
from ..model import DecodeListener, LoadedModel
from . import Proposal

Policy = AdaptivePolicy | FixedPolicy


class Needs(Enum):
    """What a kind needs from a loaded pair."""

    NOTHING = "nothing"  # the text alone (prompt lookup)
    DRAFT_MODEL = "a draft model"
    HEADS = "the target's own draft heads"  # layers in the target's file, run beside it
    # A drafter trained on the target's hidden rows, in a file of its own (EAGLE-3, DFlash),
    # given where a draft model would be: it runs beside the target, as the heads do.
    SIDECAR = "a trained drafter for the target"


@dataclass(frozen=True)
class BuildContext:
    """What a drafter is built from, for one generation."""

    target: LoadedModel
    draft: LoadedModel | None  # None: the generation uses no draft model
    config: GenerationConfig
    rng: random.Random
    cancel: threading.Event | None
    costs: CostModel


class CostView(Protocol):
    """The measured costs a kind prices its rounds with (costs.MeasuredCosts), in target steps."""

    @property
    def target_step_s(self) -> float: ...

    @property
    def c(self) -> float | None: ...

    @property
    def c_lookup(self) -> float: ...

    def catchup(self, n: int) -> float: ...


def timed_draft_cost(costs: CostView, drafted: int, caught_up: int, looked_up: int, draft_s: float) -> float:
    """A round's drafting in target steps as the round timed it itself: for the kinds whose
    steps measure_costs does not time (the heads, trained drafters, a cross draft with its
    translation)."""
    return draft_s / costs.target_step_s


@dataclass(frozen=True, slots=True)
class Offer:
    """A drafter's bid for this round: K, and the tokens per second it expects (0.0: not
    measured yet)."""

    rate: float
    k: int


@dataclass
class RoundView:
    """What the scheduler knows before a round, shared by the drafters' offers (asked in the
    registry's order, so a later offer sees what an earlier one set)."""

    history: Sequence[int]
    budget: int  # the most tokens this round may draft
    k_max: int
    costs: CostModel
    policies: dict[str, Policy]
    first_round: bool  # a generation's first round runs cold: its timings would mislead
    # Recent share of the answer that drafters costing no draft steps supplied (None: the pool
    # has none), for a drafter that must catch up on those tokens to decide whether it pays.
    free_share: float | None = None
    # Set by a drafter that keeps its own state in step with the history (a draft model) and
    # drafts this round: what each token another drafter supplies will cost it to catch up.
    catchup_debt: float = 0.0
    in_step: bool = False
    tail_k: int = 0  # the most tokens a free drafter may append to another's draft


class Drafter(Protocol):
    kind: str

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        """A generation starts with `prompt` (all but its last token: the target decodes that
        one in the first round). `should_stop` is asked between long pieces of work."""

    def began(self, prompt: Sequence[int]) -> bool:
        """Whether `begin` completed (a cancelled prefill leaves a draft model behind)."""

    def draft(self, history: Sequence[int], k: int) -> Proposal:
        """Up to k tokens to follow `history` (prompt + answer so far)."""

    def accept(self, keep: int) -> None:
        """After verification the target keeps history[:keep]; drop anything beyond it."""

    # -- scheduling
    def search(self, view: RoundView) -> None:
        """Before any offer: look at the history (prompt lookup searches it here)."""

    def offer(self, view: RoundView) -> Offer | None:
        """This round's K and expected rate; None: it does not bid this round."""

    def chosen(self, k: int, view: RoundView) -> Drafter:
        """It won the round: the drafter that runs it (itself, or a composition)."""

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        """What a round it ran teaches: (kind, drafted, accepted before the first rejection)."""

    def listener(self) -> DecodeListener | None:
        """What it keeps in step with the target's decodes (None: nothing)."""


@dataclass(frozen=True)
class DrafterSpec:
    name: str  # the kind, as events, statistics and --drafter say it
    label: str  # for people: "draft model"
    needs: Needs
    build: Callable[[BuildContext], Drafter | None]  # None: the pair lacks what it needs
    # Why this pair cannot draft with it, in one line; None when it can.
    missing: Callable[[LoadedModel, LoadedModel | None], str | None]
    # A round's drafting cost in target steps, from measured costs: (costs, drafted,
    # caught_up, looked_up, draft_s) -> steps.
    draft_cost: Callable[[CostView, int, int, int, float], float]
    # Rank among drafters whose rates are all unmeasured (lowest first: the cheapest to try).
    untimed_rank: int = 0
    # Whether its costs are learnt only by drafting (a model) rather than when it searches.
    timed_by_drafting: bool = True
    # A drafter that costs no draft steps (prompt lookup): others may owe a catch-up for its
    # tokens, and it may finish their drafts.
    free: bool = False
    # Whether a user may choose it alone (--drafter); a composition is not.
    choosable: bool = True
    # Attach to a freshly loaded target what follows its decodes (the heads); None: nothing.
    attach: Callable[[LoadedModel], object] | None = None
    # Who drafts, in the words "drafted by ..." ends with: (target, draft) -> "prompt lookup".
    phrase: Callable[[LoadedModel, LoadedModel | None], str] = lambda target, draft: ""
    # The same in a note about the target ("the target's built-in draft heads (MTP)").
    note: str = ""
    # Why a target that carries what it needs cannot use it (heads in its file that did not
    # load), in one line; None when it can, or carries nothing for it.
    unusable: Callable[[LoadedModel], str | None] | None = None
    # Of the target's decode outputs, which it listens to (for documentation and notes).
    listens: tuple[str, ...] = field(default=())
    # A trained drafter in a file of its own (Needs.SIDECAR): the GGUF architectures it loads,
    # and how a checked file of one is attached to a freshly loaded target, as one of its
    # listeners (sidecar.py checks the file against the target first).
    sidecar_archs: tuple[str, ...] = field(default=())
    load_sidecar: Callable[[LoadedModel, Path, GGUFInfo], object] | None = None
    # Whether a file of another architecture is one it loads (the MTP heads alone: the target's
    # own architecture, no trunk).
    sidecar_claims: Callable[[GGUFInfo], bool] | None = None
