"""The bootstrap interval the bench puts around adaptive-vs-fixed comparisons."""

from __future__ import annotations

import statistics

import pytest

from tandem.bench.interval import bootstrap_median

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)


def test_identical_values_give_a_point() -> None:
    assert bootstrap_median([[1.02] * 5, [1.02] * 3]) == (1.02, 1.02)


def test_the_interval_holds_the_median_and_narrows_with_more_runs() -> None:
    few = [[0.9, 1.1, 1.0], [0.95, 1.05, 1.0]]
    many = [g * 8 for g in few]
    low, high = bootstrap_median(few)
    assert low <= statistics.median(x for g in few for x in g) <= high
    low_many, high_many = bootstrap_median(many)
    assert high_many - low_many < high - low
    assert 0.9 <= low_many <= 1.0 <= high_many <= 1.1


def test_resampling_keeps_each_group_s_weight() -> None:
    # One prompt always 1.2, another always 0.8: every resample keeps 3 of each, so the median
    # is always between them; an unstratified resample would often draw 4+ from one group.
    low, high = bootstrap_median([[1.2] * 3, [0.8] * 3])
    assert low == high == 1.0


def test_no_values() -> None:
    assert bootstrap_median([[], []]) == (0.0, 0.0)


def test_reproducible() -> None:
    groups = [[0.97, 1.04, 0.99, 1.1], [0.93, 1.0, 1.01]]
    assert bootstrap_median(groups) == bootstrap_median(groups)
