"""Small helpers the tests use to run a generation and collect what it yields."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from tandem.engine import GenerationConfig, LoadOptions, ModelPair, SamplerSettings
from tandem.engine.draft_policy import CostModel
from tandem.session.collect import Outcome, collect

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
) -> Run:
    """One generation. K is fixed unless adaptive=True, so tests control the paths taken.

    `costs`: what adaptive drafting starts from (default: what the pair learnt so far)."""
    cfg = GenerationConfig(
        max_tokens=max_tokens,
        draft_max=draft_max,
        adaptive=adaptive,
        drafter=drafter,  # type: ignore[arg-type]
        p_min=p_min,
        sampler=SamplerSettings(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed),
        stop=stop,
    )

    def after_round(out: Outcome) -> None:
        if cancel is not None and cancel_after is not None and len(out.tokens) >= cancel_after:
            cancel.set()

    return collect(
        pair.generate(prompt, cfg, speculative=speculative, cancel=cancel, costs=costs), after_round
    )
