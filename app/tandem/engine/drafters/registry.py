"""Every drafter kind, in the order the scheduler asks them for offers (a later offer may read
what an earlier one set: see spec.RoundView), and the compositions built from them.

A new kind is one module with a `SPEC`, added to KINDS below (docs/architecture.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..gguf_info import GGUFInfo
from ..model import LoadedModel
from . import cross, dflash, eagle3, hybrid, lookup, model, mtp
from .spec import BuildContext, Drafter, DrafterSpec, Needs

KINDS: tuple[DrafterSpec, ...] = (model.SPEC, cross.SPEC, mtp.SPEC, eagle3.SPEC, dflash.SPEC, lookup.SPEC)
# Compositions: a pool -> the pool with some drafters combined (the draft model finished by
# prompt lookup).
COMPOSITIONS: tuple[Callable[[list[Drafter]], list[Drafter]], ...] = (hybrid.compose,)

# The choice of every kind the pair offers (--drafter auto): the scheduler ranks them.
AUTO = "auto"


def spec(name: str) -> DrafterSpec | None:
    """The kind named `name` (None: "", no drafter, or a name no kind has)."""
    return next((s for s in KINDS if s.name == name), None)


def names() -> tuple[str, ...]:
    """The kinds a user may choose alone, in the registry's order."""
    return tuple(s.name for s in KINDS if s.choosable)


def label(name: str) -> str:
    """A kind's label for people ("draft model"); `name` itself when no kind has it."""
    s = spec(name)
    return s.label if s is not None else name


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


def sidecar_spec(info: GGUFInfo) -> DrafterSpec | None:
    """The kind whose drafter file a GGUF is (its architecture says, or its layout: the MTP heads
    alone), or None: a model."""
    for s in KINDS:
        if info.architecture in s.sidecar_archs or (s.sidecar_claims is not None and s.sidecar_claims(info)):
            return s
    return None


def attach_sidecar(target: LoadedModel, path: Path, info: GGUFInfo) -> None:
    """Load a trained drafter (checked against the target: sidecar.py) beside the target."""
    s = sidecar_spec(info)
    assert s is not None and s.load_sidecar is not None, info.architecture
    s.load_sidecar(target, path, info)


def needs_of(choice: str) -> set[Needs]:
    """What `choice` cannot run without: nothing for auto (it takes what the pair offers)."""
    return set() if choice == AUTO else {s.needs for s in chosen(choice)}


def available(target: LoadedModel, draft: LoadedModel | None, choice: str = AUTO) -> list[DrafterSpec]:
    """The kinds of `choice` this pair can draft with, in the registry's order."""
    return [s for s in chosen(choice) if s.missing(target, draft) is None]


def missing(target: LoadedModel, draft: LoadedModel | None, choice: str) -> str | None:
    """Why this pair cannot draft with `choice` (a kind it lacks), in one line; None: it can."""
    if choice == AUTO:
        return None
    s = spec(choice)
    if s is None:
        return f"unknown drafter {choice!r}: choose one of {', '.join((*names(), AUTO))}"
    return s.missing(target, draft)


def build(ctx: BuildContext) -> list[Drafter]:
    """The drafters of a generation: every kind of its choice the pair offers, composed."""
    pool = [d for s in chosen(ctx.config.drafter) if (d := s.build(ctx)) is not None]
    for compose in COMPOSITIONS:
        pool = compose(pool)
    return pool


def attach(target: LoadedModel) -> None:
    """After a target loads: each kind that follows its decodes attaches to it (the heads)."""
    for s in KINDS:
        if s.attach is not None:
            s.attach(target)


def offered(target: LoadedModel, draft: LoadedModel | None) -> list[DrafterSpec]:
    """What a loaded pair offers to draft with (auto's candidates), in the registry's order."""
    return available(target, draft)
