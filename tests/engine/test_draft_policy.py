"""Adaptive drafting's arithmetic: expected tokens, the cost model, and the choice of K."""

from __future__ import annotations

import pytest

from tandem.engine.drafters.policy import AdaptivePolicy, CostModel, FixedPolicy, expected_tokens, model_pays

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)


def costs(draft_ms: float, verify_ms: dict[int, float]) -> CostModel:
    c = CostModel()
    for _ in range(5):
        c.observe_model_draft(1, draft_ms / 1000, 3 * draft_ms / 1000, 3, "model")
        for n, ms in verify_ms.items():
            c.observe_verify(n, ms / 1000)
    return c


def test_expected_tokens() -> None:
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)


def test_verify_cost_is_a_line_through_measured_batches_and_a_plain_step_its_own() -> None:
    # Shaped like the AMD CPU's (docs/results/history.md): a batch of 2 costs 1.7 plain steps, each
    # further token 0.17. A line through all three sizes would put a plain step at 1.5 x 10 ms.
    c = costs(10, {1: 10, 2: 17, 5: 22.1})
    assert c.verify_time(1) == pytest.approx(10 / 1000)
    assert c.verify_time(3) == pytest.approx(18.7 / 1000)
    assert c.verify_time(9) == pytest.approx(28.9 / 1000)
    assert c.draft_time("model", 4) == pytest.approx(40 / 1000)


def test_only_batches_measured_extends_the_line_and_only_plain_steps_a_prior_slope() -> None:
    batches = costs(10, {2: 17, 5: 22.1})
    assert not batches.plain_step_known
    assert batches.verify_time(1) == pytest.approx(15.3 / 1000)
    plain = costs(10, {1: 10})
    assert plain.plain_step_known
    assert plain.verify_time(5) == pytest.approx(10 * (1 + 4 * 0.12) / 1000)


def test_a_plain_step_is_measured_before_drafting_is_judged_against_it() -> None:
    # Drafting measured, a plain step not: the extrapolated plain step is too slow (15.3 ms
    # here, 10 ms in truth), which would make drafting look better than it is. One plain round
    # measures it; then the policy plans as usual.
    c = costs(10, {2: 17, 5: 22.1})
    policy = AdaptivePolicy(12, c, "model")
    assert policy.plan(100) == (0, 0.0)
    c.observe_verify(1, 0.010)
    assert policy.plan(100)[1] > 0.0


def test_one_noisy_sample_does_not_lock_a_size_out() -> None:
    c = costs(10, {5: 30, 6: 33})
    c.observe_verify(7, 0.5)  # one wild sample, e.g. another process stole the CPU
    assert c.verify_time(7) < c.verify_time(8)  # still a line, nothing special about 7


def test_gpu_like_costs_draft_far_ahead() -> None:
    """Verifying 9 tokens costs about one step and drafting is cheap: long drafts pay."""
    policy = AdaptivePolicy(12, costs(2, {1: 20, 13: 22}), "model")
    for _ in range(20):
        policy.observe(8, 8)
    assert policy.plan(100)[0] >= 10


def test_expensive_draft_and_poor_acceptance_stop_drafting() -> None:
    policy = AdaptivePolicy(12, costs(15, {1: 20, 5: 32}), "model")
    for _ in range(30):
        policy.observe(4, 0)
    assert policy.plan(100)[0] == 0


def test_drafting_resumes_after_a_pause() -> None:
    policy = AdaptivePolicy(12, costs(10, {1: 20, 5: 30}), "model")
    for _ in range(6):
        policy.observe(4, 0)
    assert policy.plan(100)[0] == 0
    ks = []
    for _ in range(200):  # rounds without drafting carry no evidence: uncertainty grows
        k = policy.plan(100)[0]
        ks.append(k)
        policy.observe(k, k)
        if k:
            break
    assert ks[-1] > 0


def test_budget_clips_k() -> None:
    assert FixedPolicy(8).plan(3)[0] == 3
    policy = AdaptivePolicy(12, costs(2, {1: 20, 13: 22}), "model")
    assert policy.plan(2)[0] <= 2


