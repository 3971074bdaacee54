"""The speedup readout's arithmetic (speedup.py) with a fake clock: rounds of known length,
plain steps among them, a load change mid-answer, the bound by tokens per pass."""

from __future__ import annotations

import pytest

from tandem.engine.decoding.speedup import SpeedupMeter

pytestmark = pytest.mark.fast

STEP = 0.010  # the target alone's step, seconds


def drive(meter: SpeedupMeter, rounds: int, *, step: float, per_pass: int, cost: float) -> None:
    """`rounds` rounds of `per_pass` tokens, each drafted round costing `cost` steps; a plain
    step (one token, one step) whenever the meter asks for one."""
    for _ in range(rounds):
        if meter.probe_due():
            meter.add(0, 1, step)
        else:
            meter.add(per_pass - 1, per_pass, cost * step)


def test_no_estimate_before_a_target_step_is_timed() -> None:
    meter = SpeedupMeter()
    assert meter.estimate() is None
    assert not meter.probe_due()  # the first round runs cold: no probe
    meter.add(4, 5, 2 * STEP, timed=False)
    assert meter.estimate() is None
    assert meter.probe_due()  # the first warm round times the target


def test_a_steady_machine_gives_the_ratio_of_the_work() -> None:
    meter = SpeedupMeter()
    meter.add(4, 5, 2 * STEP, timed=False)
    drive(meter, 200, step=STEP, per_pass=5, cost=2.0)
    est = meter.estimate()
    assert est is not None
    # Mostly rounds of 5 tokens in 2 steps, with a few probes of 1 token in 1 step.
    tokens = sum(r[1] for r in meter._rounds)
    expected = tokens * STEP / meter._t
    assert est.speedup == pytest.approx(expected, rel=1e-6)
    assert 2.3 < est.speedup < 2.5
    assert est.low <= est.speedup <= est.high
    assert not est.load_changed
    assert est.target_alone_tps == pytest.approx(1 / STEP)


def test_probes_are_few() -> None:
    meter = SpeedupMeter()
    meter.add(4, 5, 2 * STEP, timed=False)
    drive(meter, 400, step=STEP, per_pass=5, cost=2.0)
    probes = sum(1 for r in meter._rounds if r[1] == 1)
    assert 5 <= probes <= 16  # ~2-4% of rounds


def test_rounds_that_draft_nothing_are_free_samples_and_give_one() -> None:
    """The 2.56x bug: K = 0 in most rounds is the target alone, about 1.0x."""
    meter = SpeedupMeter()
    meter.add(0, 1, STEP, timed=False)
    for i in range(100):
        if i % 10 == 0:
            meter.add(2, 2, 1.6 * STEP)  # a drafted round that won one token
        else:
            meter.add(0, 1, STEP)
    est = meter.estimate()
    assert est is not None
    assert 0.9 < est.speedup < 1.05
    assert est.plain_steps >= 80


def test_a_neighbour_arriving_mid_answer_slows_both_sides() -> None:
    """Half the answer on an idle machine, half with the steps 3x slower: the speedup is the
    work's ratio, not idle target speed against busy speculative speed."""
    meter = SpeedupMeter()
    meter.add(4, 5, 2 * STEP, timed=False)
    drive(meter, 100, step=STEP, per_pass=5, cost=2.0)
    meter.speed_changed()  # the thread governor saw it
    drive(meter, 100, step=3 * STEP, per_pass=5, cost=2.0)
    est = meter.estimate()
    assert est is not None
    assert 2.2 < est.speedup < 2.6
    assert est.load_changed
    # Against the target alone timed only at the start (idle), it would have read ~1.2x.
    naive = sum(r[1] for r in meter._rounds) * STEP / meter._t
    assert naive < est.speedup / 1.8


def test_never_above_the_tokens_per_pass() -> None:
    """Each pass costs at least one target step."""
    meter = SpeedupMeter()
    meter.add(2, 3, STEP, timed=False)
    meter.add(0, 1, 10 * STEP)  # one very slow plain step: a stall
    for _ in range(5):
        meter.add(2, 3, STEP)
    est = meter.estimate()
    assert est is not None
    per_pass = 19 / 7
    assert est.speedup <= per_pass and est.high <= per_pass


def test_the_interval_narrows_with_more_steps() -> None:
    short, long = SpeedupMeter(), SpeedupMeter()
    for meter, n in ((short, 10), (long, 400)):
        meter.add(4, 5, 2 * STEP, timed=False)
        for i in range(n):
            jitter = 1.0 + 0.1 * ((i * 7) % 5 - 2) / 2
            if meter.probe_due():
                meter.add(0, 1, STEP * jitter)
            else:
                meter.add(4, 5, 2 * STEP * jitter)
    a, b = short.estimate(), long.estimate()
    assert a is not None and b is not None
    assert (b.high - b.low) / b.speedup < (a.high - a.low) / a.speedup
