"""The load-aware choice of K per sequence (engine/decoding/batch_costs.py), on fixed costs."""

from __future__ import annotations

from tandem.engine.decoding.batch_costs import FAIR_SLACK, BatchCosts, Bid, CostTable, Want, pick


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


def smollm2_verify() -> BatchCosts:
    # SmolLM2 F16's verify with 4 sequences cached, measured on a 2-core CPU: one more row is
    # cheap up to 5, dear at 8.
    c = BatchCosts()
    for n, ms in ((1, 8.2), (2, 12.3), (3, 12.9), (4, 13.6), (5, 14.1), (6, 15.9), (8, 21.0), (12, 24.0)):
        c.verify.add(n, ms / 1000)
    return c


def test_a_kernel_step_up_is_priced_where_it_is() -> None:
    # At α = 0.5 a fifth row would raise the round's rate, but it slows the three sequences
    # beside it by 4% for nothing of theirs; one draft each, 8 rows, does not pay its step up.
    wants = [Want(0.5, 4, False) for _ in range(4)]
    assert smollm2_verify().choose(wants) == [0, 0, 0, 0]
    # Where all four keep 90% of their drafts, every one drafts, evenly.
    ks = smollm2_verify().choose([Want(0.9, 8, False) for _ in range(4)])
    assert min(ks) >= 1 and max(ks) == min(ks)


def test_no_sequence_is_slowed_by_the_drafts_of_another() -> None:
    # One sequence that would keep 90% of its drafts beside three that cannot draft.
    wants = [Want(0.9, 8, False), *(Want(0.0, 0, False) for _ in range(3))]
    alone = [Want(0.9, 8, False)]
    assert smollm2_verify().choose(alone)[0] >= 2  # alone it drafts ...
    assert smollm2_verify().choose(wants) == [0, 0, 0, 0]  # ... but a CPU's row costs the others 4%
    # Where a row costs 0.5% of a round (a GPU), it drafts until the others would lose the
    # FAIR_SLACK of their rate.
    gpu = costs((0.010, 0.00005), (0.002, 0.0002))
    ks = gpu.choose(wants)
    assert ks[0] >= 2 and ks[1:] == [0, 0, 0]
    rows = 4 + ks[0]
    assert gpu.verify.at(rows) <= gpu.verify.at(4) / (1 - FAIR_SLACK)
    assert gpu.verify.at(rows + 1) > gpu.verify.at(4) / (1 - FAIR_SLACK)
    # A prompt read in the same round (its last 3 tokens) gains nothing from a draft either.
    assert smollm2_verify().choose(alone, other_tokens=3) == [0]
    assert 2 <= gpu.choose(alone, other_tokens=3)[0] <= ks[0] + 1


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
    # Rows nearly free (a GPU): the lookup's drafts cost nothing but their rows, the model's
    # its catch-up of 40 tokens too.
    c = costs((0.010, 0.00005), (0.004, 0.0004))
    ks = c.choose([Want(0.6, 8, False), Want(0.6, 8, True, lag=40), Want(0.1, 8, True, fixed=3)])
    assert ks[0] > ks[1]
    assert ks[2] == 3
    # Rows that cost (a CPU): the K asked for is still kept, and the others then do not draft
    # at its sequence's expense.
    c = costs((0.010, 0.0015), (0.004, 0.0004))
    assert c.choose([Want(0.6, 8, False), Want(0.1, 8, True, fixed=3)]) == [0, 3]


def test_the_kind_picked_for_a_sequence_is_by_its_offer_not_its_name() -> None:
    """pick (the batched scheduler's choice between kinds): a free run is weighed against a
    stepped kind's K at STEPPED_WEIGHT, a tie to the free one; with a fixed K only a free run
    as long as K displaces a stepped kind."""
    stepped, short_run, long_run = Bid(0.5, 8, False), Bid(0.4, 3, True), Bid(0.4, 8, True)
    assert pick([], 8, True) == -1
    assert pick([stepped, short_run], 8, True) == 0  # 0.4 * 3 < 0.5 * 8 * 0.5
    assert pick([stepped, long_run], 8, True) == 1  # 3.2 > 2.0
    assert pick([stepped, Bid(0.5, 4, True)], 8, True) == 1  # 2.0 == 2.0: the free one
    assert pick([short_run, stepped], 8, True) == 1  # (not by its place)
    assert pick([stepped, long_run], 8, False) == 1  # a run as long as K
    assert pick([stepped, short_run], 8, False) == 0
    assert pick([short_run], 8, False) == 0
    assert pick([short_run, Bid(0.1, 5, True)], 8, False) == 1  # the longest run, not the best rate
