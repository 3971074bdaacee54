"""How a drafter kind describes itself to the rest of Tandem (registry.py lists them).

A kind is one module of drafters/ with one `SPEC`, in four groups and a few hooks:

* `Words`: its label, what choosing it means, how notes and "drafted by ..." name it; every
  front-end's words about a kind come from here.
* `Traits`: how the scheduler and the cost model treat it (its rank while nothing is measured,
  whether drafting times it, whether it is free, what a round of it costs).
* `Batching`: how it drafts for the sequences of a batch (batched.py), or why it cannot yet.
* `Files`: the drafter files it loads, when it has any (a trained drafter beside the target, MTP
  heads alone): the architectures and name prefixes it claims, how its header is read and
  checked against a target, how a checked file is attached, whether this build can run it.

Its drafter takes part in a generation through begin / draft / accept and in scheduling through
`offer` (this round's K and the rate it expects) and `credit` (what a round it ran teaches each
kind's policy); `DrafterBase` gives the calls a simple kind does not need.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..config import GenerationConfig
from ..events import RoundEvent
from ..files.gguf_info import GGUFInfo
from . import Proposal
from .batched import Batching
from .policy import AdaptivePolicy, CostModel, FixedPolicy

if TYPE_CHECKING:
    from ..llama.model import DecodeListener, LoadedModel
    from .heads.files import DrafterFacts

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


class DrafterBase:
    """The Drafter calls a simple kind does not need: nothing to get ready or to search, a bid
    from its own policy, its own tokens credited to itself, nothing that follows the target."""

    kind: str

    def begin(self, prompt: Sequence[int], should_stop: Callable[[], bool]) -> None:
        pass

    def began(self, prompt: Sequence[int]) -> bool:
        return True

    def accept(self, keep: int) -> None:
        pass

    def search(self, view: RoundView) -> None:
        pass

    def offer(self, view: RoundView) -> Offer | None:
        k, rate = view.policies[self.kind].plan(view.budget)
        return Offer(rate, k)

    def chosen(self, k: int, view: RoundView) -> Drafter:
        return self  # type: ignore[return-value]  # (a subclass is a Drafter)

    def credit(self, rnd: RoundEvent) -> list[tuple[str, int, int]]:
        own = rnd.drafted - rnd.looked_up  # (a prompt lookup tail is lookup's own)
        return [(self.kind, own, min(rnd.accepted, own))]

    def listener(self) -> DecodeListener | None:
        return None


def _no_phrase(target: LoadedModel, draft: LoadedModel | None) -> str:
    return ""


@dataclass(frozen=True)
class Words:
    """How people are told about a kind."""

    label: str  # "draft model"
    help: str  # what choosing it means, in a list of the choices: "the target's own heads (MTP)"
    note: str = ""  # in a note about the target: "the target's built-in draft heads (MTP)"
    # Who drafts, in the words "drafted by ..." ends with: (target, draft) -> "prompt lookup".
    phrase: Callable[[LoadedModel, LoadedModel | None], str] = _no_phrase


@dataclass(frozen=True)
class Traits:
    """How the scheduler and the cost model treat a kind."""

    # A round's drafting cost in target steps, from measured costs: (costs, drafted,
    # caught_up, looked_up, draft_s) -> steps.
    draft_cost: Callable[[CostView, int, int, int, float], float] = timed_draft_cost
    # Rank among drafters whose rates are all unmeasured (lowest first: the cheapest to try).
    untimed_rank: int = 0
    # Whether its costs are learnt only by drafting (a model) rather than when it searches.
    timed_by_drafting: bool = True
    # A drafter that costs no draft steps (prompt lookup): others may owe a catch-up for its
    # tokens, and it may finish their drafts.
    free: bool = False
    # A free kind's search timed once (n_vocab, history, k) -> seconds: what measure_costs
    # prices its rounds with (CostView.c_lookup).
    time_search: Callable[[int, Sequence[int], int], float] | None = None


@dataclass(frozen=True)
class Files:
    """The drafter files a kind loads: a trained drafter, or MTP heads, in a file of its own,
    given as the draft or found beside the target (checked against it from both headers)."""

    label: str  # what such a file is before its header is read: "EAGLE-3 drafter"
    what: str  # such a file given as the model to chat with: "an EAGLE-3 drafter"
    read: Callable[[GGUFInfo], DrafterFacts]  # its header's facts; ModelFileError: unusable
    # Why a file with these facts cannot draft for a target, as short phrases: (target, facts,
    # the file's header) -> [] when it can.
    check: Callable[[GGUFInfo, DrafterFacts, GGUFInfo], list[str]]
    load: Callable[[LoadedModel, Path, GGUFInfo], object]  # a checked file, beside a loaded target
    supported: Callable[[], bool]  # whether this llama.cpp build can run one
    unsupported: Callable[[str], str]  # why not (the file's name), in one line
    archs: tuple[str, ...] = ()  # the GGUF architectures that are such files
    claims: Callable[[GGUFInfo], bool] | None = None  # a file of another architecture it claims
    prefixes: tuple[str, ...] = ()  # the names companions of this kind start with ("eagle3-")
    rank: int = 0  # which companion a target drafts with when it has several (lowest first)


@dataclass(frozen=True)
class DrafterSpec:
    name: str  # the kind, as events, statistics and --drafter say it
    words: Words
    needs: Needs
    build: Callable[[BuildContext], Drafter | None]  # None: the pair lacks what it needs
    # Why this pair cannot draft with it, in one line; None when it can.
    missing: Callable[[LoadedModel, LoadedModel | None], str | None]
    traits: Traits = field(default_factory=Traits)
    files: Files | None = None
    # Whether a user may choose it alone (--drafter); a composition is not.
    choosable: bool = True
    # It drafts with a draft model of another tokenizer than the target's (the front-ends name
    # it where they list such drafts).
    across_tokenizers: bool = False
    # Attach to a freshly loaded target what follows its decodes (the heads); None: nothing.
    attach: Callable[[LoadedModel], object] | None = None
    # Of the target's decode outputs, which it listens to (for documentation and notes).
    listens: tuple[str, ...] = field(default=())
    # Why a target that carries what it needs cannot use it (heads in its file that did not
    # load), in one line; None when it can, or carries nothing for it.
    unusable: Callable[[LoadedModel], str | None] | None = None
    # Before anything loads, why a target (its header) cannot draft with this kind alone, with
    # nothing given beside it: (target, the front-end's advice) -> one line, None when it can.
    preflight: Callable[[GGUFInfo, str | None], str | None] | None = None
    # How it drafts for several sequences in one batch (batched.py), or why it does not.
    batching: Batching = field(default_factory=lambda: Batching(why_not="it drafts for one sequence"))

    @property
    def label(self) -> str:
        return self.words.label
