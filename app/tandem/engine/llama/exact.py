"""Exact output on the CPU: every row of a verify batch bit-identical to a one-token decode.

llama.cpp's CPU backend picks its kernels by batch size, so the logits of a position computed
in the target's verify batch `[last, d1..dK]` can differ from the same position decoded alone
(by up to 0.5 in logit on Qwen2.5-Coder Q4_K_M), and at a near-tie the argmax flips: greedy
speculative output then differs from the target alone. Measured per op and per type on the
vendored ggml (docs/results/history.md, "Exact output"), a row depends on its batch through:

* the tiled K-quant/IQ matmul (ggml-cpu/tiled), taken for 8 rows or more;
* weights repacked for this CPU (the CPU_REPACK buffer: Q4_0, Q4_K, IQ4_NL... on x86): groups of
  4 rows go through a gemm, fewer than 4 through the gemv a one-token decode uses;
* flash attention for a single query over 512 cells or more (split over the KV length);
* F16/BF16/F32 weight matrices (llamafile's sgemm for 2 rows or more; a build option);
* attention without flash attention (its F16 K·Q product goes through that sgemm).

ggml's `use_ref` switch on a CPU backend (reference kernels: no tiling, no split KV, no
fusion) removes the first and the third, and costs nothing at one row; it is set only for the
decodes whose rows are read (prefill keeps the fast kernels: both runs prefill alike). Repacked
weights stay exact while a batch has at most 3 rows (ggml-cpu/repack.cpp: "more than three
rows: gemm"), so K is capped at 2 there. The last two cannot be reached from here: such a target
is not exact (`ExactPlan.why_not` says why).

On a GPU the backends choose kernels by batch size too, and have no reference switch. Tandem's
Vulkan build adds one (scripts/patches/vulkan-batch-invariant.patch): with it on, a matmul of
up to 16 rows stays on the mat-vec shaders a one-row decode uses (their choice of Q8_1 or float
activations made as for one row), and flash attention packs the query heads per token and
splits the KV cache into fixed 512-cell pieces. A row's sums then do not depend on how many
rows share its batch, nor on how many cells past it the KV view holds. It holds with every
layer on Vulkan, flash attention on, and no expert weights (their matmuls are not covered).
CUDA and Metal have no such switch: a target there is not exact.

This module decides from what a loaded target is made of (a pure plan); exact_kernels.py finds
that out from llama.cpp and flips the switch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import TandemError
from ..files.gguf_info import GGUFInfo

if TYPE_CHECKING:
    from ..config import GenerationConfig

# Rows a repacked weight still multiplies one at a time (its gemv): ggml-cpu/repack.cpp.
REPACK_GEMV_ROWS = 3
# Rows the batch-invariant Vulkan kernels cover (batch_invariant_max_cols in the patch).
VULKAN_INVARIANT_ROWS = 16

# Where ggml keeps weights it multiplies with its ordinary kernels (CPU_Mapped: a mmap'd file).
PLAIN_BUFFERS = frozenset({"CPU", "CPU_Mapped"})
REPACK_BUFFER = "CPU_REPACK"

# ggml types of float weights (ggml.h): F32 0, F16 1, BF16 30.
FLOAT_TYPES = {0: "F32", 1: "F16", 30: "BF16"}
# Float tensors that are not multiplied as matrices: norms, convolutions and state-space
# parameters, rotary factors, position tables (and the token embeddings, looked up by row,
# unless they double as the output head: see float_matrices).
_NOT_MATMUL = ("norm", "conv", "ssm_a", "ssm_d", "ssm_dt", "rope", "pos_embd", "position_embd")


@dataclass(frozen=True)
class ExactPlan:
    """Whether a target's output can be exact, and the largest verify batch that keeps it.

    rows: the most rows one verify batch may have (None: any); why_not: None when exact output
    is possible, else the reason, in words that follow "exact output is not possible here: "."""

    rows: int | None = None
    why_not: str | None = None

    @property
    def possible(self) -> bool:
        return self.why_not is None

    def k_max(self, k: int) -> int:
        """The most drafts per round under this plan, asked for at most k."""
        return k if self.rows is None else min(k, self.rows - 1)


def resolve(config: GenerationConfig, plan: ExactPlan, where: str = "here") -> GenerationConfig:
    """`config` as it runs under `plan`: `exact` resolved (None: wherever possible), K capped to
    the verify batch exactness allows. Exact output asked for (True) where it is not possible is
    refused with the reason (TandemError: "exact output is not possible {where}: ...")."""
    if config.exact is False:
        return config
    if not plan.possible:
        if config.exact:
            raise TandemError(f"exact output is not possible {where}: {plan.why_not}")
        return replace(config, exact=False)
    k = plan.k_max(config.k_max)
    return replace(config, exact=True, draft_max=k if k != config.k_max else config.draft_max)


_FLASH_ATTN_OFF = (
    "flash attention is off (TANDEM_FLASH_ATTN=off), and attention without it depends on the batch size"
)
_RECURRENT = "the target has a recurrent state, which Tandem has not measured for exactness"


def plan(
    *,
    backends: Sequence[str],
    cpu_backends: int,
    flash_attn_off: bool,
    recurrent: bool,
    float_matrices: Sequence[str],
    buffers: Iterable[str],
    invariant_gpus: Sequence[str] = (),
    every_layer_on_gpu: bool = True,
    experts: bool = False,
) -> ExactPlan:
    """What exactness needs on a target, from what is known of it: its context's backends (how
    many of them are CPU backends `use_ref` reaches, which GPU backends have the batch-invariant
    switch), whether flash attention was turned off, whether it is recurrent, its float weight
    matrices, the buffer types of its weights; on a GPU, whether every layer is there and
    whether it has expert weights."""
    gpus = [b for b in backends if b != "CPU"]
    if gpus:
        return _gpu_plan(gpus, invariant_gpus, every_layer_on_gpu, flash_attn_off, recurrent, experts)
    if cpu_backends == 0:
        return ExactPlan(why_not="this llama.cpp build does not let Tandem reach its CPU kernels")
    if flash_attn_off:
        return ExactPlan(why_not=_FLASH_ATTN_OFF)
    if recurrent:
        return ExactPlan(why_not=_RECURRENT)
    if float_matrices:
        shown = ", ".join(float_matrices[:2]) + (
            f" and {len(float_matrices) - 2} more" if len(float_matrices) > 2 else ""
        )
        return ExactPlan(
            why_not=f"the target has float weight matrices ({shown}), which llama.cpp multiplies "
            "with other kernels in a batch (llamafile's sgemm); a quantized file (Q4_K_M, Q8_0...) is exact"
        )
    found = set(buffers)
    unknown = sorted(found - PLAIN_BUFFERS - {REPACK_BUFFER})
    if unknown:
        return ExactPlan(
            why_not=f"the target's weights sit in {', '.join(unknown)} buffers, whose kernels Tandem "
            "has not measured for exactness"
        )
    return ExactPlan(rows=REPACK_GEMV_ROWS if REPACK_BUFFER in found else None)


def _gpu_plan(
    gpus: Sequence[str],
    invariant_gpus: Sequence[str],
    every_layer: bool,
    flash_attn_off: bool,
    recurrent: bool,
    experts: bool,
) -> ExactPlan:
    """Exactness on GPU backends: only where each has the batch-invariant switch (Vulkan built
    with Tandem's patch), and only for what the switch covers."""
    other = [g for g in gpus if g not in invariant_gpus]
    if other and all(g.startswith("Vulkan") for g in other):
        return ExactPlan(
            why_not="this llama.cpp build's Vulkan backend lacks Tandem's batch-invariant kernels "
            "(build it with scripts/install.py, which applies them)"
        )
    if other:
        return ExactPlan(
            why_not=f"the target runs with {', '.join(other)}, whose kernels depend on the batch size "
            "(exact output is for targets on the CPU or on Vulkan)"
        )
    if not every_layer:
        return ExactPlan(
            why_not="only some of the target's layers are on the GPU, and those on the CPU are "
            "computed with other kernels in a GPU build (exact output on Vulkan needs them all there)"
        )
    if flash_attn_off:
        return ExactPlan(why_not=_FLASH_ATTN_OFF)
    if recurrent:
        return ExactPlan(why_not=_RECURRENT)
    if experts:
        return ExactPlan(
            why_not="the target is a mixture of experts, whose expert matmuls on Vulkan depend on "
            "the batch size (Tandem's batch-invariant kernels do not cover them yet)"
        )
    return ExactPlan(rows=VULKAN_INVARIANT_ROWS)


def has_experts(info: GGUFInfo) -> bool:
    """Whether the model has mixture-of-experts weights (llama.cpp's `*_exps` tensors)."""
    return any("_exps" in t.name for t in info.tensors)


def float_matrices(info: GGUFInfo) -> list[str]:
    """The weight matrices stored as F16, BF16 or F32 that llama.cpp multiplies as matrices."""
    names = {t.name for t in info.tensors}
    tied = "output.weight" not in names  # the token embeddings double as the output head
    found = []
    for t in info.tensors:
        if t.ggml_type not in FLOAT_TYPES or sum(d > 1 for d in t.shape) < 2:
            continue
        if t.name == "token_embd.weight" and not tied:
            continue
        if any(word in t.name for word in _NOT_MATMUL):
            continue
        found.append(t.name)
    return found
