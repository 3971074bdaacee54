"""Speculative sampling must reproduce the target's distribution exactly.

Setup: the tiny target and a draft that agrees with it only part of the time, temperature 1
and top-k 4, K=2, three tokens per run. The exact joint distribution of the three tokens is
computed from the target alone (4 x 4 x 4 sequences), and the sequences produced by many seeded
speculative runs are compared with it by a chi-square test. Every path is exercised: drafts
accepted, rejected (residual sampling), bonus tokens, and plain target steps.

Runs are seeded, so the test is deterministic. The same test with verification deliberately
broken (residual replaced by p, or every draft accepted) must fail, which shows it has the
power to catch a wrong implementation.
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

import tandem.engine.decoding.round as round_module  # where verification lives
from run_helpers import run
from sampling_law import chi_square_p, exact_joint
from tandem.engine import ModelPair, SamplerSettings

# In the GPU lane too (gpu_lane.py): the sampling law with the target on a GPU.
pytestmark = pytest.mark.gpu(heavy=True)  # (on lavapipe: test_gpu_path's compact ones)

SETTINGS = SamplerSettings(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0)
N_TOKENS = 3
PROMPT_TEXT = "Once upon a time"
N_SAMPLES = 6000
P_THRESHOLD = 1e-3  # runs are seeded, so each p-value below is the same on every run


def sample_counts(
    pair: ModelPair, prompt: list[int], n: int, speculative: bool, p_min: float = 0.0
) -> Counter[tuple[int, ...]]:
    counts: Counter[tuple[int, ...]] = Counter()
    for seed in range(n):
        r = run(
            pair,
            prompt,
            speculative=speculative,
            max_tokens=N_TOKENS,
            draft_max=2,
            temperature=SETTINGS.temperature,
            top_k=SETTINGS.top_k,
            seed=seed,
            p_min=p_min,
        )
        assert len(r.ids) == N_TOKENS
        counts[tuple(r.ids)] += 1
    return counts


@pytest.fixture(scope="module")
def setup(sampling_pair: ModelPair) -> tuple[list[int], dict[tuple[int, ...], float]]:
    prompt = sampling_pair.raw_prompt(PROMPT_TEXT)
    joint = exact_joint(sampling_pair, prompt, SETTINGS, N_TOKENS)
    assert abs(sum(joint.values()) - 1.0) < 1e-9
    return prompt, joint


def test_draft_really_disagrees(
    sampling_pair: ModelPair, setup: tuple[list[int], dict[tuple[int, ...], float]]
) -> None:
    prompt, _ = setup
    accepted = drafted = 0
    origins: Counter[str] = Counter()
    for seed in range(200):
        r = run(sampling_pair, prompt, max_tokens=N_TOKENS, draft_max=2, temperature=1.0, top_k=4, seed=seed)
        accepted += r.stats.accepted
        drafted += r.stats.drafted
        origins.update(t.origin.value for t in r.tokens)
    assert 0.2 < accepted / drafted < 0.8, accepted / drafted
    assert origins["draft"] and origins["target"] and origins["bonus"]


def test_speculative_sampling_matches_target_distribution(
    sampling_pair: ModelPair, setup: tuple[list[int], dict[tuple[int, ...], float]]
) -> None:
    prompt, joint = setup
    counts = sample_counts(sampling_pair, prompt, N_SAMPLES, speculative=True)
    assert set(counts) <= set(joint), "sampled a sequence the target gives zero probability"
    p = chi_square_p(joint, counts)
    print(f"\nchi-square p-value, speculative vs exact target distribution: {p:.3f}")
    assert p > P_THRESHOLD


def test_target_only_sampling_matches_target_distribution(
    sampling_pair: ModelPair, setup: tuple[list[int], dict[tuple[int, ...], float]]
) -> None:
    prompt, joint = setup
    assert chi_square_p(joint, sample_counts(sampling_pair, prompt, 3000, speculative=False)) > P_THRESHOLD


def test_p_min_stops_drafts_and_keeps_the_distribution(
    sampling_pair: ModelPair, setup: tuple[list[int], dict[tuple[int, ...], float]]
) -> None:
    """A draft that stops before an unsure token (its sampling distribution's top probability
    below p-min) changes how much is drafted, never what the target's distribution is."""
    prompt, joint = setup
    planned = drafted = 0
    for seed in range(100):
        r = run(
            sampling_pair,
            prompt,
            max_tokens=N_TOKENS,
            draft_max=2,
            temperature=1.0,
            top_k=4,
            seed=seed,
            p_min=0.5,
        )
        planned += sum(x.k for x in r.rounds)
        drafted += sum(x.drafted for x in r.rounds)
    assert 0 < drafted < planned, (drafted, planned)  # some drafts stopped early, not all
    counts = sample_counts(sampling_pair, prompt, 3000, speculative=True, p_min=0.5)
    assert set(counts) <= set(joint)
    p = chi_square_p(joint, counts)
    print(f"\nchi-square p-value with p-min 0.5: {p:.3f}")
    assert p > P_THRESHOLD


@pytest.mark.parametrize("breakage", ["residual is p", "always accept"])
def test_broken_verification_is_detected(
    sampling_pair: ModelPair,
    setup: tuple[list[int], dict[tuple[int, ...], float]],
    monkeypatch: pytest.MonkeyPatch,
    breakage: str,
) -> None:
    prompt, joint = setup
    if breakage == "residual is p":
        monkeypatch.setattr(round_module, "residual", lambda p, q: p)
    else:
        monkeypatch.setattr(round_module, "accept_draft", lambda p, q, token, rng: True)
    # The very test the correct implementation passes (same samples, same threshold) fails.
    counts = sample_counts(sampling_pair, prompt, N_SAMPLES, speculative=True)
    p = chi_square_p(joint, counts)
    print(f"\nchi-square p-value with {breakage!r}: {p:.2e}")
    assert p < P_THRESHOLD


def test_every_sequence_has_positive_probability(
    setup: tuple[list[int], dict[tuple[int, ...], float]],
) -> None:
    _, joint = setup
    assert len(joint) == 4**N_TOKENS
    assert all(np.isfinite(v) and v > 0 for v in joint.values())
    assert len({seq[:1] for seq in itertools.islice(joint, 64)}) == 4
