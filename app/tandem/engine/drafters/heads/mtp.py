"""The target's own draft heads (multi-token prediction, "nextn" layers): no second model.

Qwen3.5/3.6 (and their MoE variants), GLM-4.5+, DeepSeek V3 and others ship one or more MTP
blocks after their trunk. A block guesses the token after next from the next token's embedding
and the trunk's last hidden row (before the LM head). llama.cpp runs the blocks in a second
context over the same weights (`LLAMA_CONTEXT_TYPE_MTP`), with a small KV cache of its own.

`MtpHead` is one of the target's decode listeners (base.py): while a generation drafts with it,
the target decodes with `embeddings_nextn` on, so every batch also yields each token's hidden
row, and the head keeps them. Entry p of its context is (x_p, h_{p-1}) at position p and predicts
x_{p+1}. A draft token costs one decoder block and the LM head: cheap next to a separate draft
model's, and nothing is loaded twice. Sampling is exact as for any drafter (HeadDrafter).

The heads may also come as a file of their own (`mtp-*.gguf`: the model's architecture, its MTP
block, embeddings and head, no trunk), for the model exported without them: checked against the
target (the same architecture, width and trunk) and drafted with as its own heads would be.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ...config import DRAFT_MAX_LIMIT
from ...errors import ModelLoadError
from ...files.gguf_info import GGUFInfo
from ..spec import BuildContext, Drafter, DrafterSpec, Files, Needs, Traits, Words
from .base import EntryHead, HeadDrafter
from .batched import batching
from .files import DrafterFacts, positive

if TYPE_CHECKING:
    from ...llama.model import LoadedModel
    from .context import HeadContext

KIND = "mtp"
# What a front-end advises when a target without heads is asked to draft alone (the CLI's).
CLI_REMEDY = "use a draft model (--draft) or prompt lookup (--drafter lookup)"


def no_heads_message(name: str, remedy: str | None = None) -> str:
    """Why a model without MTP blocks cannot draft for itself, with what to use instead."""
    return f"{name} has no built-in draft heads (multi-token prediction layers): {remedy or CLI_REMEDY}"


def unsupported_message(name: str) -> str:
    """Why this llama.cpp build cannot run a model's heads (the staging calls are missing)."""
    return (
        f"this llama.cpp build cannot run {name}'s draft heads: update it "
        "(python3 scripts/install.py --rebuild)"
    )


def _supported() -> bool:
    from .context import heads_supported

    return heads_supported()


class MtpHead(EntryHead):
    """The MTP context of one target, kept in step with the target's decodes. The target's
    hidden rows are kept for every position it holds (float16: n_ctx x n_embd x 2 bytes, 40 MiB
    for a 5120-wide model at 4096 tokens)."""

    offset = 0

    def __init__(
        self, target: LoadedModel, *, source: Path | None = None, weights: HeadContext | None = None
    ) -> None:
        from .context import HeadContext  # (llama.cpp's bindings: only once a head is made)

        # `source`: heads loaded from a file of their own, which the context owns (or the
        # context `weights`, which loaded it: another sequence's heads).
        context = HeadContext(
            target, path=source, n_outputs=1, what="the draft heads", mtp=True, weights=weights
        )
        super().__init__(target, context, context.n_embd)
        self.source = source
        self.layers = context.mtp_blocks()
        # Rows only for the entries that output (a draft step's): its own guess of the
        # target's row, fed to the next step.
        context.extra_rows(own=True)

    @property
    def subject(self) -> str:
        return f"{self.target.path.name}'s draft heads"

    def beside(self) -> MtpHead:
        return MtpHead(self.target, source=self.source, weights=self.context if self.source else None)

    def _follow(self, on: bool) -> None:
        self.target.want_hidden_rows(on)

    def _rows_of(self, model: LoadedModel, n: int, at: int) -> npt.NDArray[np.float32]:
        return model.hidden_rows(n, self.context.n_embd, at)


def head_of(target: LoadedModel) -> MtpHead | None:
    """The target's heads, when they were attached."""
    return next((x for x in target.listeners if isinstance(x, MtpHead)), None)


def attach(target: LoadedModel) -> MtpHead | None:
    """Give a loaded target its heads when its MTP blocks were loaded: they follow its decodes
    as one of its listeners. None (with a note on the target) when they cannot run."""
    if not target.mtp_loaded:
        return None
    try:
        head = MtpHead(target)
    except ModelLoadError as exc:
        target.notes.append(f"{target.role}: its draft heads are not used: {exc}")
        return None
    target.listeners.append(head)
    return head


