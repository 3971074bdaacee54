"""What adaptive drafting learnt about a pair on this machine, kept from one process to the next.

A pair's `CostModel` (drafters/policy.py: the target's step and verify times, each drafter's
step and long-run acceptance) is learnt as it answers. Kept only in memory, every `tandem run`
and `tandem chat` started as a pair never seen: a new pair's exploration budget (about 11% of
a 64-token answer) spent on finding out, again, that a draft model does not pay on a 2-core VM
(docs/benchmarks.md, "Why the Qwen pair's first answer loses"). So a front-end restores the
model when it opens the pair and keeps it when it closes it.

The batched engine (`tandem serve --parallel N`) times its decodes before it takes requests (17 s
for the Qwen2.5-Coder pair on a 2-core CPU): what it measured (`ModelPair.batch_costs`) is kept
too, by the number of sequences, and a server started again on the same pair is ready at once;
its rounds go on updating those tables.

It belongs to the files (their resolved paths and sizes, as `measured.pair_key`), where the
target runs and how many threads it was given: another GPU or thread count learns anew. The
timings are moving averages, so a machine that got busier since is followed within a few
rounds. Nothing here changes an answer, only how much is drafted. A damaged, hostile or foreign
file is ignored (the pair learns anew); one that cannot be written is left as it was.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

# (Not the pair itself: the app's screens import this module, and must import without
# llama-cpp-python for the fast lane, tests/test_fast_lane.py.)
from tandem.engine import (
    CostModel,
    batch_costs_from_json,
    batch_costs_to_json,
    costs_from_json,
    costs_to_json,
)

from .files import data_dir, is_plausible_time, read_json, update_json
from .measured import pair_key

if TYPE_CHECKING:
    from tandem.engine import ModelPair

FILE_NAME = "learnt.json"
# Pairs kept: the most recently used (a file a user cycles through many models must not grow).
MAX_PAIRS = 64
# A model learnt this long ago starts afresh (a new driver, another machine behind the name).
MAX_AGE_S = 30 * 24 * 3600.0


def learnt_file() -> Path:
    return data_dir() / FILE_NAME


def key(pair: ModelPair) -> str | None:
    """The pair's entry: its files, where the target runs, its threads; None when a file
    cannot be read (nothing is restored or kept then)."""
    files = pair_key(pair.target.path, pair.draft_file)
    try:
        sidecar = pair.sidecar.resolve() if pair.sidecar is not None else ""
    except (OSError, RuntimeError):  # (RuntimeError: a loop of links, before Python 3.13)
        return None
    if files is None:
        return None
    return f"{files}|{sidecar}|{pair.target.device_label}|{pair.target.n_threads}"


def restore(pair: ModelPair, path: Path | None = None) -> bool:
    """Give `pair` what it learnt here before; False when nothing (usable) was kept."""
    k = key(pair)
    data = read_json(path or learnt_file())
    entry = data.get(k) if k is not None and isinstance(data, dict) else None
    if not isinstance(entry, dict) or not 0.0 <= time.time() - _when(entry) <= MAX_AGE_S:
        return False
    costs = costs_from_json(entry.get("costs"))
    batch = entry.get("batch")
    batch_costs = batch_costs_from_json(batch.get(_seqs(pair))) if isinstance(batch, dict) else None
    if costs is None and batch_costs is None:
        return False
    if costs is not None:
        pair.costs = costs
    if batch_costs is not None:
        pair.batch_costs = batch_costs
    return True


def keep(pair: ModelPair, path: Path | None = None) -> None:
    """Keep what `pair` learnt (nothing if it learnt nothing). Never raises for the file: a
    full disk or a read-only directory only means the next process learns anew."""
    k = key(pair)
    learnt = pair.costs != CostModel()
    batch = batch_costs_to_json(pair.batch_costs) if pair.batch_costs is not None else None
    if batch is not None and not batch["calibrated"]:
        batch = None  # (an engine stopped while it timed: nothing worth keeping)
    if k is None or (not learnt and batch is None):
        return
    entry: dict[str, Any] = {"when": time.time(), "costs": costs_to_json(pair.costs)}

    def change(data: Any) -> dict[str, Any]:
        kept = {n: e for n, e in data.items() if isinstance(e, dict)} if isinstance(data, dict) else {}
        old = kept.pop(k, None)
        if not learnt and old is not None and "costs" in old:
            entry["costs"] = old["costs"]  # (a server's batches learnt nothing of single answers)
        # The batched engine's tables for other sequence counts stay (a server with another
        # --parallel); this count's are replaced.
        others = old.get("batch") if old is not None else None
        batches = {n: b for n, b in others.items() if isinstance(n, str)} if isinstance(others, dict) else {}
        if batch is not None:
            batches[_seqs(pair)] = batch
        newest = sorted(kept.items(), key=lambda item: _when(item[1]), reverse=True)[: MAX_PAIRS - 1]
        return {**dict(newest), k: {**entry, "batch": batches} if batches else entry}

    with contextlib.suppress(OSError, TimeoutError):
        update_json(path or learnt_file(), change)


def _seqs(pair: ModelPair) -> str:
    """The batched engine's entry within the pair's: by the sequences its context holds (a
    batch's costs depend on how many share the cache)."""
    return str(pair.target.options.n_seq)


def _when(entry: dict[str, Any]) -> float:
    """When `entry` was kept (0: not a time Tandem wrote, so never recent)."""
    w = entry.get("when")
    return float(w) if is_plausible_time(w) and isinstance(w, (int, float)) else 0.0
