"""Small helpers the tests use to run a generation and collect what it yields."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tandem.engine import CostModel, GenerationConfig, LoadOptions, SamplerSettings
from tandem.session.collect import Outcome, collect

if TYPE_CHECKING:  # (their modules load llama.cpp's bindings: the fast lane collects without them)
    from tandem.engine import LoadedModel, ModelPair


def load_pair(target: object, draft: object, options: LoadOptions) -> ModelPair:
    """ModelPair.load, for the session's fixtures (imported here when first used)."""
    from tandem.engine import ModelPair

    return ModelPair.load(target, draft, options)  # type: ignore[arg-type]


# What a generation yielded, sorted by kind (tokens, rounds, prefill, done): the session layer's.
Run = Outcome

# Tiny models compute in microseconds: one thread avoids paying for thread synchronisation on
# every small matmul (ggml splits work by rows, so results do not depend on the thread count).
# (Here, not in conftest.py: `from conftest import` finds whichever conftest came first.)
TINY = LoadOptions(n_ctx=1024, n_threads=1)


def run(
    pair: ModelPair,
    prompt: Sequence[int],
    *,
    speculative: bool = True,
    max_tokens: int = 64,
    draft_max: int = 4,
    temperature: float = 0.0,
    top_k: int = 40,
    top_p: float = 1.0,
    min_p: float = 0.0,
    seed: int | None = None,
    stop: tuple[str, ...] = (),
    p_min: float = 0.0,
    cancel: threading.Event | None = None,
    cancel_after: int | None = None,
    adaptive: bool = False,
    drafter: str = "model",
    costs: CostModel | None = None,
    exact: bool | None = None,
) -> Run:
    """One generation. K is fixed unless adaptive=True, so tests control the paths taken.

    `costs`: what adaptive drafting starts from (default: what the pair learnt so far).
    `exact`: GenerationConfig.exact (None: wherever the target allows it)."""
    cfg = GenerationConfig(
        max_tokens=max_tokens,
        draft_max=draft_max,
        adaptive=adaptive,
        drafter=drafter,  # type: ignore[arg-type]
        p_min=p_min,
        sampler=SamplerSettings(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed),
        stop=stop,
        exact=exact,
    )

    def after_round(out: Outcome) -> None:
        if cancel is not None and cancel_after is not None and len(out.tokens) >= cancel_after:
            cancel.set()

    return collect(
        pair.generate(prompt, cfg, speculative=speculative, cancel=cancel, costs=costs), after_round
    )


# On a GPU backend a verify batch and a one-token step run different kernels (cuBLAS or mmq
# against mat-vec, TF32 for F32 weights on CUDA), so the same position's logits differ by up to
# ~3e-3 between them (measured: H200, the tiny models). A stale or missing state moves them by
# whole units (0.84 for a stale snapshot).
GPU_LOGIT_TOLERANCE = 1e-2


def logit_tolerance(model: LoadedModel, cpu: float) -> float:
    """How far one model's logits may drift between a batch and single steps: `cpu` on the CPU
    (one set of kernels), GPU_LOGIT_TOLERANCE where its layers run on a GPU."""
    return max(cpu, GPU_LOGIT_TOLERANCE) if model.devices else cpu


def assert_same_greedy(
    pair: ModelPair, prompt: Sequence[int], got: Sequence[int], want: Sequence[int]
) -> None:
    """Greedy speculative output `got` is the target alone's `want`: equal on the CPU. On a GPU,
    where batch and step round apart, the answers may part only where the target's own two best
    tokens are tied within GPU_LOGIT_TOLERANCE (checked on a fresh context), not anywhere else."""
    got, want = list(got), list(want)
    if got == want:
        return
    target = pair.target
    assert target.devices, f"greedy output differs from the target alone: {got} != {want}"
    i = next((j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    assert i is not None, f"one answer is a prefix of the other: {got} != {want}"
    from tandem.engine import LoadedModel

    fresh = LoadedModel(target.path, replace(target.options, max_outputs=1), role="fresh")
    try:
        logits = fresh.decode([*prompt, *want[:i]], "last")
        assert logits is not None
        row = logits[0]
        mine, theirs = float(row[got[i]]), float(row[want[i]])
        second = sorted(row.tolist(), reverse=True)[1]
    finally:
        fresh.close()
    # Both are the target's two best tokens, and they are (nearly) tied.
    near = abs(mine - theirs) <= GPU_LOGIT_TOLERANCE and min(mine, theirs) >= second - GPU_LOGIT_TOLERANCE
    assert near, (
        f"greedy output differs from the target alone at token {i} ({got[i]} != {want[i]}), "
        f"where the target's logits for them are {abs(mine - theirs):.2e} apart: not a near-tie"
    )