def attach_file(target: LoadedModel, path: Path, info: GGUFInfo) -> MtpHead:
    """Load MTP heads from a file of their own (checked against the target) and attach them
    to the target, as its own heads would be."""
    if not _supported():
        raise ModelLoadError(unsupported_message(path.name))
    head = MtpHead(target, source=path)
    target.listeners.append(head)
    return head


# ---------------------------------------------------------------------- the file's header
def heads_alone(info: GGUFInfo) -> bool:
    """Whether a file holds a model's MTP heads and not its trunk (llama.cpp loads such a file
    when its first layer's weights are absent)."""
    return info.mtp_layers > 0 and not any(t.name == "blk.0.attn_norm.weight" for t in info.tensors)


def _read(info: GGUFInfo) -> DrafterFacts:
    width = positive(info, f"{info.architecture}.embedding_length") or 0
    return DrafterFacts(KIND, "MTP heads", "MTP", (), width, width, max_draft=DRAFT_MAX_LIMIT)


def _check(target: GGUFInfo, facts: DrafterFacts, heads: GGUFInfo) -> list[str]:
    """The heads are a block of the model they were exported from: a target without heads of
    its own (it would draft with those), of the same architecture, width and trunk."""
    if target.mtp_layers:
        return [f"{target.path.name} carries MTP heads of its own"]
    problems: list[str] = []
    if heads.architecture != target.architecture:
        name, arch = target.path.name, target.architecture
        problems.append(f"they are {heads.architecture} heads, and {name} is a {arch} model")
        return problems
    arch = target.architecture
    for key, what in (("embedding_length", "wide"), ("block_count", "layers deep")):
        mine = positive(heads, f"{arch}.{key}")
        theirs = positive(target, f"{arch}.{key}")
        if key == "block_count" and mine is not None:
            mine -= heads.mtp_layers  # (the trunk they follow)
        if mine is not None and theirs is not None and mine != theirs:
            problems.append(f"they follow a trunk {mine} {what}, and {target.path.name} is {theirs} {what}")
    return problems


# ---------------------------------------------------------------------- the kind
def _build(ctx: BuildContext) -> Drafter | None:
    head = head_of(ctx.target)
    return None if head is None else _drafter(head, ctx)


def _drafter(head: MtpHead, ctx: BuildContext) -> Drafter:
    return MtpDrafter(head, ctx.config.sampler, ctx.rng, ctx.config.p_min, ctx.cancel)


class MtpDrafter(HeadDrafter):
    kind = KIND


def _missing(target: LoadedModel, draft: LoadedModel | None) -> str | None:
    """Why the target has no draft heads to draft with, in one line (None: it has)."""
    if head_of(target) is not None:
        return None
    name = target.path.name
    if target.mtp_layers_in_file == 0:
        return no_heads_message(name)
    if not target.options.load_mtp:
        return f"{name}'s draft heads were not loaded: load them to draft with mtp"
    if target.notes:
        return f"{name}'s draft heads could not be used: " + "; ".join(target.notes)
    return unsupported_message(name)


def _preflight(target: GGUFInfo, remedy: str | None) -> str | None:
    """A target drafting alone with its heads: it has them, and this build runs them."""
    if target.mtp_layers == 0:
        return no_heads_message(target.path.name, remedy)
    if not _supported():
        return unsupported_message(target.path.name)
    return None


def _phrase(target: LoadedModel, draft: LoadedModel | None) -> str:
    head = head_of(target)
    if head is not None and head.source is not None:
        return f"{head.source.name} (its MTP heads)"
    return "its built-in MTP draft heads"


SPEC = DrafterSpec(
    name=KIND,
    words=Words(
        label="built-in heads (MTP)",
        help="the target's own draft heads (MTP), in its file or beside it (mtp-*.gguf)",
        note="the target's built-in draft heads (MTP)",
        phrase=_phrase,
    ),
    needs=Needs.HEADS,
    build=_build,
    missing=_missing,
    traits=Traits(untimed_rank=1),
    batching=batching(KIND, head_of, _drafter),
    attach=attach,
    listens=("hidden rows",),
    unusable=lambda target: None if target.mtp_layers_in_file == 0 else _missing(target, None),
    preflight=_preflight,
    # The heads exported as a file of their own, given as the draft file or found beside it.
    files=Files(
        label="MTP heads",
        what="a model's MTP heads alone",
        read=_read,
        check=_check,
        load=attach_file,
        supported=_supported,
        unsupported=unsupported_message,
        claims=heads_alone,
        prefixes=("mtp-",),
        rank=2,  # (a target's own heads: after a trained drafter, which drafts better)
    ),
)
