"""The load-aware choice of K per sequence (engine/batch_costs.py), on fixed costs."""

from __future__ import annotations

from tandem.engine.batch_costs import BatchCosts, LinearFit, Want


def costs(verify: tuple[float, float], draft: tuple[float, float]) -> BatchCosts:
    c = BatchCosts()
    for x in range(1, 40):
        c.verify.add(x, verify[0] + verify[1] * x)
        c.draft.add(x, draft[0] + draft[1] * x)
    return c


def test_the_fit_finds_the_line() -> None:
    fit = LinearFit(0.02, 0.001)  # a prior of the right scale, outweighed by the points
    for x in range(1, 30):
        fit.add(x, 0.01 + 0.002 * x)
    a, b = fit.line()
    assert abs(a - 0.01) < 2e-3 and abs(b - 0.002) < 2e-4


def test_one_sequence_drafts_where_a_verify_row_is_cheap() -> None:
    c = costs((0.010, 0.0005), (0.002, 0.0002))
    ks = c.choose([Want(0.8, 8, True)])
    assert ks[0] >= 3
    assert c.rate([Want(0.8, 8, True)], ks) > c.rate([Want(0.8, 8, True)], [0])


def test_a_wide_batch_stops_drafting() -> None:
    # Every row costs nearly a step (a compute-bound CPU): drafting never pays.
    c = costs((0.001, 0.004), (0.002, 0.0004))
    wants = [Want(0.7, 8, True) for _ in range(8)]
    assert c.choose(wants) == [0] * 8


def test_a_free_lookup_drafts_more_than_a_model_and_a_fixed_k_is_kept() -> None:
    c = costs((0.010, 0.0015), (0.004, 0.0004))
    ks = c.choose([Want(0.6, 8, False), Want(0.6, 8, True, lag=40), Want(0.1, 8, True, fixed=3)])
    assert ks[0] > ks[1]
    assert ks[2] == 3
