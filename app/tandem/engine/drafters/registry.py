"""Every drafter kind, in the order the scheduler asks them for offers (a later offer may read
what an earlier one set: see spec.RoundView), the compositions built from them, and what the
rest of Tandem asks about kinds: the choices and their help, what a drafter file is, what a
pair can draft with.

A new kind is one module with a `SPEC`, added to KINDS below (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import IncompatiblePairError, ModelFileError, TandemError
from ..files.compat import check_pair
from ..files.gguf_info import GGUFInfo
from . import cross, hybrid, lookup, model
from .batched import BatchProposer, BatchSetup
from .heads import dflash, eagle3, mtp
from .heads.files import DrafterFacts, check_d2t_values, described
from .spec import BuildContext, Drafter, DrafterSpec, Needs

if TYPE_CHECKING:
    from ..llama.model import LoadedModel

KINDS: tuple[DrafterSpec, ...] = (
    model.SPEC,
    cross.SPEC,
    mtp.SPEC,
    eagle3.SPEC,
    dflash.SPEC,
    lookup.SPEC,
)
# Compositions: a pool -> the pool with some drafters combined (the draft model finished by
# prompt lookup).
COMPOSITIONS: tuple[Callable[[list[Drafter]], list[Drafter]], ...] = (hybrid.compose,)

# The choice of every kind the pair offers (--drafter auto): the scheduler ranks them.
AUTO = "auto"
AUTO_HELP = "every kind the pair offers, the fastest each round"


# ---------------------------------------------------------------------- the choices
def spec(name: str) -> DrafterSpec | None:
    """The kind named `name` (None: "", no drafter, or a name no kind has)."""
    return next((s for s in KINDS if s.name == name), None)


def names() -> tuple[str, ...]:
    """The kinds a user may choose alone, in the registry's order."""
    return tuple(s.name for s in KINDS if s.choosable)


def choices() -> tuple[str, ...]:
    """What a user may choose: each kind alone, or auto."""
    return (*names(), AUTO)


def check_choice(choice: str) -> None:
    """TandemError with one line when `choice` is not one of the choices."""
    if choice not in choices():
        raise TandemError(f"the drafter must be one of: {', '.join(choices())}")


def label(name: str) -> str:
    """A kind's label for people ("draft model"); `name` itself when no kind has it."""
    s = spec(name)
    return s.words.label if s is not None else name


def help_text() -> str:
    """Every choice with what it means, for a help text: "model: the draft model (--draft); ..."."""
    return "; ".join([*(f"{s.name}: {s.words.help}" for s in KINDS if s.choosable), f"{AUTO}: {AUTO_HELP}"])


def across_tokenizers() -> str:
    """The kind that drafts with a draft model of another tokenizer."""
    return next(s.name for s in KINDS if s.across_tokenizers)


def own_heads() -> str:
    """The kind that drafts with the target's own heads."""
    return next(s.name for s in KINDS if s.needs is Needs.HEADS)


def chosen(choice: str) -> tuple[DrafterSpec, ...]:
    """The kinds a choice names: every kind for auto, else the one."""
    if choice == AUTO:
        return tuple(KINDS)
    s = spec(choice)
    return (s,) if s is not None else ()


def uses_draft_model(choice: str) -> bool:
    """Whether a generation with `choice` drafts with a draft model when the pair has one."""
    return any(s.needs is Needs.DRAFT_MODEL for s in chosen(choice))


def uses_draft_file(choice: str) -> bool:
    """Whether a generation with `choice` drafts with the pair's draft file when it has one: a
    draft model, or a trained drafter given in its place (an EAGLE-3 or DFlash GGUF)."""
    return any(s.needs in (Needs.DRAFT_MODEL, Needs.SIDECAR) for s in chosen(choice))


def needs_of(choice: str) -> set[Needs]:
    """What `choice` cannot run without: nothing for auto (it takes what the pair offers)."""
    return set() if choice == AUTO else {s.needs for s in chosen(choice)}


def with_files(choice: str) -> tuple[DrafterSpec, ...]:
    """The kinds of `choice` that load drafter files of their own."""
    return tuple(s for s in chosen(choice) if s.files is not None)


# ---------------------------------------------------------------------- drafter files
def classify(info: GGUFInfo) -> DrafterSpec | None:
    """The kind whose drafter file a GGUF is (its architecture says, or its layout: MTP heads
    alone), or None: a model. The one answer to "what is this draft file?"."""
    for s in KINDS:
        f = s.files
        if f is not None and (info.architecture in f.archs or (f.claims is not None and f.claims(info))):
            return s
    return None


def named(filename: str) -> DrafterSpec | None:
    """The kind a companion's file name announces (`eagle3-...`, `dspark-...`), or None: what
    a catalog says before the file is downloaded."""
    name = filename.rsplit("/", 1)[-1].lower()
    for s in KINDS:
        if s.files is not None and any(name.startswith(p) for p in s.files.prefixes):
            return s
    return None


def read_file(info: GGUFInfo) -> DrafterFacts:
    """The facts of a drafter file's header; ModelFileError with one line when they are
    unusable (a crafted or damaged header that would make llama.cpp abort or draft nonsense)."""
    s = classify(info)
    if s is None or s.files is None:
        raise ModelFileError(f"{info.path.name} is not a drafter of its own ({info.architecture})")
    return s.files.read(info)


