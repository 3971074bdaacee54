"""After rounds with rejections, cancellation or a new turn, the KV caches hold exactly the
tokens the engine believes they hold.

Checked against the strongest reference there is: a fresh llama.cpp context fed the same
tokens. Tolerance: logits within LOGIT_TOLERANCE (0.1) of the fresh context and the same
argmax. The fresh context decodes the tokens in one batch and the cache built them up round by
round; llama.cpp's batched and one-token kernels round differently by up to ~0.03 logits on
these models (see test_greedy_lossless.py). A stale or missing KV entry moves logits by whole
units.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from run_helpers import run
from tandem.engine import ChatMessage, LoadedModel, LoadOptions, ModelPair

LOGIT_TOLERANCE = 0.1


def _next_logits_match_fresh(model: LoadedModel, path: Path, tokens: list[int]) -> float:
    """Feed the last token to `model`'s cache and to a fresh context; compare logits."""
    assert model.cached == tokens[:-1]
    assert model.kv_pos_max() == len(model.cached) - 1
    out = model.decode(tokens[-1:], "last")
    assert out is not None
    cached_logits = np.array(out[0])
    fresh = LoadedModel(path, LoadOptions(n_ctx=model.n_ctx, max_outputs=1), role="fresh")
    try:
        ref = fresh.decode(tokens, "last")
        assert ref is not None
        diff = float(np.abs(cached_logits - ref[0]).max())
        assert int(np.argmax(cached_logits)) == int(np.argmax(ref[0]))
    finally:
        fresh.close()
    model.truncate(len(tokens) - 1)
    return diff


def test_caches_match_fresh_context_after_rejections(
    rejecting_pair: ModelPair, smollm2_f16: Path, tiny_target: Path
) -> None:
    prompt = rejecting_pair.chat_prompt([ChatMessage("user", "Write a short poem about rain.")])
    r = run(rejecting_pair, prompt, max_tokens=40, draft_max=4)
    assert r.stats.stop_reason == "max_tokens"
    assert r.stats.drafted - r.stats.accepted >= 10, "expected many rejected draft tokens"
    history = [*prompt, *r.ids]
    # Target: holds everything but the last token, ready for the next round.
    assert _next_logits_match_fresh(rejecting_pair.target, smollm2_f16, history) < LOGIT_TOLERANCE
    # Draft: holds a prefix of the history; bring it up to date the way the engine does.
    draft = rejecting_pair.draft
    assert draft is not None
    assert history[: len(draft.cached)] == draft.cached
    draft.decode(history[len(draft.cached) : -1], "none")
    assert _next_logits_match_fresh(draft, tiny_target, history) < LOGIT_TOLERANCE


def test_cancelled_run_leaves_caches_usable(smollm2_pair: ModelPair) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Explain in detail how a bicycle works.")])
    reference = run(smollm2_pair, prompt, max_tokens=60, draft_max=5)
    cancel = threading.Event()
    cut = run(smollm2_pair, prompt, max_tokens=60, draft_max=5, cancel=cancel, cancel_after=12)
    assert cut.stats.stop_reason == "cancelled"
    assert 12 <= len(cut.ids) < 60
    assert cut.ids == reference.ids[: len(cut.ids)]  # what was written so far is kept, unchanged
    assert cut.done is not None and cut.done.text == cut.text
    for m in (smollm2_pair.target, smollm2_pair.draft):
        assert m is not None and m.kv_pos_max() == len(m.cached) - 1
    again = run(smollm2_pair, prompt, max_tokens=60, draft_max=5)
    assert again.ids == reference.ids


def test_cancel_before_start_returns_at_once(smollm2_pair: ModelPair) -> None:
    cancel = threading.Event()
    cancel.set()
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Hello")])
    r = run(smollm2_pair, prompt, cancel=cancel)
    assert r.ids == [] and r.stats.stop_reason == "cancelled"


def test_second_turn_reuses_the_cache(smollm2_pair: ModelPair) -> None:
    turn1 = [ChatMessage("user", "Name a colour.")]
    p1 = smollm2_pair.chat_prompt(turn1)
    a1 = run(smollm2_pair, p1, max_tokens=24)
    turn2 = [*turn1, ChatMessage("assistant", a1.text), ChatMessage("user", "And another one?")]
    p2 = smollm2_pair.chat_prompt(turn2)
    a2 = run(smollm2_pair, p2, max_tokens=24)
    assert a2.prefill is not None
    # Only the new turn (plus whatever the template re-renders differently) is prefilled.
    assert a2.prefill.prefill_tokens < len(p2) - len(p1) + 8
    assert a2.prefill.prompt_tokens == len(p2)
    fresh_target = run(smollm2_pair, p2, max_tokens=24, speculative=False)
    assert a2.ids == fresh_target.ids


@pytest.mark.parametrize("draft_max", [1, 3, 8])
def test_invariants_hold_every_round(smollm2_pair: ModelPair, draft_max: int) -> None:
    """Cache bookkeeping after each round: target = history minus the last token."""
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", "Count from one to twenty in words.")])
    from tandem.engine import GenerationConfig, RoundEvent, TokenEvent

    history = list(prompt)
    target, draft = smollm2_pair.target, smollm2_pair.draft
    assert draft is not None
    for ev in smollm2_pair.generate(prompt, GenerationConfig(max_tokens=50, draft_max=draft_max)):
        if isinstance(ev, TokenEvent):
            history.append(ev.id)
        elif isinstance(ev, RoundEvent) and ev.emitted == ev.accepted + 1:
            assert target.cached == history[:-1]
            assert target.kv_pos_max() == len(history) - 2
            assert history[: len(draft.cached)] == draft.cached
            assert draft.kv_pos_max() == len(draft.cached) - 1
            assert ev.drafted <= draft_max and ev.accepted <= ev.drafted
