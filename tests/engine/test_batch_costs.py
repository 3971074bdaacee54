"""The load-aware choice of K per sequence (engine/batch_costs.py), on fixed costs."""

from __future__ import annotations

from tandem.engine.batch_costs import BatchCosts, CostTable, Want


def costs(verify: tuple[float, float], draft: tuple[float, float]) -> BatchCosts:
    c = BatchCosts()
    for x in range(1, 80):
        c.verify.add(x, verify[0] + verify[1] * x)
        c.draft.add(x, draft[0] + draft[1] * x)
    return c


def test_the_table_interpolates_and_extends() -> None:
    table = CostTable(0.02, 0.001)
    assert table.at(3) == 0.02 + 0.002  # the prior, before anything is measured
    table.add(1, 0.008)
    table.add(4, 0.0136)
    table.add(8, 0.021)
    assert table.at(4) == 0.0136
    assert abs(table.at(6) - (0.0136 + 0.021) / 2) < 1e-12
    assert abs(table.at(12) - (0.021 + 4 * (0.021 - 0.0136) / 4)) < 1e-12
    table.add(4, 0.0236)  # a recent average: moves toward the new time
    assert 0.0136 < table.at(4) < 0.0236


def test_a_kernel_step_up_is_priced_where_it_is() -> None:
    # SmolLM2 F16's verify with 4 sequences: one more row is cheap up to 5, dear at 8.
    c = BatchCosts()
    for n, ms in ((1, 8.2), (2, 12.3), (3, 12.9), (4, 13.6), (5, 14.1), (6, 15.9), (8, 21.0), (12, 24.0)):
        c.verify.add(n, ms / 1000)
    wants = [Want(0.5, 4, False) for _ in range(4)]
    ks = c.choose(wants)
    assert sum(ks) >= 1  # the fifth row pays at α = 0.5 ...
    assert sum(ks) + 4 < 8  # ... the step up to 8 rows does not


def test_one_sequence_drafts_where_a_verify_row_is_cheap() -> None:
    c = costs((0.010, 0.0005), (0.002, 0.0002))
    ks = c.choose([Want(0.8, 8, True)])
    assert ks[0] >= 2
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
