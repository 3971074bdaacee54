"""A DFlash drafter (a trained block-diffusion sidecar GGUF) drafting: still exactly the target.

Tiny random-weight DFlash GGUFs (model_files.tiny_dflash_model: architecture "dflash", F32,
SmolLM2's tokenizer, blocks of 4 positions) in three variants, DFlash, DSpark (a Markov head,
anchor-first) and DFlash2 (a selector), are made for a tiny 32-wide llama and the tiny hybrid
Qwen3.5; llama.cpp injects the target's rows at two of its layers into their cache and guesses
a whole block [last, <mask>...] in one pass (app/tandem/engine/drafters/heads/dflash.py). The first
guess of a block agrees with the target about two times in three, the later ones rarely: drafts
are both accepted and rejected. The reference for every answer is the target alone.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import trained
from run_helpers import TINY, run
from sampling_law import chi_square_p, exact_joint
from tandem.engine import ChatMessage, ModelPair, SamplerSettings
from tandem.engine.draft_policy import CostModel
from tandem.engine.drafters.heads.dflash import DFlashHead, head_of

PROMPTS = [
    "Explain in detail why the sky is blue.",
    "Write a story about the ocean and a lighthouse keeper.",
    "Describe five red fruits and what they taste like.",
]
VARIANTS: dict[str, Callable[[], Path]] = {
    "DFlash": trained.dflash,
    "DSpark": trained.dspark,
    "DFlash2": trained.dflash2,
}


@pytest.fixture(scope="module")
def alone() -> Iterator[ModelPair]:
    with ModelPair.load(trained.target(), None, TINY) as p:
        yield p


@pytest.fixture(scope="module")
def pair() -> Iterator[ModelPair]:
    with ModelPair.load(trained.target(), trained.dflash(), TINY) as p:
        yield p


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request: pytest.FixtureRequest) -> Iterator[ModelPair]:
    with ModelPair.load(trained.target(), VARIANTS[request.param](), TINY) as p:
        yield p


def _chat(pair: ModelPair, text: str) -> list[int]:
    return pair.chat_prompt([ChatMessage("user", text)])


def _head(pair: ModelPair) -> DFlashHead:
    head = head_of(pair.target)
    assert head is not None
    return head


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_drafting_is_exactly_the_target(variant: ModelPair, alone: ModelPair, k: int) -> None:
    head = _head(variant)
    # K is at most the block's open positions: 3 of 4 (DSpark guesses from all 4).
    assert head.facts.max_draft == (4 if head.facts.variant == "DSpark" else 3)
    accepted = rejected = 0
    for text in PROMPTS:
        prompt = _chat(variant, text)
        ref = run(alone, prompt, speculative=False, max_tokens=96)
        out = run(variant, prompt, drafter="dflash", draft_max=k, max_tokens=96)
        assert out.ids == ref.ids and out.text == ref.text
        assert {r.drafter for r in out.rounds if r.drafted} == {"dflash"}
        assert max(r.drafted for r in out.rounds) == min(k, head.facts.max_draft)
        # One pass a block, whatever K: no draft steps counted.
        assert all(r.draft_passes == 0 for r in out.rounds)
        accepted += sum(r.accepted for r in out.rounds)
        rejected += sum(r.accepted < r.drafted for r in out.rounds)
        assert sum(t.origin.value == "draft" for t in out.tokens) == sum(r.accepted for r in out.rounds)
    assert accepted > 40 and rejected > 20


def test_the_variants_are_told_apart(variant: ModelPair) -> None:
    head = _head(variant)
    assert head.label == f"{head.facts.variant} drafter" and head.facts.layers == (1, 2)
    assert (head.top_k > 0) == (head.facts.variant == "DFlash2")
    assert head.facts.anchor_first == (head.facts.variant == "DSpark")


SETTINGS = SamplerSettings(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
SAMPLED = {"temperature": 1.0, "top_k": 4}


def test_sampling_keeps_the_target_distribution(variant: ModelPair) -> None:
    """q per position (DFlash2: one-hot, its guesses are a path): exact."""
    prompt = variant.raw_prompt("Once upon a time")
    joint = exact_joint(variant, prompt, SETTINGS, 3)
    counts: Counter[tuple[int, ...]] = Counter()
    accepted = rejected = 0
    for seed in range(2000):
        r = run(variant, prompt, drafter="dflash", max_tokens=3, draft_max=2, **SAMPLED, seed=seed)
        counts[tuple(r.ids)] += 1
        accepted += sum(x.accepted for x in r.rounds)
        rejected += sum(x.accepted < x.drafted for x in r.rounds)
    p = chi_square_p(joint, counts)
    print(f"\nchi-square p-value: {p:.3f}; accepted drafts: {accepted}, rounds with a rejection: {rejected}")
    assert accepted > 200 and rejected > 300
    assert p > 1e-3


def test_adaptive_k_prices_a_block_per_pass(pair: ModelPair, alone: ModelPair) -> None:
    costs = CostModel()
    for text in PROMPTS:
        prompt = _chat(pair, text)
        ref = run(alone, prompt, speculative=False, max_tokens=128)
        for drafter in ("dflash", "auto"):
            out = run(pair, prompt, drafter=drafter, adaptive=True, draft_max=8, max_tokens=128, costs=costs)
            assert out.ids == ref.ids
            assert max(r.drafted for r in out.rounds if r.drafter == "dflash") <= 3
    own = costs.of("dflash")
    assert own.blocks and not own.first.known  # priced per block, by its length
    assert costs.draft_time("dflash", 1) is not None and costs.draft_time("dflash", 3) is not None
    assert 0.0 < own.alpha < 1.0


def test_a_chat_goes_on_turn_after_turn(pair: ModelPair, alone: ModelPair) -> None:
    messages: list[ChatMessage] = []
    before: list[int] = []
    for text in ["Tell me about boats.", "And about trains?", "Which one is faster?"]:
        messages.append(ChatMessage("user", text))
        prompt = pair.chat_prompt(messages)
        ref = run(alone, prompt, speculative=False, max_tokens=48)
        out = run(pair, prompt, drafter="dflash", draft_max=3, max_tokens=48)
        assert out.ids == ref.ids
        assert out.prefill is not None
        if before:
            assert out.prefill.prefill_tokens <= len(prompt) - len(before) + 1
        before = prompt
        assert sum(r.accepted for r in out.rounds) > 0
        assert run(pair, prompt, drafter="dflash", draft_max=3, max_tokens=48).ids == ref.ids  # regenerate
        messages.append(ChatMessage("assistant", out.text))
    _assert_head_matches_fresh(pair, prompt + out.ids)


def test_the_target_alone_in_between_costs_it_only_a_re_read(pair: ModelPair, alone: ModelPair) -> None:
    prompt = _chat(pair, PROMPTS[0])
    ref = run(alone, prompt, speculative=False, max_tokens=40)
    run(pair, prompt, drafter="dflash", max_tokens=40)
    assert run(pair, prompt, speculative=False, max_tokens=40).ids == ref.ids
    assert not _head(pair).following
    longer = prompt + ref.ids[:20]
    out = run(pair, longer, drafter="dflash", max_tokens=30)
    assert out.ids == run(alone, longer, speculative=False, max_tokens=30).ids
    assert sum(r.accepted for r in out.rounds) > 0


def test_a_long_prompt_is_injected_as_it_is_read(pair: ModelPair, alone: ModelPair) -> None:
    """Rows wait for the next draft, but not without bound: a long prefill goes in as it goes."""
    prompt = _chat(pair, " ".join(PROMPTS * 12))
    assert len(prompt) > 300
    out = run(pair, prompt, drafter="dflash", draft_max=3, max_tokens=32)
    assert out.ids == run(alone, prompt, speculative=False, max_tokens=32).ids
    head = _head(pair)
    assert head.injected == len(head.seen) or len(head.seen) - head.injected <= 64
    _assert_head_matches_fresh(pair, prompt + out.ids)


def test_cancelling_mid_answer_leaves_both_states_usable(pair: ModelPair, alone: ModelPair) -> None:
    prompt = _chat(pair, PROMPTS[1])
    ref = run(alone, prompt, speculative=False, max_tokens=80)
    cancel = threading.Event()
    cut = run(pair, prompt, drafter="dflash", draft_max=3, max_tokens=80, cancel=cancel, cancel_after=20)
    assert cut.stats.stop_reason == "cancelled" and 20 <= len(cut.ids) < 80
    assert cut.ids == ref.ids[: len(cut.ids)]
    assert run(pair, prompt, drafter="dflash", draft_max=3, max_tokens=80).ids == ref.ids
    _assert_head_matches_fresh(pair, prompt + ref.ids)


def test_cancel_while_it_drafts(pair: ModelPair, alone: ModelPair) -> None:
    prompt = _chat(pair, PROMPTS[2])
    cancel = threading.Event()
    head = _head(pair)
    real = head.block

    def slow_block(history: list[int], k: int) -> tuple[list[np.ndarray], int, float]:
        cancel.set()  # the user presses Esc while it drafts
        return real(history, k)

    head.block = slow_block  # type: ignore[method-assign,assignment]
    try:
        out = run(pair, prompt, drafter="dflash", draft_max=3, max_tokens=60, cancel=cancel)
    finally:
        del head.block
    assert out.stats.stop_reason == "cancelled"
    ref = run(alone, prompt, speculative=False, max_tokens=30)
    assert run(pair, prompt, drafter="dflash", max_tokens=30).ids == ref.ids


def test_a_hybrid_target_drafts_with_it() -> None:
    """Qwen3.5: blocks of 3 (within llama.cpp's snapshots) and a target checkpointed when a
    rejection needs it, turn after turn; auto measures it beside the target's own heads."""
    with (
        ModelPair.load(trained.hybrid_target(), None, TINY) as alone,
        ModelPair.load(trained.hybrid_target(), trained.dspark(), TINY) as pair,
    ):
        costs = CostModel()
        kinds: Counter[str] = Counter()
        messages: list[ChatMessage] = []
        for text in PROMPTS:
            messages.append(ChatMessage("user", text))
            prompt = pair.chat_prompt(messages)
            ref = run(alone, prompt, speculative=False, max_tokens=64)
            out = run(pair, prompt, drafter="dflash", draft_max=4, max_tokens=64)
            assert out.ids == ref.ids
            assert sum(r.accepted for r in out.rounds) > 3 and any(r.accepted < r.drafted for r in out.rounds)
            auto = run(pair, prompt, drafter="auto", adaptive=True, max_tokens=64, costs=costs)
            assert auto.ids == ref.ids
            kinds.update(r.drafter for r in auto.rounds if r.drafted)
            messages.append(ChatMessage("assistant", out.text))
        assert costs.of("dflash").blocks and costs.of("mtp").first.known
        assert kinds["dflash"] > 0


def _assert_head_matches_fresh(pair: ModelPair, history: list[int]) -> None:
    """Its cache after a session is a fresh one's: the same block logits for `history`."""
    head = _head(pair)
    target = pair.target
    n = len(history) - 1
    target.truncate(min(n, len(target.cached)))
    head.set_following(True)
    target.decode(history[len(target.cached) : n], "none")
    mine = [np.array(r) for r in head.block(history, 3)[0]]
    head.end_draft()
    with ModelPair.load(target.path, Path(head.path), TINY) as fresh:
        other = head_of(fresh.target)
        assert other is not None
        other.set_following(True)
        fresh.target.decode(history[:-1], "none")
        theirs = [np.array(r) for r in other.block(history, 3)[0]]
        other.end_draft()
    for a, b in zip(mine, theirs, strict=True):
        assert np.allclose(a, b, atol=2e-3)
