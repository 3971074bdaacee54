"""The sampler against a plain, obviously-correct reference implementation."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tandem.engine.sampling import Dist, SamplerSettings, accept_draft, distribution, residual

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)


def reference(logits: np.ndarray, s: SamplerSettings) -> dict[int, float]:
    """llama.cpp's chain, written the slow way: top-k, top-p, min-p, then temperature."""
    order = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    if s.top_k > 0:
        order = order[: s.top_k]
    z = np.array([logits[i] for i in order], dtype=np.float64)
    p = np.exp(z - z.max())
    p /= p.sum()
    keep = len(order)
    if s.top_p < 1.0:
        cum = 0.0
        for n, v in enumerate(p, 1):
            cum += v
            if cum >= s.top_p:
                keep = n
                break
    order, z, p = order[:keep], z[:keep], p[:keep]
    if s.min_p > 0.0:
        mask = p >= s.min_p * p.max()
        order, z = [o for o, m in zip(order, mask, strict=True) if m], z[mask]
    q = np.exp((z - z.max()) / s.temperature)
    q /= q.sum()
    return dict(zip(order, q.tolist(), strict=True))


def as_dict(d: Dist) -> dict[int, float]:
    ids = range(len(d.probs)) if d.ids is None else d.ids.tolist()
    return {int(i): float(p) for i, p in zip(ids, d.probs, strict=True) if p > 0}


@pytest.mark.parametrize(
    "settings",
    [
        SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
        SamplerSettings(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05),
        SamplerSettings(temperature=1.3, top_k=0, top_p=0.9, min_p=0.0),
        SamplerSettings(temperature=0.5, top_k=5, top_p=1.0, min_p=0.0),
        SamplerSettings(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2),
        SamplerSettings(temperature=2.0, top_k=100, top_p=0.5, min_p=0.01),
    ],
)
@pytest.mark.parametrize("vocab", [50, 3000])
def test_distribution_matches_reference(settings: SamplerSettings, vocab: int) -> None:
    rng = np.random.default_rng(vocab)
    for _ in range(5):
        logits = (rng.normal(0, 3, vocab)).astype(np.float32)
        got, want = as_dict(distribution(logits, settings)), reference(logits, settings)
        assert got.keys() == want.keys()
        for k in want:
            assert got[k] == pytest.approx(want[k], rel=1e-6, abs=1e-12)


def test_flat_distribution_top_p_falls_back_to_full_sort() -> None:
    logits = np.zeros(5000, dtype=np.float32)
    logits[:3] = 0.01
    d = distribution(logits, SamplerSettings(temperature=1.0, top_k=0, top_p=0.5, min_p=0.0))
    assert len(d.probs) == 2500 or len(d.probs) == 2501


def test_residual_is_normalised_positive_part() -> None:
    p = Dist(np.array([1, 2, 3]), np.array([0.5, 0.3, 0.2]), 10)
    q = Dist(np.array([2, 3, 4]), np.array([0.6, 0.1, 0.3]), 10)
    r = residual(p, q)
    assert as_dict(r) == pytest.approx({1: 0.5 / 0.6, 3: 0.1 / 0.6})


def test_residual_of_equal_distributions_is_p() -> None:
    p = Dist(None, np.array([0.25, 0.75]), 2)
    assert residual(p, p) is p


def test_acceptance_probability_is_min_one_p_over_q() -> None:
    p = Dist(None, np.array([0.2, 0.8]), 2)
    q = Dist(None, np.array([0.6, 0.4]), 2)
    rng = random.Random(0)
    n = 20000
    acc0 = sum(accept_draft(p, q, 0, rng) for _ in range(n)) / n
    acc1 = sum(accept_draft(p, q, 1, rng) for _ in range(n)) / n
    assert acc0 == pytest.approx(0.2 / 0.6, abs=0.015)
    assert acc1 == 1.0


def test_token_outside_target_support_is_rejected() -> None:
    p = Dist(np.array([5]), np.array([1.0]), 10)
    q = Dist(np.array([7]), np.array([1.0]), 10)
    assert not accept_draft(p, q, 7, random.Random(0))


def test_sample_follows_probabilities() -> None:
    d = Dist(np.array([10, 20, 30]), np.array([0.1, 0.6, 0.3]), 40)
    rng = random.Random(1)
    counts = {10: 0, 20: 0, 30: 0}
    for _ in range(30000):
        counts[d.sample(rng)] += 1
    assert counts[10] / 30000 == pytest.approx(0.1, abs=0.01)
    assert counts[20] / 30000 == pytest.approx(0.6, abs=0.01)
