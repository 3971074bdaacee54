"""Who drafts for a loaded pair, in words the front-ends print: the draft model, the target's
own draft heads (multi-token prediction), prompt lookup, or a mix when the drafter is auto."""

from __future__ import annotations

from app.engine import ModelPair
from app.engine.config import DrafterChoice
from app.engine.generation import mtp_missing

HEADS = "its built-in MTP draft heads"


def drafters_used(pair: ModelPair, drafter: DrafterChoice) -> list[str]:
    """What drafts with `drafter` on this pair, in the engine's order of preference (see
    generation.generate): what a setting names, and for auto everything the pair has."""
    heads = pair.target.mtp is not None
    if drafter == "model":
        return [pair.draft.path.name] if pair.draft is not None else []
    if drafter == "mtp":
        return [HEADS] if heads else []
    if drafter == "lookup":
        return ["prompt lookup"]
    own = [pair.draft.path.name] if pair.draft is not None else []
    return [*own, *([HEADS] if heads else []), "prompt lookup"]


def drafted_by(pair: ModelPair, drafter: DrafterChoice, *, speculative: bool = True) -> str:
    """'drafted by X.gguf and prompt lookup', or 'the target alone'."""
    used = drafters_used(pair, drafter) if speculative else []
    if not used:
        return "the target alone"
    return "drafted by " + (
        " and ".join(used) if len(used) < 3 else ", ".join(used[:-1]) + " and " + used[-1]
    )


def no_draft_note(pair: ModelPair, drafter: DrafterChoice) -> str | None:
    """What to tell the user when auto has no draft model to draft with: the target's own heads
    draft instead (with prompt lookup), or, without them, prompt lookup alone, saying why heads
    the file has cannot be used."""
    if drafter != "auto" or pair.draft is not None:
        return None
    if pair.target.mtp is not None:
        return "no draft model given: drafting with the target's built-in draft heads (MTP) and prompt lookup"
    if pair.target.mtp_layers_in_file > 0:
        return f"no draft model given: drafting with prompt lookup only ({mtp_missing(pair.target)})"
    return "no draft model given: drafting with prompt lookup only"