def check_file(target: GGUFInfo, info: GGUFInfo) -> DrafterFacts:
    """Whether the drafter file `info` can draft for `target`, from both headers: its facts, or
    ModelFileError (a header unusable as a drafter) / IncompatiblePairError (another target's,
    or another tokenizer) with one line."""
    s = classify(info)
    facts = read_file(info)
    assert s is not None and s.files is not None
    if classify(target) is not None:
        problems = [f"{target.path.name} is itself a drafter, not a model to draft for"]
    else:
        problems = s.files.check(target, facts, info)
    if problems:
        raise IncompatiblePairError(
            f"{info.path.name} is {described(facts.label)} for another target: "
            f"{'; '.join(problems)}. "
            "Use the one trained for this model (it ships beside it, in the same repository)."
        )
    check_pair(target, info)  # (its tokenizer is its target's)
    check_d2t_values(info, len(target.tokens))
    return facts


def refuse_as_target(info: GGUFInfo) -> None:
    """A drafter file given as the model to chat with: one line saying what to do instead."""
    s = classify(info)
    if s is None or s.files is None:
        return
    raise IncompatiblePairError(
        f"{info.path.name} is {s.files.what}, not a model to chat with: give it as the draft "
        "(--draft) beside the target it was made for"
    )


def attach_file(target: LoadedModel, path: Path, info: GGUFInfo) -> None:
    """Load a drafter file (checked against the target: check_file) beside the target."""
    s = classify(info)
    assert s is not None and s.files is not None, info.architecture
    s.files.load(target, path, info)


# ---------------------------------------------------------------------- a loaded pair
def available(target: LoadedModel, draft: LoadedModel | None, choice: str = AUTO) -> list[DrafterSpec]:
    """The kinds of `choice` this pair can draft with, in the registry's order."""
    return [s for s in chosen(choice) if s.missing(target, draft) is None]


def missing(target: LoadedModel, draft: LoadedModel | None, choice: str) -> str | None:
    """Why this pair cannot draft with `choice` (a kind it lacks), in one line; None: it can."""
    if choice == AUTO:
        return None
    s = spec(choice)
    if s is None:
        return f"unknown drafter {choice!r}: choose one of {', '.join(choices())}"
    return s.missing(target, draft)


def build(ctx: BuildContext) -> list[Drafter]:
    """The drafters of a generation: every kind of its choice the pair offers, composed."""
    pool = [d for s in chosen(ctx.config.drafter) if (d := s.build(ctx)) is not None]
    for compose in COMPOSITIONS:
        pool = compose(pool)
    return pool


def time_free_search(n_vocab: int, history: Sequence[int], k: int) -> float:
    """Seconds of one search by the free kinds (prompt lookup), the slowest's."""
    timers = [s.traits.time_search for s in KINDS if s.traits.time_search is not None]
    return max((t(n_vocab, history, k) for t in timers), default=0.0)


def attach(target: LoadedModel) -> None:
    """After a target loads: each kind that follows its decodes attaches to it (the heads)."""
    for s in KINDS:
        if s.attach is not None:
            s.attach(target)


def offered(target: LoadedModel, draft: LoadedModel | None) -> list[DrafterSpec]:
    """What a loaded pair offers to draft with (auto's candidates), in the registry's order."""
    return available(target, draft)


# ---------------------------------------------------------------------- several sequences
def _not_batching(s: DrafterSpec, draft: LoadedModel | None) -> str | None:
    """Why kind `s` does not draft for several sequences of this pair; None: it does."""
    return s.batching.why_not if s.batching.build is None else None


def batch_proposers(setup: BatchSetup) -> list[BatchProposer]:
    """The proposers of the kinds that draft for several sequences at once, for a batched
    engine over this pair (those the pair gives something to draft with), in the registry's
    order."""
    builds = [s.batching.build for s in KINDS if _not_batching(s, setup.draft) is None]
    built = (build(setup) for build in builds if build is not None)
    return [p for p in built if p is not None]


def not_batched(target: LoadedModel, draft: LoadedModel | None) -> list[str]:
    """The kinds this pair drafts with that do not draft for several sequences: "name (why)"."""
    return [f"{s.name} ({why})" for s in available(target, draft) if (why := _not_batching(s, draft))]


def batch_refusal(
    choice: str, kinds: list[str], target: LoadedModel, draft: LoadedModel | None
) -> str | None:
    """Why a request for `choice` cannot draft beside other sequences, with `kinds` those a
    batched engine over this pair drafts with (one line), or None when it can."""
    if choice == AUTO:
        return None
    s = spec(choice)
    if s is None:
        return missing(target, draft, choice)
    why = _not_batching(s, draft)
    if why is not None:
        return (
            f"drafting with {choice!r} runs one sequence at a time ({why}); parallel "
            f"sequences draft with {', '.join([*kinds, AUTO])} (or start tandem serve with --parallel 1)"
        )
    if choice not in kinds:
        why = s.missing(target, draft) or "this pair gives it nothing to draft with"
        return f"this server cannot draft with {choice!r}: {why}; ask for {', '.join([*kinds, AUTO])}"
    return None
