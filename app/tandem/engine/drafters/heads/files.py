"""What a drafter in a file of its own says in its header, and the checks every such file passes
against its target, from the headers alone (no llama.cpp: the catalog matches companions with
them).

They are small separate files (ggml-org's conversions name them `eagle3-*.gguf`,
`dflash-*.gguf`, `dspark-*.gguf`, `mtp-*.gguf`) trained on one target's hidden rows at a few of
its layers, or a model's MTP heads exported without its trunk; they borrow the target's token
embeddings and LM head where they have none of their own. A file meant for another target would
read rows of the wrong width or from layers the target does not have (llama.cpp aborts the
process on both), so it is refused with the reason before anything loads. Each kind reads its
own header (`Files.read` in its spec) and adds its own objections (`Files.check`); what is the
same for all of them is here, and registry.check_file runs the whole check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ModelFileError
from ...files.gguf_info import GGUFInfo, TensorInfo

# Architectures whose llama.cpp graph hands over a layer's input rows (`embeddings_layer_inp`;
# for any other, llama.cpp asserts and the process ends): src/models/*.cpp set t_layer_inp.
LAYER_TAP_ARCHS = frozenset(
    {
        "bailingmoe3",
        "deepseek4",
        "gemma4",
        "gpt-oss",
        "hunyuan_vl",
        "lfm2",
        "llama",
        "mimo2",
        "minimax-01",
        "minimax-m2",
        "muse-glimmer",
        "nanbeige",
        "nemotron_h",
        "qwen3",
        "qwen35",
        "qwen35moe",
        "qwen3moe",
        "qwen3next",
        "qwen4exp",
    }
)
# Of those, the ones that also hand over the last layer's output (layer id = the layer count).
OUTPUT_TAP_ARCHS = frozenset({"deepseek4", "mimo2", "nemotron_h"})

_I64 = 27  # ggml's GGML_TYPE_I64, the type llama.cpp requires of d2t
_MAX_D2T = 1 << 20  # entries of d2t read to check them (real ones: 32,000)


@dataclass(frozen=True)
class DrafterFacts:
    """What a drafter file's header says."""

    kind: str  # the drafter kind that drafts with it
    label: str  # for people: "EAGLE-3 drafter", "DSpark drafter", "MTP heads"
    variant: str  # "EAGLE-3", "DFlash", "DSpark" (a Markov head), "DFlash2" (a selector), "MTP"
    layers: tuple[int, ...]  # the target layers whose input rows it reads
    n_embd: int
    target_hidden: int  # the width of the target rows it was trained on
    max_draft: int  # the most tokens one round can draft with it
    block_size: int = 0  # DFlash: positions in a block, the last token's included
    anchor_first: bool = False  # DSpark: the last token's own slot guesses the next token
    mask_token: int | None = None  # DFlash: the token the block's open positions hold
    draft_vocab: int = 0  # rows of its own reduced vocabulary (d2t); 0: the target's
    own_embeddings: bool = False
    own_head: bool = False


Bad = Callable[[str], ModelFileError]


def unusable(info: GGUFInfo, what: str) -> Bad:
    """How a kind's reader refuses a header: "x.gguf is not a usable EAGLE-3 drafter: ..."."""

    def bad(reason: str) -> ModelFileError:
        return ModelFileError(f"{info.path.name} is not a usable {what} drafter: {reason}")

    return bad


def positive(info: GGUFInfo, key: str) -> int | None:
    """A header value that is a positive integer, else None."""
    value = info.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def target_layers(info: GGUFInfo, kind: str, bad: Bad) -> tuple[int, ...]:
    """The target layers a trained drafter's header says it reads (`{kind}.target_layers`)."""
    layers = info.get(f"{kind}.target_layers")
    if not isinstance(layers, tuple) or not layers:
        raise bad(f"its header does not list the target layers it reads ({kind}.target_layers)")
    if any(i < 0 for i in layers):
        raise bad(f"it lists a negative target layer ({min(layers)})")
    return layers


def d2t_rows(info: GGUFInfo, tensors: dict[str, TensorInfo], bad: Bad, *, own_head: bool) -> int:
    """Rows of the reduced draft vocabulary (0 without d2t), checked as llama.cpp asserts."""
    d2t = tensors.get("d2t")
    if d2t is None:
        return 0
    if d2t.ggml_type != _I64 or len(d2t.shape) != 1:
        raise bad("its d2t table is not a list of 64-bit token ids")
    head = tensors.get("output.weight")
    if not own_head or head is None:
        raise bad("it maps a reduced vocabulary (d2t) but has no LM head of its own")
    if len(head.shape) < 2 or head.shape[1] != d2t.shape[0]:
        raise bad(f"its d2t table has {d2t.shape[0]:,} rows and its LM head {head.shape[-1]:,}")
    if d2t.shape[0] > _MAX_D2T:
        raise bad(f"its d2t table has {d2t.shape[0]:,} rows (real ones: tens of thousands)")
    return int(d2t.shape[0])


