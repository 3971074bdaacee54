"""A DFlash drafter (a trained block-diffusion sidecar GGUF): what is particular to it. What every
kind promises, each variant, the drafter contract holds it to (test_drafter_contract.py).

Tiny random-weight DFlash GGUFs (model_files.tiny_dflash_model: architecture "dflash", F32,
SmolLM2's tokenizer, blocks of 4 positions) in three variants, DFlash, DSpark (a Markov head,
anchor-first) and DFlash2 (a selector), are made for a tiny 32-wide llama and the tiny hybrid
Qwen3.5; llama.cpp injects the target's rows at two of its layers into their cache and guesses
a whole block [last, <mask>...] in one pass (app/tandem/engine/drafters/heads/dflash.py). The first
guess of a block agrees with the target about two times in three, the later ones rarely: drafts
are both accepted and rejected. The reference for every answer is the target alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import trained
from run_helpers import TINY, run
from tandem.engine import ChatMessage, ModelPair
from tandem.engine.drafters.heads.dflash import DFlashHead, head_of
from tandem.engine.drafters.policy import CostModel

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
def test_a_block_is_one_pass_and_k_its_open_positions(variant: ModelPair, alone: ModelPair, k: int) -> None:
    head = _head(variant)
    # K is at most the block's open positions: 3 of 4 (DSpark guesses from all 4).
    assert head.facts.max_draft == (4 if head.facts.variant == "DSpark" else 3)
    for text in PROMPTS:
        prompt = _chat(variant, text)
        out = run(variant, prompt, drafter="dflash", draft_max=k, max_tokens=96)
        assert out.ids == run(alone, prompt, speculative=False, max_tokens=96).ids
        assert max(r.drafted for r in out.rounds) == min(k, head.facts.max_draft)
        assert all(r.draft_passes == 0 for r in out.rounds)  # one pass a block, whatever K


def test_the_variants_are_told_apart(variant: ModelPair) -> None:
    head = _head(variant)
    assert head.label == f"{head.facts.variant} drafter" and head.facts.layers == (1, 2)
    assert (head.top_k > 0) == (head.facts.variant == "DFlash2")
    assert head.facts.anchor_first == (head.facts.variant == "DSpark")


def test_adaptive_k_prices_a_block_per_pass(pair: ModelPair, alone: ModelPair) -> None:
    costs = CostModel()
    blocks = 0
    for text in PROMPTS:
        prompt = _chat(pair, text)
        ref = run(alone, prompt, speculative=False, max_tokens=128)
        for drafter in ("dflash", "auto"):
            out = run(pair, prompt, drafter=drafter, adaptive=True, draft_max=8, max_tokens=128, costs=costs)
            assert out.ids == ref.ids
            # (`auto` may follow prompt lookup for a whole answer, as the measured costs say)
            drafted = [r.drafted for r in out.rounds if r.drafter == "dflash"]
            assert max(drafted, default=0) <= 3  # K: at most the block's open positions
            blocks += len(drafted)
    assert blocks > 0
    own = costs.of("dflash")
    assert own.blocks and not own.first.known  # priced per block, by its length
    assert costs.draft_time("dflash", 1) is not None and costs.draft_time("dflash", 3) is not None
    assert 0.0 < own.alpha < 1.0


def test_a_long_prompt_is_injected_as_it_is_read(pair: ModelPair, alone: ModelPair) -> None:
    """Rows wait for the next draft, but not without bound: a long prefill goes in as it goes."""
    prompt = _chat(pair, " ".join(PROMPTS * 12))
    assert len(prompt) > 300
    out = run(pair, prompt, drafter="dflash", draft_max=3, max_tokens=32)
    assert out.ids == run(alone, prompt, speculative=False, max_tokens=32).ids
    head = _head(pair)
    assert head.injected == len(head.seen) or len(head.seen) - head.injected <= 64


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
