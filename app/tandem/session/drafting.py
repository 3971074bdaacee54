"""Who drafts for a loaded pair, in words the front-ends print: each drafter kind's own words
(drafters/registry.py), or a mix when the drafter is auto; and what exact output changes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.engine.config import DrafterChoice, GenerationConfig
from tandem.engine.drafters import registry
from tandem.engine.drafters.spec import Needs

if TYPE_CHECKING:
    from tandem.engine import ModelPair


def drafters_used(pair: ModelPair, drafter: DrafterChoice) -> list[str]:
    """What drafts with `drafter` on this pair, in the engine's order of preference (see
    generation.generate): what a setting names, and for auto everything the pair has."""
    kinds = registry.available(pair.target, pair.draft, drafter)
    return [s.words.phrase(pair.target, pair.draft) for s in kinds]


def drafted_by(pair: ModelPair, drafter: DrafterChoice, *, speculative: bool = True) -> str:
    """'drafted by X.gguf and prompt lookup', or 'the target alone'."""
    used = drafters_used(pair, drafter) if speculative else []
    if not used:
        return "the target alone"
    return "drafted by " + (
        " and ".join(used) if len(used) < 3 else ", ".join(used[:-1]) + " and " + used[-1]
    )


def no_draft_note(pair: ModelPair, drafter: DrafterChoice) -> str | None:
    """What to tell the user when auto has no draft model to draft with: what the target
    offers instead (its own heads, with prompt lookup), or, without them, prompt lookup alone,
    saying why what the file has cannot be used."""
    if drafter != registry.AUTO or pair.draft is not None:
        return None
    kinds = registry.available(pair.target, None)
    if any(s.needs is Needs.SIDECAR for s in kinds):
        return None  # the draft file given (or found) is a trained drafter: it drafts
    own = [s for s in kinds if s.needs is not Needs.NOTHING]
    if own:
        return "no draft model given: drafting with " + " and ".join(s.words.note for s in kinds)
    note = "no draft model given: drafting with " + " and ".join(s.words.note for s in kinds) + " only"
    why = [w for s in registry.KINDS if s.unusable is not None and (w := s.unusable(pair.target))]
    return note + (f" ({'; '.join(why)})" if why else "")


def offered(pair: ModelPair) -> list[str]:
    """The kinds this loaded pair can draft with (what auto ranks), by name."""
    return [s.name for s in registry.offered(pair.target, pair.draft)]


def drafts_itself(pair: ModelPair) -> bool:
    """Whether the target can draft for itself (its own heads are loaded), without a draft."""
    return any(s.needs is Needs.HEADS for s in registry.offered(pair.target, None))


def trained_drafter(pair: ModelPair) -> str | None:
    """What the pair's trained drafter is, in words ("eagle3-x.gguf (EAGLE-3 drafter)"), when
    its draft file is one (EAGLE-3, DFlash); None otherwise."""
    kinds = [s for s in registry.offered(pair.target, None) if s.needs is Needs.SIDECAR]
    return kinds[0].words.phrase(pair.target, None) if kinds else None


def exact_note(pair: ModelPair, config: GenerationConfig) -> str | None:
    """What exact output changes in this generation that the user asked for otherwise: a K
    above what the target's repacked weights allow (TandemError where exactness was required
    and is not possible, as `ModelPair.generate` would raise)."""
    ran = pair.exact_config(config)
    if not ran.exact or config.draft_max is None or ran.k_max >= config.draft_max:
        return None
    return (
        f"exact output drafts at most K={ran.k_max} on this target: its weights are repacked for this "
        f"CPU, and only batches of up to {ran.k_max + 1} tokens are computed as the target alone "
        f"computes them (--no-exact drafts up to {config.draft_max})"
    )
