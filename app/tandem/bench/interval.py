"""How far a median of noisy ratios can be trusted: a bootstrap interval.

Single runs on a shared machine vary by about +-10%, so a median of a few runs moves by several
percent between sessions; the interval says by how much.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence


def bootstrap_median(
    groups: Sequence[Sequence[float]], resamples: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """A `level` interval for the median of all values, resampling within each group.

    Groups are resampled separately (stratified): a bench category's prompts differ from one
    another more than one prompt's runs do, and every resample must keep each prompt's weight.
    The seed is fixed so a report is reproducible from its records.
    """
    groups = [list(g) for g in groups if g]
    if not groups:
        return 0.0, 0.0
    rng = random.Random(seed)
    medians = sorted(
        statistics.median(x for g in groups for x in rng.choices(g, k=len(g))) for _ in range(resamples)
    )
    tail = (1.0 - level) / 2.0
    return medians[int(tail * resamples)], medians[int((1.0 - tail) * resamples) - 1]
