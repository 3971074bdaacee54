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

from tandem.engine.drafters import registry
from tandem.engine.drafters.heads.files import described
from tandem.engine.drafters.spec import DrafterSpec, Needs
from tandem.engine.errors import IncompatiblePairError, TandemError
from tandem.engine.files.compat import PairTokenizers, check_pair
from tandem.engine.files.gguf_file import GGUFInfo, read_gguf

if TYPE_CHECKING:
    from tandem.catalog.fit import FitVerdict
    from tandem.session.refs import DraftNeeds, PairRef

# What to do instead when a target without draft heads is asked to draft alone, in the app's
# terms (the command line's is the kind's own: drafters/heads/mtp.py).
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


def preflight(
    ref: PairRef, needs: DraftNeeds, *, n_ctx: int | None = None, remedy: str | None = None
) -> Checked:
    """Check `ref`'s files for drafting as `needs` says, before anything is loaded; raise
    TandemError (ModelFileError, IncompatiblePairError) with one line otherwise. `n_ctx`: also
    judge whether the pair fits in memory at that context (the verdict is the caller's to act
    on: the app asks before loading a pair that will not fit). `remedy`: the front-end's advice
    after a refusal it can act on (None: the command line's)."""
    target = read_gguf(ref.target)  # missing, unreadable, not a GGUF, truncated: one line each
    registry.refuse_as_target(target)  # (a drafter file given as the model to chat with)
    draft = read_gguf(ref.draft) if ref.draft is not None else None
    kind = registry.spec(ref.draft_kind) if draft is not None else None
    tokenizers: PairTokenizers | None = None
    if draft is not None and kind is not None:
        _check_file(target, draft, kind, needs)
    elif draft is not None:
        tokenizers = check_pair(target, draft)
    if needs.need_sidecar and (kind is None or kind.name != needs.need_sidecar):
        raise TandemError(_no_file_message(ref, draft, kind, needs.need_sidecar))
    if needs.need_heads and (kind is None or kind.needs is not Needs.HEADS):
        # Drafting alone with the target's own heads (none in a file of their own): each such
        # kind says what the target's header and this build must allow.
        for s in registry.KINDS:
            if s.needs is Needs.HEADS and s.preflight is not None and (why := s.preflight(target, remedy)):
                raise TandemError(why)
    fit = _fit(ref, n_ctx) if n_ctx is not None else None
    return Checked(ref, target, draft, fit, tokenizers)


def _check_file(target: GGUFInfo, draft: GGUFInfo, kind: DrafterSpec, needs: DraftNeeds) -> None:
    """A drafter in a file of its own given as the draft: it must fit the target, this build
    must run it, and the drafter asked for must not need a draft model instead."""
    facts = registry.check_file(target, draft)  # (a damaged header, another target's, another tokenizer)
    name = draft.path.name
    if needs.need_draft:
        raise IncompatiblePairError(
            f"{name} is {described(facts.label)}, not a draft model: draft with it "
            f"(--drafter {facts.kind}, or {registry.AUTO})"
        )
    assert kind.files is not None
    if not kind.files.supported():
        raise TandemError(kind.files.unsupported(name))


def _no_file_message(ref: PairRef, draft: GGUFInfo | None, kind: DrafterSpec | None, name: str) -> str:
    wanted = registry.spec(name)
    assert wanted is not None and wanted.files is not None
    label = wanted.words.label
    if draft is not None and kind is not None:
        theirs = registry.read_file(draft).label
        return f"{draft.path.name} is {described(theirs)}, not {described(label)}: use --drafter {kind.name}"
    what = "none was given or found beside it"
    if ref.draft is not None:
        what = f"{ref.draft.name} is a draft model"
    files = f"{wanted.files.prefixes[0]}*.gguf"
    return (
        f"--drafter {name} needs the {label} trained for {ref.target.name} ({files}), and {what}: "
        "give it as the draft, or put it in the target's folder"
    )


def _fit(ref: PairRef, n_ctx: int) -> FitVerdict | None:
    from tandem.catalog.fit import files_fit

    try:
        return files_fit(ref.target, ref.draft, n_ctx)
    except (TandemError, OSError):  # a split part gone, memory not measurable: not told
        return None
