"""What is checked before a pair loads, in one place for every front-end.

Loading a pair takes seconds to minutes and, in the app, first frees the pair in use; so
whatever can be told from the files' headers is told before: each file is readable, a GGUF
and complete; the draft's tokenizer is the target's, or one it can draft across; a target
that drafts alone has its own draft heads and this llama.cpp build can run them; and, when
the front-end asks, whether the pair fits in memory. Only headers are read (a few
milliseconds), never the weights.

The CLI and the server reach this through `resolve_pair`; the app's main load and its By-path
tab call it directly. Each refusal is one line worded here; only the advice that ends it is
the front-end's own (flags on the command line, the picker in the app).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tandem.engine import mtp, sidecar_model
from tandem.engine.compat import PairTokenizers, check_pair
from tandem.engine.drafters import registry
from tandem.engine.errors import IncompatiblePairError, TandemError
from tandem.engine.gguf_file import GGUFInfo, read_gguf
from tandem.engine.sidecar import MTP, check_sidecar, described, read_facts, refuse_as_target, sidecar_kind

if TYPE_CHECKING:
    from tandem.catalog.fit import FitVerdict
    from tandem.session.pairs import DraftNeeds, PairRef

# What to do instead when a target without draft heads is asked to draft alone, in each
# front-end's terms.
CLI_REMEDY = "use a draft model (--draft) or prompt lookup (--drafter lookup)"
APP_REMEDY = "pick a pair with a draft model, or give a draft GGUF path"


@dataclass(frozen=True)
class Checked:
    """A pair that passed the checks: its files' headers, and its fit when asked for."""

    ref: PairRef
    target: GGUFInfo
    draft: GGUFInfo | None
    fit: FitVerdict | None = None  # None: not asked (no context size given), or not told
    # How the draft's tokenizer relates to the target's (None: no draft): the same, or another
    # one it drafts across (its note says so).
    tokenizers: PairTokenizers | None = None


def no_heads_message(name: str, remedy: str = CLI_REMEDY) -> str:
    """Why a target without multi-token-prediction blocks cannot draft alone."""
    return f"{name} has no built-in draft heads (multi-token prediction layers): {remedy}"


def preflight(
    ref: PairRef, needs: DraftNeeds, *, n_ctx: int | None = None, remedy: str = CLI_REMEDY
) -> Checked:
    """Check `ref`'s files for drafting as `needs` says, before anything is loaded; raise
    TandemError (ModelFileError, IncompatiblePairError) with one line otherwise. `n_ctx`: also
    judge whether the pair fits in memory at that context (the verdict is the caller's to act
    on: the app asks before loading a pair that will not fit)."""
    target = read_gguf(ref.target)  # missing, unreadable, not a GGUF, truncated: one line each
    refuse_as_target(target)  # (a trained drafter given as the model to chat with)
    draft = read_gguf(ref.draft) if ref.draft is not None else None
    tokenizers: PairTokenizers | None = None
    if draft is not None and sidecar_kind(draft) is not None:
        _check_trained(target, draft, needs)
    elif draft is not None:
        tokenizers = check_pair(target, draft)
    if needs.need_sidecar and (draft is None or sidecar_kind(draft) != needs.need_sidecar):
        raise TandemError(_no_sidecar_message(ref, draft, needs.need_sidecar))
    heads_file = draft is not None and sidecar_kind(draft) == MTP  # (the heads in a file of their own)
    if needs.need_heads and not heads_file:
        if target.mtp_layers == 0:
            raise TandemError(no_heads_message(ref.target.name, remedy))
        if not mtp.supported():
            raise TandemError(mtp.unsupported_message(ref.target.name))
    fit = _fit(ref, n_ctx) if n_ctx is not None else None
    return Checked(ref, target, draft, fit, tokenizers)


def _check_trained(target: GGUFInfo, draft: GGUFInfo, needs: DraftNeeds) -> None:
    """A trained drafter (EAGLE-3, DFlash) given as the draft: it must fit the target, this
    build must run it, and the drafter asked for must not need a draft model instead."""
    facts = check_sidecar(target, draft)  # (a damaged header, another target's, another tokenizer)
    name = draft.path.name
    if needs.need_draft:
        raise IncompatiblePairError(
            f"{name} is {described(facts.label)}, not a draft model: draft with it "
            f"(--drafter {facts.kind}, or auto)"
        )
    if not sidecar_model.supported():
        raise TandemError(sidecar_model.unsupported_message(name))


def _no_sidecar_message(ref: PairRef, draft: GGUFInfo | None, kind: str) -> str:
    spec = registry.spec(kind)
    label = spec.label if spec is not None else kind
    if draft is not None and (other := sidecar_kind(draft)) is not None:
        theirs = read_facts(draft).label
        name = draft.path.name
        return f"{name} is {described(theirs)}, not {described(label)}: use --drafter {other}"
    what = "none was given or found beside it"
    if ref.draft is not None:
        what = f"{ref.draft.name} is a draft model"
    return (
        f"--drafter {kind} needs the {label} trained for {ref.target.name} ({kind}-*.gguf), and "
        f"{what}: give it as the draft, or put it in the target's folder"
    )


def _fit(ref: PairRef, n_ctx: int) -> FitVerdict | None:
    from tandem.catalog.fit import files_fit

    try:
        return files_fit(ref.target, ref.draft, n_ctx)
    except (TandemError, OSError):  # a split part gone, memory not measurable: not told
        return None
