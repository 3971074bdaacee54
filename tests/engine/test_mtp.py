"""The target's own draft heads (multi-token prediction): what is particular to them. What every
kind promises (the target's output, greedy and sampled, across turns, cancels...) the drafter
contract holds them to (test_drafter_contract.py).

A tiny random-weight Qwen3.5 (model_files.tiny_mtp_model: hybrid gated-delta-net/attention
trunk, one MTP block after it, F32, SmolLM2's tokenizer) is the target; llama.cpp runs its MTP
block in a second context (app/tandem/engine/drafters/heads/mtp.py). Its heads agree with the
target about a third of the time, so drafts are both accepted and rejected. The reference for
every answer is the same GGUF loaded without its heads, run as the target alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import model_files
from run_helpers import assert_same_greedy, run
from tandem.engine import ChatMessage, LoadOptions, ModelPair, TandemError
from tandem.engine.drafters.heads.mtp import MtpHead, head_of
from tandem.engine.drafters.policy import CostModel

# In the GPU lane too (gpu_lane.py): the heads' hidden rows come off the device.
pytestmark = pytest.mark.gpu(heavy=True)  # (on lavapipe: test_gpu_path's compact ones)

OPTIONS = LoadOptions(n_ctx=1024, n_threads=1)
PROMPTS = [
    "Explain in detail why the sky is blue.",
    "Write a story about the ocean and a lighthouse keeper.",
    "Describe five red fruits and what they taste like.",
]


@pytest.fixture(scope="module")
def mtp_path() -> Path:
    return model_files.tiny_mtp_model("qwen35-mtp-s16", seed=7)


@pytest.fixture(scope="module")
def pair(mtp_path: Path) -> Iterator[ModelPair]:
    with ModelPair.load(mtp_path, None, OPTIONS) as p:
        yield p


@pytest.fixture(scope="module")
def alone(mtp_path: Path) -> Iterator[ModelPair]:
    """The same target without its heads: the reference answers."""
    with ModelPair.load(mtp_path, None, LoadOptions(n_ctx=1024, n_threads=1, load_mtp=False)) as p:
        yield p


def _chat(pair: ModelPair, text: str) -> list[int]:
    return pair.chat_prompt([ChatMessage("user", text)])


def _head(pair: ModelPair) -> MtpHead:
    assert head_of(pair.target) is not None
    return head_of(pair.target)


def test_the_heads_are_loaded_only_when_the_file_has_them(pair: ModelPair, alone: ModelPair) -> None:
    assert _head(pair).layers == 1 and pair.target.mtp_layers_in_file == 1
    assert head_of(alone.target) is None
    with ModelPair.load(model_files.tiny_stateful_model("llama-d", "llama", seed=31), None, OPTIONS) as plain:
        assert head_of(plain.target) is None and plain.target.mtp_layers_in_file == 0


def test_adaptive_k_drafts_with_the_heads_and_learns_their_cost(pair: ModelPair, alone: ModelPair) -> None:
    costs = CostModel()
    for text in PROMPTS:
        prompt = _chat(pair, text)
        ref = run(alone, prompt, speculative=False, max_tokens=128)
        out = run(pair, prompt, drafter="auto", adaptive=True, draft_max=8, max_tokens=128, costs=costs)
        assert_same_greedy(pair, prompt, out.ids, ref.ids)
        assert out.start is not None and out.start.drafter == "auto"
    heads = costs.of("mtp")
    assert heads.first.known and heads.step.known  # one head step per draft token, measured
    assert costs.draft_time("mtp", 3) is not None
    assert 0.0 < heads.alpha < 1.0


def test_auto_uses_the_heads_and_a_draft_model_side_by_side(mtp_path: Path, alone: ModelPair) -> None:
    draft = model_files.tiny_stateful_model("llama-d", "llama", seed=31)
    costs = CostModel()
    with ModelPair.load(mtp_path, draft, OPTIONS) as both:
        kinds: Counter[str] = Counter()
        for text in PROMPTS:
            prompt = _chat(both, text)
            out = run(both, prompt, drafter="auto", adaptive=True, max_tokens=96, costs=costs)
            ref = run(alone, prompt, speculative=False, max_tokens=96)
            assert_same_greedy(both, prompt, out.ids, ref.ids)
            kinds.update(r.drafter for r in out.rounds if r.drafted)
    assert kinds["mtp"] > 0 and kinds["model"] > 0  # each measured, then the faster preferred
    assert costs.of("mtp").first.known and costs.of("model").first.known


def test_asking_for_heads_a_target_does_not_have_is_refused(alone: ModelPair) -> None:
    with pytest.raises(TandemError, match="draft heads were not loaded"):
        run(alone, alone.raw_prompt("Hi"), drafter="mtp")
    plain = model_files.tiny_stateful_model("llama-d", "llama", seed=31)
    no_heads = pytest.raises(TandemError, match="no built-in draft heads")
    with ModelPair.load(plain, None, OPTIONS) as other, no_heads:
        run(other, other.raw_prompt("Hi"), drafter="mtp")