def test_lookup_costs_one_search_whatever_k() -> None:
    c = CostModel()
    c.observe_search("lookup", 0.0001)
    assert c.draft_time("lookup", 1) == c.draft_time("lookup", 12) == pytest.approx(0.0001)
    assert c.draft_time("lookup", 0) == 0.0


def test_unmeasured_costs_start_at_the_starting_k() -> None:
    policy = AdaptivePolicy(12, CostModel(), "model", k_start=4)
    assert policy.plan(100) == (4, 0.0)
    assert policy.plan(2) == (2, 0.0)


def test_catchup_debt_makes_drafting_less_attractive() -> None:
    policy = AdaptivePolicy(12, costs(10, {1: 20, 5: 30}), "model")
    for _ in range(10):
        policy.observe(4, 2)
    _, rate_free = policy.plan(100)
    _, rate_debt = policy.plan(100, debt_per_token=0.02)
    assert rate_debt < rate_free


def test_what_the_draft_model_owes_is_spread_over_the_rest_of_the_answer() -> None:
    # After a pause the next draft first catches up on it (here 100 ms owed). Worth it with
    # 100 tokens to go; with 6 left, the target alone finishes sooner.
    policy = AdaptivePolicy(12, costs(10, {1: 20, 5: 30}), "model")
    for _ in range(20):
        policy.observe(8, 8)
    assert policy.plan(100)[0] > 0 and policy.plan(5)[0] > 0
    assert policy.plan(100, owed_s=0.1)[0] > 0
    assert policy.plan(5, owed_s=0.1)[0] == 0


def test_rounds_without_drafting_weaken_the_next_generation_s_prior() -> None:
    c = costs(15, {1: 20, 5: 32})
    first = AdaptivePolicy(12, c, "model")
    for _ in range(10):
        first.observe(4, 0)
    alpha, trials = c.of("model").alpha, c.of("model").trials
    before = AdaptivePolicy(12, c, "model").optimistic_alpha()
    for _ in range(100):  # e.g. short answers, none of which tried drafting again
        first.observe(0, 0)
    # No evidence: the long-run estimate keeps its value and its weight ...
    assert (c.of("model").alpha, c.of("model").trials) == pytest.approx((alpha, trials))
    # ... but the next generation holds it less firmly, and retries drafting.
    assert AdaptivePolicy(12, c, "model").optimistic_alpha() > before + 0.2
    first.observe(4, 4)  # drafting again: the prior is back to full strength (8 tokens)
    a = c.of("model").alpha
    assert AdaptivePolicy(12, c, "model").optimistic_alpha() == pytest.approx(a + (a * (1 - a) / 8) ** 0.5)


def test_model_pays_unless_lookup_supplies_most_of_the_text() -> None:
    # plain step 25 ms, the model 20 ms per token, catch-up 6 ms per looked-up token
    assert model_pays(0.0, 0.025, 0.020, 0.006)
    assert model_pays(0.3, 0.025, 0.020, 0.006)  # 0.7 * 5 > 0.3 * 6
    assert not model_pays(0.6, 0.025, 0.020, 0.006)  # 0.4 * 5 < 0.6 * 6
    assert not model_pays(0.0, 0.025, 0.030, 0.006)  # the model is slower than plain steps


def test_rollback_costs_shorten_drafts_on_a_recurrent_target() -> None:
    """A target whose state is restored and replayed after a rejection (and checkpointed
    before every drafted batch): the policy weighs it and drafts less, or not at all."""
    plans = []
    for restore_s in (None, 0.012, 0.03):
        c = costs(2, {1: 10, 2: 11, 5: 14, 9: 18})
        for _ in range(5):
            if restore_s is not None:
                c.observe_rollback(0.0005, restore_s, rejected=True)
        policy = AdaptivePolicy(12, c, "model")
        for _ in range(30):
            policy.observe(4, 3)  # about 3 of 4 draft tokens accepted
        plans.append(policy.plan(100))
    assert c.rollback_time(0.6, 0) == 0.0
    assert c.rollback_time(0.6, 4) == pytest.approx(0.0005 + (1 - 0.6**4) * 0.03)
    (k_plain, rate_plain), (k_dear, rate_dear), (k_dearer, _) = plans
    assert k_plain == 3 and k_dear == 2 and rate_dear < rate_plain
    assert k_dearer == 0  # a plain step beats anything drafting can repay
