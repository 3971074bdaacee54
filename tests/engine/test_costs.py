"""The bench's cost arithmetic: verify and catch-up costs between and beyond measured sizes,
and a round's predicted cost in target steps."""

from __future__ import annotations

import pytest

from tandem.engine.decoding.costs import MeasuredCosts, mean_costs

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)

COSTS = MeasuredCosts(
    target_step_s=0.020,
    draft_step_s=0.010,
    lookup_s=0.0001,
    verify_s={2: 0.024, 5: 0.036},
    draft_batch_s={2: 0.012, 5: 0.018},
)


def test_verify_and_catchup_interpolate_and_extrapolate() -> None:
    assert COSTS.v(1) == 1.0
    assert COSTS.v(2) == pytest.approx(1.2)
    assert COSTS.v(3.5) == pytest.approx(1.5)
    assert COSTS.v(8) == pytest.approx(2.4)  # beyond 5: the last segment's slope
    assert COSTS.catchup(1) == pytest.approx(0.5)  # c
    assert COSTS.catchup(5) == pytest.approx(0.9)
    assert COSTS.catchup(20) == pytest.approx(0.9 + 15 * 0.1)  # a long catch-up after lookup


def test_round_cost_counts_catchup_and_free_lookup_tail() -> None:
    assert COSTS.round_cost("", 0) == 1.0
    assert COSTS.round_cost("lookup", 4) == pytest.approx(0.005 + COSTS.v(5))
    # The model drafts 4 after catching up on 1 token: 4 draft steps.
    assert COSTS.round_cost("model", 4) == pytest.approx(4 * 0.5 + COSTS.v(5))
    # After lookup rounds it first catches up on 5 tokens in one batch.
    assert COSTS.round_cost("model", 4, caught_up=5) == pytest.approx(0.9 + 3 * 0.5 + COSTS.v(5))
    # A hybrid round: 2 model tokens, then 3 from lookup that cost no draft steps.
    assert COSTS.round_cost("model", 5, looked_up=3) == pytest.approx(2 * 0.5 + COSTS.v(6))


def test_mean_of_measurements_taken_over_a_run() -> None:
    early = MeasuredCosts(0.020, 0.010, 0.0001, {2: 0.024}, {2: 0.012})
    late = MeasuredCosts(0.024, 0.014, 0.0003, {2: 0.030}, {2: 0.016})
    mean = mean_costs([early, late])
    assert mean.target_step_s == pytest.approx(0.022)
    assert mean.c == pytest.approx(0.012 / 0.022)
    assert mean.v(2) == pytest.approx(0.027 / 0.022)
    assert mean.catchup(2) == pytest.approx(0.014 / 0.022)
    assert mean.lookup_s == pytest.approx(0.0002)
    assert mean_costs([early]) == early
    with pytest.raises(ValueError):
        mean_costs([])
