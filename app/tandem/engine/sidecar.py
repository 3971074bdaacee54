"""Trained drafters that ship beside a target: EAGLE-3 and DFlash (DSpark, DFlash2) GGUFs.

They are small separate files (ggml-org's conversions name them `eagle3-*.gguf`,
`dflash-*.gguf`, `dspark-*.gguf`) trained on one target's hidden rows at a few of its layers,
and they borrow its token embeddings and LM head where they have none of their own. What their
headers say, and whether one fits a given target, is decided here from the headers alone,
before anything loads: a sidecar meant for another target would read rows of the wrong width
or from layers the target does not have (llama.cpp aborts the process on both), so it is
refused with the reason. No llama.cpp here (the catalog matches companions with it).

The runtime halves are drafters/eagle3.py and drafters/dflash.py.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .compat import check_pair
from .config import DRAFT_MAX_LIMIT
from .errors import IncompatiblePairError, ModelFileError
from .gguf_info import GGUFInfo, TensorInfo

EAGLE3 = "eagle3"  # the GGUF architecture, and the drafter kind's name
DFLASH = "dflash"
SIDECAR_ARCHS = (EAGLE3, DFLASH)
# The target's own MTP heads exported as a file of their own (llama.cpp's converter, --mtp):
# the target's architecture, its MTP block(s), embeddings and head, no trunk.
MTP = "mtp"

# DFlash draws a block [last, <mask> x (B - 1)]: at least one mask; real drafters use 7-16.
MIN_BLOCK_SIZE = 2
MAX_BLOCK_SIZE = 256
DEFAULT_BLOCK_SIZE = 16  # llama.cpp's when the header does not say
EAGLE3_LAYERS = 3  # EAGLE-3 fuses exactly three of the target's layers

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

# File-name prefixes of companions in a target's folder (llama.cpp's downloader and presets use
# the same), and the kind each names ("mtp": the target's heads in a file of their own).
COMPANION_PREFIXES = {"eagle3-": EAGLE3, "dflash-": DFLASH, "dspark-": DFLASH, "mtp-": MTP}

_I64 = 27  # ggml's GGML_TYPE_I64, the type llama.cpp requires of d2t
_MAX_D2T = 1 << 20  # entries of d2t read to check them (real ones: 32,000)


@dataclass(frozen=True)
class SidecarFacts:
    """What a trained drafter's header says."""

    kind: str  # EAGLE3 or DFLASH
    variant: str  # "EAGLE-3", "DFlash", "DSpark" (a Markov head), "DFlash2" (a selector)
    layers: tuple[int, ...]  # the target layers whose input rows it reads
    n_embd: int
    target_hidden: int  # the width of the target rows it was trained on
    block_size: int = 0  # DFlash: positions in a block, the last token's included
    anchor_first: bool = False  # DSpark: the last token's own slot guesses the next token
    mask_token: int | None = None  # DFlash: the token the block's open positions hold
    draft_vocab: int = 0  # rows of its own reduced vocabulary (d2t); 0: the target's
    own_embeddings: bool = False
    own_head: bool = False

    @property
    def label(self) -> str:
        """For people: "EAGLE-3 drafter", "DSpark drafter", "MTP heads"."""
        return "MTP heads" if self.kind == MTP else f"{self.variant} drafter"

    @property
    def max_draft(self) -> int:
        """The most tokens one round can draft with it: a DFlash block's open positions."""
        if self.kind == DFLASH:
            slots = self.block_size if self.anchor_first else self.block_size - 1
            return max(1, min(DRAFT_MAX_LIMIT, slots))
        return DRAFT_MAX_LIMIT


def sidecar_kind(info: GGUFInfo) -> str | None:
    """EAGLE3 or DFLASH when the file is such a drafter (its architecture says), MTP for MTP
    heads without a trunk, else None (a model)."""
    arch = info.architecture
    if arch in SIDECAR_ARCHS:
        return arch
    return MTP if mtp_only(info) else None


def mtp_only(info: GGUFInfo) -> bool:
    """Whether the file holds a model's MTP heads and not its trunk (llama.cpp loads such a file
    when its first layer's weights are absent)."""
    return info.mtp_layers > 0 and not any(t.name == "blk.0.attn_norm.weight" for t in info.tensors)


