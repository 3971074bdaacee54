"""Greedy speculative decoding must produce exactly the target's tokens.

The only admissible difference is numerical: the target verifies K+1 tokens in one batch, and
llama.cpp's batched kernels round differently from its one-token path (measured on this pair:
at most 0.033 logits apart, mean 0.0065). So if the two runs ever differ, the first differing
position must be a near-tie in the target-only run: its top two logits within
NEAR_TIE_LOGITS (0.1, three times the largest difference measured), and the speculative
token must be the runner-up. Anything else is a bug.
"""

from __future__ import annotations

import numpy as np
import pytest

from run_helpers import run
from tandem.engine import ChatMessage, ModelPair
from tandem.engine.drafters.policy import CostModel

NEAR_TIE_LOGITS = 0.1

PROMPTS = [
    "Explain in detail why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number, and explain how it works.",
    "Describe the history of Australia's capital city in detail.",
    "Give me ten detailed tips for sleeping better.",
    "Write a long letter to a friend about a trip to Paris.",
    "Summarize the plot of Romeo and Juliet scene by scene.",
    "Describe five red fruits and what they taste like.",
    "Explain long multiplication in detail, working through 17 times 23 and two more examples.",
    "Write a story about the ocean and a lighthouse keeper.",
    "Explain several ways to reverse a list in JavaScript, with examples.",
    "Describe a cat in detail to someone who has never seen one.",
    "Explain the three states of matter with examples of each.",
    "Write SQL queries to create a users table, insert three rows, and count them. Explain each.",
    "Explain in detail why leaves change colour in autumn.",
    "Explain photosynthesis step by step for a biology student.",
    "Tell me a long story about a computer that learns to tell jokes.",
    "Explain what HTTP is and how a web request works, step by step.",
    "Write a poem of several verses about a dog named Rex.",
    "Explain leap years, their history, and how to compute them in code.",
    "Explain prime numbers to a ten-year-old, with many examples.",
]


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _assert_near_tie(
    pair: ModelPair, prompt: list[int], baseline: list[int], spec: list[int], i: int
) -> float:
    """Target-only logits at the diverging position: the top two must be a near-tie.

    Recomputed the way the target-only run computed them (the prompt prefilled but its last
    token, then one token per step): a single batch over the whole text rounds differently too,
    and at a near-tie its argmax can be the other token (seen on the AMD CPU)."""
    target = pair.target
    target.reset()
    target.decode(prompt[:-1], "none")
    logits = None
    for tok in [prompt[-1], *baseline[:i]]:
        logits = target.decode([tok], "last")
    assert logits is not None
    row = np.array(logits[0])
    top2 = np.argsort(row)[-2:][::-1]
    gap = float(row[top2[0]] - row[top2[1]])
    assert baseline[i] == top2[0], "the target-only run did not take its own argmax"
    assert spec[i] == top2[1], f"speculative token {spec[i]} is not the target's runner-up {top2[1]}"
    assert gap < NEAR_TIE_LOGITS, f"divergence at token {i} with a top-2 gap of {gap:.4f} logits"
    return gap


# Fixed K for the odd prompts: one batch size each, from a single draft token to the largest.
FIXED_KS = (1, 3, 5, 8, 12)


# What each prompt's run found, for the check over all of them (test_most_prompts_match_exactly).
_FOUND: dict[int, tuple[bool, str, int]] = {}  # prompt -> (token-identical, mode, accepted)


@pytest.mark.slow
@pytest.mark.parametrize("n", range(len(PROMPTS)))
def test_speculative_greedy_matches_target_only(smollm2_pair: ModelPair, n: int) -> None:
    prompt = smollm2_pair.chat_prompt([ChatMessage("user", PROMPTS[n])])
    base = run(smollm2_pair, prompt, speculative=False, max_tokens=128)
    if n % 2 == 0:
        # The default configuration: adaptive drafting, K up to 12, so K varies round to
        # round. Each starts from no measured costs: on a host where batches are dear, what
        # the pair learnt earlier can rightly switch drafting off, and this test is about
        # output, not about that choice.
        mode = "adaptive"
        spec = run(
            smollm2_pair,
            prompt,
            speculative=True,
            max_tokens=128,
            draft_max=12,
            adaptive=True,
            costs=CostModel(),
        )
    else:
        mode = "fixed"
        k = FIXED_KS[(n // 2) % len(FIXED_KS)]
        spec = run(smollm2_pair, prompt, speculative=True, max_tokens=128, draft_max=k)
    assert base.stats.generated == 128, "a prompt must ask for an answer of 128+ tokens"
    i = _first_difference(base.ids, spec.ids)
    if i is None:
        assert base.text == spec.text
    else:
        gap = _assert_near_tie(smollm2_pair, prompt, base.ids, spec.ids, i)
        print(f"\nprompt {n}: a near-tie at token {i} ({gap:.4f} logits)")
    _FOUND[n] = (i is None, mode, spec.stats.accepted)


@pytest.mark.slow
def test_most_prompts_match_exactly() -> None:
    """Over all the prompts above: the draft really drafted, and its tokens were kept, in both
    kinds of run; and ties close enough to diverge are rare, so most prompts match exactly
    (measured here: 17 of 20, the three others within 0.0014 logits): many divergences, each a
    near-tie, would point at a systematic numerical difference."""
    if len(_FOUND) < len(PROMPTS):
        pytest.skip("checks the runs of test_speculative_greedy_matches_target_only: run the whole module")
    identical = sum(same for same, _, _ in _FOUND.values())
    accepted = {mode: sum(a for _, m, a in _FOUND.values() if m == mode) for mode in ("adaptive", "fixed")}
    print(f"\n{identical}/{len(PROMPTS)} prompts token-identical; accepted: {accepted}")
    assert accepted["adaptive"] > 0 and accepted["fixed"] > 0
    assert identical >= len(PROMPTS) * 3 // 4


def test_corrections_are_target_tokens(rejecting_pair: ModelPair) -> None:
    """With a draft that is nearly always wrong, output still equals the target's own."""
    for text in PROMPTS[:4]:
        prompt = rejecting_pair.chat_prompt([ChatMessage("user", text)])
        base = run(rejecting_pair, prompt, speculative=False, max_tokens=48)
        spec = run(rejecting_pair, prompt, speculative=True, max_tokens=48, draft_max=4)
        assert spec.stats.drafted > 0
        assert spec.stats.acceptance_rate < 0.5  # it really is a bad draft
        assert any(t.origin.value == "target" for t in spec.tokens)
        i = _first_difference(base.ids, spec.ids)
        if i is not None:
            _assert_near_tie(rejecting_pair, prompt, base.ids, spec.ids, i)


def test_p_min_stops_greedy_drafts_without_changing_the_output(smollm2_pair: ModelPair) -> None:
    """p-min stops a draft before a token the draft is unsure of: fewer drafted tokens, and
    still the target's own output."""
    planned = drafted = 0
    for text in PROMPTS[:3]:
        prompt = smollm2_pair.chat_prompt([ChatMessage("user", text)])
        base = run(smollm2_pair, prompt, speculative=False, max_tokens=48)
        spec = run(smollm2_pair, prompt, speculative=True, max_tokens=48, draft_max=8, p_min=0.5)
        planned += sum(r.k for r in spec.rounds)
        drafted += sum(r.drafted for r in spec.rounds)
        i = _first_difference(base.ids, spec.ids)
        if i is not None:
            _assert_near_tie(smollm2_pair, prompt, base.ids, spec.ids, i)
    assert 0 < drafted < planned, (drafted, planned)
