"""The target's own draft heads (multi-token prediction) as a drafter: still exactly the target.

A tiny random-weight Qwen3.5 (model_files.tiny_mtp_model: hybrid gated-delta-net/attention
trunk, one MTP block after it, F32, SmolLM2's tokenizer) is the target; llama.cpp runs its MTP
block in a second context (app/tandem/engine/drafters/heads/mtp.py). Its heads agree with the
target about a third of the time, so drafts are both accepted and rejected. The reference for
every answer is the same GGUF loaded without its heads, run as the target alone.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import model_files
from run_helpers import assert_same_greedy, logit_tolerance, run
from sampling_law import chi_square_p, exact_joint
from tandem.engine import ChatMessage, LoadOptions, ModelPair, SamplerSettings, TandemError
from tandem.engine.draft_policy import CostModel
from tandem.engine.drafters.heads.mtp import MtpHead, head_of

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


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_drafting_with_the_heads_is_exactly_the_target(
    pair: ModelPair, alone: ModelPair, k: int
) -> None:
    accepted = rejected = 0
    for text in PROMPTS:
        prompt = _chat(pair, text)
        ref = run(alone, prompt, speculative=False, max_tokens=96)
        spent = pair.target.decode_seconds + _head(pair).decode_seconds
        out = run(pair, prompt, drafter="mtp", draft_max=k, max_tokens=96)
        assert_same_greedy(pair, prompt, out.ids, ref.ids)
        assert out.text == ref.text or out.ids != ref.ids
        # Time inside llama.cpp counts the heads' decodes too (not Python overhead); prefill
        # aside, every decode of both falls within the rounds.
        inside = pair.target.decode_seconds + _head(pair).decode_seconds - spent
        assert out.stats.llama_s <= inside and out.stats.llama_s > 0.5 * inside
        assert out.start is not None and out.start.drafter == "mtp"
        assert {r.drafter for r in out.rounds if r.drafted} == {"mtp"}
        accepted += sum(r.accepted for r in out.rounds)
        rejected += sum(r.accepted < r.drafted for r in out.rounds)
        # Origins: accepted drafts are "draft", the rest the target's own.
        assert sum(t.origin.value == "draft" for t in out.tokens) == sum(r.accepted for r in out.rounds)
    assert accepted > 30 and rejected > 10  # both paths taken


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


def test_a_chat_goes_on_turn_after_turn(pair: ModelPair, alone: ModelPair) -> None:
    """Each turn reuses the cache and the heads keep up. (A hybrid target goes back to the
    checkpoint taken after the last prompt: the previous answer is re-read, as its text is
    tokenized afresh in the transcript anyway.)"""
    messages: list[ChatMessage] = []
    before: list[int] = []
    for text in ["Tell me about boats.", "And about trains?", "Which one is faster?"]:
        messages.append(ChatMessage("user", text))
        prompt = pair.chat_prompt(messages)
        ref = run(alone, prompt, speculative=False, max_tokens=48)
        out = run(pair, prompt, drafter="mtp", draft_max=4, max_tokens=48)
        assert_same_greedy(pair, prompt, out.ids, ref.ids)
        assert out.prefill is not None
        if before:
            assert out.prefill.prefill_tokens <= len(prompt) - len(before) + 1
        before = prompt
        assert sum(r.accepted for r in out.rounds) > 0
        messages.append(ChatMessage("assistant", out.text))
    _assert_heads_match_fresh(pair, prompt + out.ids)


def test_the_target_alone_in_between_costs_the_heads_nothing_but_a_re_read(
    pair: ModelPair, alone: ModelPair
) -> None:
    """A plain run does not feed the heads; the next drafted answer re-reads what they missed."""
    prompt = _chat(pair, PROMPTS[0])
    ref = run(alone, prompt, speculative=False, max_tokens=40)
    run(pair, prompt, drafter="mtp", max_tokens=40)
    assert run(pair, prompt, speculative=False, max_tokens=40).ids == ref.ids
    assert not _head(pair).following
    longer = prompt + ref.ids[:20]
    out = run(pair, longer, drafter="mtp", max_tokens=30)
    assert_same_greedy(pair, longer, out.ids, run(alone, longer, speculative=False, max_tokens=30).ids)
    assert sum(r.accepted for r in out.rounds) > 0


def test_cancelling_mid_answer_leaves_both_states_usable(pair: ModelPair, alone: ModelPair) -> None:
    prompt = _chat(pair, PROMPTS[1])
    ref = run(alone, prompt, speculative=False, max_tokens=80)
    cancel = threading.Event()
    cut = run(pair, prompt, drafter="mtp", draft_max=5, max_tokens=80, cancel=cancel, cancel_after=20)
    assert cut.stats.stop_reason == "cancelled" and 20 <= len(cut.ids) < 80
    assert cut.ids == ref.ids[: len(cut.ids)]
    # Regenerate: same answer; then a continuation of the cancelled one.
    assert run(pair, prompt, drafter="mtp", draft_max=5, max_tokens=80).ids == ref.ids
    _assert_heads_match_fresh(pair, prompt + ref.ids)


def test_cancel_while_the_heads_draft(pair: ModelPair, alone: ModelPair) -> None:
    """A cancel set during a draft ends the answer before its verify batch."""
    prompt = _chat(pair, PROMPTS[2])
    cancel = threading.Event()
    head = _head(pair)
    real = head.next_step

    def slow_step(token: int, pos: int) -> np.ndarray:
        cancel.set()  # the user presses Esc while the heads draft
        return real(token, pos)

    head.next_step = slow_step  # type: ignore[method-assign]
    try:
        out = run(pair, prompt, drafter="mtp", draft_max=6, max_tokens=60, cancel=cancel)
    finally:
        del head.next_step
    assert out.stats.stop_reason == "cancelled"
    ref = run(alone, prompt, speculative=False, max_tokens=30)
    assert_same_greedy(pair, prompt, run(pair, prompt, drafter="mtp", max_tokens=30).ids, ref.ids)


SETTINGS = SamplerSettings(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)


def test_sampling_with_the_heads_keeps_the_target_distribution(pair: ModelPair) -> None:
    prompt = pair.raw_prompt("Once upon a time")
    joint = exact_joint(pair, prompt, SETTINGS, 3)
    counts: Counter[tuple[int, ...]] = Counter()
    rejected = 0
    for seed in range(2000):
        r = run(pair, prompt, drafter="mtp", max_tokens=3, draft_max=2, temperature=1.0, top_k=4, seed=seed)
        counts[tuple(r.ids)] += 1
        rejected += sum(x.accepted < x.drafted for x in r.rounds)
    p = chi_square_p(joint, counts)
    print(f"\nchi-square p-value: {p:.3f}; rounds with a rejection: {rejected}")
    assert rejected > 200
    assert p > 1e-3


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


def _assert_heads_match_fresh(pair: ModelPair, history: list[int]) -> None:
    """The heads' state after a session is a fresh one's: same draft logits for `history`."""
    head = _head(pair)
    target = pair.target
    n = len(history) - 1
    target.truncate(min(n, len(target.cached)))
    head.set_following(True)
    target.decode(history[len(target.cached) : n], "none")
    mine = np.array(head.first_step(history)[0])
    head.end_draft()
    with ModelPair.load(target.path, None, OPTIONS) as fresh:
        other = head_of(fresh.target)
        assert other is not None
        other.set_following(True)
        fresh.target.decode(history[:-1], "none")
        theirs = np.array(other.first_step(history)[0])
    assert np.allclose(mine, theirs, atol=logit_tolerance(target, 2e-3))  # (a GPU rounds batches apart)