def kind_from_name(filename: str) -> str | None:
    """The kind a companion's file name announces (`eagle3-...`, `dflash-...`, `dspark-...`,
    `mtp-...`), or None: what a catalog says before the file is downloaded."""
    name = filename.rsplit("/", 1)[-1].lower()
    return next((kind for prefix, kind in COMPANION_PREFIXES.items() if name.startswith(prefix)), None)


def read_facts(info: GGUFInfo) -> SidecarFacts:
    """The facts of a sidecar's header; ModelFileError with one line when they are unusable
    (a crafted or damaged header that would make llama.cpp abort or draft nonsense)."""
    kind = sidecar_kind(info)
    if kind is None:
        raise ModelFileError(f"{info.path.name} is not an EAGLE-3 or DFlash drafter ({info.architecture})")
    if kind == MTP:
        width = _positive(info, f"{info.architecture}.embedding_length") or 0
        return SidecarFacts(MTP, "MTP", (), width, width)
    what = "EAGLE-3" if kind == EAGLE3 else "DFlash"

    def bad(reason: str) -> ModelFileError:
        return ModelFileError(f"{info.path.name} is not a usable {what} drafter: {reason}")

    layers = info.get(f"{kind}.target_layers")
    if not isinstance(layers, tuple) or not layers:
        raise bad(f"its header does not list the target layers it reads ({kind}.target_layers)")
    if any(i < 0 for i in layers):
        raise bad(f"it lists a negative target layer ({min(layers)})")
    n_embd = _positive(info, f"{kind}.embedding_length")
    if n_embd is None:
        raise bad(f"its header has no valid width ({kind}.embedding_length)")
    tensors = {t.name: t for t in info.tensors}
    own_embd, own_head = "token_embd.weight" in tensors, "output.weight" in tensors
    draft_vocab = _d2t_rows(info, tensors, bad, own_head=own_head)
    if kind == EAGLE3:
        if len(layers) != EAGLE3_LAYERS:
            raise bad(f"EAGLE-3 reads exactly {EAGLE3_LAYERS} target layers, its header lists {len(layers)}")
        hidden = _positive(info, f"{kind}.target_hidden_size")
        if hidden is None:
            raise bad(f"its header does not say the target's width ({kind}.target_hidden_size)")
        if info.get(f"{kind}.block_count") != 1:
            raise bad(f"EAGLE-3 has one decoder layer, its header says {info.get(f'{kind}.block_count')}")
        return SidecarFacts(
            kind, "EAGLE-3", layers, n_embd, hidden, 0, False, None, draft_vocab, own_embd, own_head
        )
    block = info.get(f"{kind}.block_size", DEFAULT_BLOCK_SIZE)
    if not isinstance(block, int) or isinstance(block, bool) or not MIN_BLOCK_SIZE <= block <= MAX_BLOCK_SIZE:
        raise bad(f"its block size is {block!r}; a block has {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE} positions")
    mask = info.get("tokenizer.ggml.mask_token_id")
    n_vocab = len(info.tokens)
    if not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < max(n_vocab, 1):
        raise bad(f"it has no valid mask token (tokenizer.ggml.mask_token_id is {mask!r})")
    dspark = "markov_w1.weight" in tensors
    selector = "selector_hidden.weight" in tensors
    variant = "DSpark" if dspark else "DFlash2" if selector else "DFlash"
    anchor = dspark and info.get(f"{kind}.sample_from_anchor", True) is not False
    # The drafter's rows are fused from the target's at its own width (fc: layers x n_embd).
    return SidecarFacts(
        kind, variant, layers, n_embd, n_embd, block, anchor, mask, draft_vocab, own_embd, own_head
    )


def target_problems(target: GGUFInfo, facts: SidecarFacts) -> list[str]:
    """Why a sidecar with these facts cannot draft for `target`, as short phrases."""
    arch = target.architecture
    name = target.path.name
    if arch in SIDECAR_ARCHS or mtp_only(target):
        return [f"{name} is itself a drafter, not a model to draft for"]
    if facts.kind == MTP:
        return _mtp_problems(target, facts)
    problems: list[str] = []
    width = _positive(target, f"{arch}.embedding_length")
    if width is not None and facts.target_hidden != width:
        problems.append(f"it was trained on a target {facts.target_hidden} wide, and {name} is {width} wide")
    elif width is not None and facts.n_embd != width and not (facts.own_embeddings and facts.own_head):
        problems.append(f"it is {facts.n_embd} wide and borrows the embeddings of a target {width} wide")
    blocks = _positive(target, f"{arch}.block_count")
    if blocks is not None:
        n_layer = blocks - target.mtp_layers  # (the trunk: MTP blocks follow it)
        top = max(facts.layers)
        if top > n_layer or (top == n_layer and arch not in OUTPUT_TAP_ARCHS):
            problems.append(f"it reads the target's layer {top}, and {name} has {n_layer} layers")
    if arch not in LAYER_TAP_ARCHS:
        problems.append(f"this llama.cpp cannot hand over the hidden rows of a {arch} model's layers")
    return problems