@dataclass(frozen=True)
class TrainedHeader:
    """What every trained drafter's header says alike (its own reader checks the rest)."""

    bad: Bad  # how its reader refuses it
    layers: tuple[int, ...]
    n_embd: int
    tensors: dict[str, TensorInfo]
    draft_vocab: int
    own_embeddings: bool
    own_head: bool

    def facts(self, kind: str, variant: str, target_hidden: int, max_draft: int, **more: Any) -> DrafterFacts:
        """The drafter's facts: these, and what its own reader found (`more`: DrafterFacts'
        block_size, anchor_first, mask_token)."""
        return DrafterFacts(
            kind,
            f"{variant} drafter",
            variant,
            self.layers,
            self.n_embd,
            target_hidden,
            max_draft,
            draft_vocab=self.draft_vocab,
            own_embeddings=self.own_embeddings,
            own_head=self.own_head,
            **more,
        )


def read_trained(info: GGUFInfo, arch: str, what: str) -> TrainedHeader:
    """The layers a trained drafter reads, its width, its own embeddings, head and reduced
    vocabulary (`{arch}.*` keys), checked as llama.cpp asserts; `what` names it in a refusal."""
    bad = unusable(info, what)
    layers = target_layers(info, arch, bad)
    n_embd = positive(info, f"{arch}.embedding_length")
    if n_embd is None:
        raise bad(f"its header has no valid width ({arch}.embedding_length)")
    tensors = {t.name: t for t in info.tensors}
    own_embd, own_head = "token_embd.weight" in tensors, "output.weight" in tensors
    draft_vocab = d2t_rows(info, tensors, bad, own_head=own_head)
    return TrainedHeader(bad, layers, n_embd, tensors, draft_vocab, own_embd, own_head)


def layer_problems(target: GGUFInfo, facts: DrafterFacts) -> list[str]:
    """Why a drafter reading the target's layer rows cannot draft for `target`, as short
    phrases: the width it was trained on, the layers it reads, whether llama.cpp hands them
    over for the target's architecture."""
    arch = target.architecture
    name = target.path.name
    problems: list[str] = []
    width = positive(target, f"{arch}.embedding_length")
    if width is not None and facts.target_hidden != width:
        problems.append(f"it was trained on a target {facts.target_hidden} wide, and {name} is {width} wide")
    elif width is not None and facts.n_embd != width and not (facts.own_embeddings and facts.own_head):
        problems.append(f"it is {facts.n_embd} wide and borrows the embeddings of a target {width} wide")
    blocks = positive(target, f"{arch}.block_count")
    if blocks is not None:
        n_layer = blocks - target.mtp_layers  # (the trunk: MTP blocks follow it)
        top = max(facts.layers)
        if top > n_layer or (top == n_layer and arch not in OUTPUT_TAP_ARCHS):
            problems.append(f"it reads the target's layer {top}, and {name} has {n_layer} layers")
    if arch not in LAYER_TAP_ARCHS:
        problems.append(f"this llama.cpp cannot hand over the hidden rows of a {arch} model's layers")
    return problems


def check_d2t_values(info: GGUFInfo, n_vocab: int) -> None:
    """Every d2t entry must be a token of the target (llama.cpp scatters logits with them)."""
    d2t = next((t for t in info.tensors if t.name == "d2t"), None)
    if d2t is None or not d2t.shape or n_vocab <= 0:
        return
    n = d2t.shape[0]
    ids = _read_ints(info.path, info.data_offset + d2t.offset, n)
    if ids is None:
        raise ModelFileError(f"{info.path.name}: its d2t table could not be read")
    if n and (int(ids.min()) < 0 or int(ids.max()) >= n_vocab):
        raise ModelFileError(
            f"{info.path.name} is not a usable drafter: its d2t table maps to token "
            f"{int(ids.max() if ids.max() >= n_vocab else ids.min())}, outside the target's "
            f"{n_vocab:,}-token vocabulary"
        )


def described(label: str) -> str:
    """A drafter's label as a sentence names it: "an EAGLE-3 drafter", "a DFlash drafter",
    "MTP heads"."""
    if label.endswith("heads"):
        return label
    return ("an " if label[:1] in "AEIOU" else "a ") + label


def _read_ints(path: Path, offset: int, n: int) -> np.ndarray | None:
    with contextlib.suppress(OSError), path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read(8 * n)
        if len(data) == 8 * n:
            return np.frombuffer(data, dtype="<i8")
    return None
