"""A seed makes sampling repeatable, with the default (adaptive) drafting too."""

from __future__ import annotations

from run_helpers import run
from tandem.engine import ChatMessage, ModelPair


def test_seeded_sampling_repeats_exactly(smollm2_pair: ModelPair) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Write a short poem about autumn.")])
    kwargs = {"max_tokens": 48, "temperature": 0.9, "top_k": 40, "top_p": 0.95, "adaptive": True}
    a = run(smollm2_pair, prompt, seed=11, draft_max=12, **kwargs)  # type: ignore[arg-type]
    b = run(smollm2_pair, prompt, seed=11, draft_max=12, **kwargs)  # type: ignore[arg-type]
    c = run(smollm2_pair, prompt, seed=12, draft_max=12, **kwargs)  # type: ignore[arg-type]
    assert a.ids == b.ids
    assert a.ids != c.ids
    # Target-only runs with the same seed repeat too.
    d = run(smollm2_pair, prompt, seed=11, speculative=False, **kwargs)  # type: ignore[arg-type]
    e = run(smollm2_pair, prompt, seed=11, speculative=False, **kwargs)  # type: ignore[arg-type]
    assert d.ids == e.ids