def _mtp_problems(target: GGUFInfo, facts: SidecarFacts) -> list[str]:
    """MTP heads in a file of their own: the target's architecture, width and trunk, and a
    target without heads of its own (it would draft with those)."""
    return [] if not target.mtp_layers else [f"{target.path.name} carries MTP heads of its own"]


def check_sidecar(target: GGUFInfo, sidecar: GGUFInfo) -> SidecarFacts:
    """Whether `sidecar` can draft for `target`, from both headers: its facts, or
    ModelFileError (a header unusable as a drafter) / IncompatiblePairError (another target's,
    or another tokenizer) with one line."""
    facts = read_facts(sidecar)
    problems = target_problems(target, facts)
    if facts.kind == MTP and not problems:
        problems = _same_model(target, sidecar)
    if problems:
        raise IncompatiblePairError(
            f"{sidecar.path.name} is {described(facts.label)} for another target: "
            f"{'; '.join(problems)}. "
            "Use the one trained for this model (it ships beside it, in the same repository)."
        )
    check_pair(target, sidecar)  # (its tokenizer is its target's)
    _check_d2t_values(sidecar, len(target.tokens))
    return facts


def _same_model(target: GGUFInfo, heads: GGUFInfo) -> list[str]:
    """MTP heads are a block of the model they were exported from: the same architecture, width
    and trunk."""
    problems: list[str] = []
    if heads.architecture != target.architecture:
        name, arch = target.path.name, target.architecture
        problems.append(f"they are {heads.architecture} heads, and {name} is a {arch} model")
        return problems
    arch = target.architecture
    for key, what in (("embedding_length", "wide"), ("block_count", "layers deep")):
        mine = _positive(heads, f"{arch}.{key}")
        theirs = _positive(target, f"{arch}.{key}")
        if key == "block_count" and mine is not None:
            mine -= heads.mtp_layers  # (the trunk they follow)
        if mine is not None and theirs is not None and mine != theirs:
            problems.append(f"they follow a trunk {mine} {what}, and {target.path.name} is {theirs} {what}")
    return problems


def refuse_as_target(info: GGUFInfo) -> None:
    """A sidecar given as the model to chat with: one line saying what to do instead."""
    kind = sidecar_kind(info)
    if kind is None:
        return
    what = {EAGLE3: "an EAGLE-3 drafter", DFLASH: "a DFlash drafter", MTP: "a model's MTP heads alone"}[kind]
    raise IncompatiblePairError(
        f"{info.path.name} is {what}, not a model to chat with: give it as the draft "
        "(--draft) beside the target it was made for"
    )


def described(label: str) -> str:
    """A drafter's label as a sentence names it: "an EAGLE-3 drafter", "a DFlash drafter",
    "MTP heads"."""
    if label.endswith("heads"):
        return label
    return ("an " if label[:1] in "AEIOU" else "a ") + label


def _positive(info: GGUFInfo, key: str) -> int | None:
    value = info.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _d2t_rows(info: GGUFInfo, tensors: dict[str, TensorInfo], bad: object, *, own_head: bool) -> int:
    """Rows of the reduced draft vocabulary (0 without d2t), checked as llama.cpp asserts."""
    d2t = tensors.get("d2t")
    if d2t is None:
        return 0
    assert callable(bad)
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


def _check_d2t_values(info: GGUFInfo, n_vocab: int) -> None:
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


def _read_ints(path: Path, offset: int, n: int) -> np.ndarray | None:
    with contextlib.suppress(OSError), path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read(8 * n)
        if len(data) == 8 * n:
            return np.frombuffer(data, dtype="<i8")
    return None
