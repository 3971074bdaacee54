"""From run records to the numbers a person needs: speedups, and why.

Per prompt, category and setting: the measured speedup (median of per-run ratios against the
target-only run of the same round), per-token acceptance α, tokens per target pass E, mean draft
length K, the costs c and v, the speedup the cost model predicts, and efficiency =
measured / predicted. The prediction sums each round's cost in target steps over the rounds that
really ran: drafting (the draft model's first batch, which catches up on what it has not seen,
then c per further draft token; one search for lookup; the target's own heads as their rounds
measured them) and verifying, v(K+1). Efficiency shows
what the model does not capture: Python, sampling, noise.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from tandem.engine import DrafterStats, MeasuredCosts, drafter_kinds, uses_draft_model

from .interval import bootstrap_median
from .prompts import BenchPrompt
from .runner import BASELINE, RunRecord
from .settings import BenchSetting


def _ratios(records: Sequence[RunRecord], setting: str) -> list[float]:
    base = {(r.prompt, r.run): r for r in records if r.setting == BASELINE}
    out = []
    for r in records:
        b = base.get((r.prompt, r.run))
        if r.setting == setting and b is not None and b.stats.decode_tokens_per_s > 0:
            out.append(r.stats.decode_tokens_per_s / b.stats.decode_tokens_per_s)
    return out


def _aggregate_tps(records: Sequence[RunRecord]) -> float:
    t = sum(r.stats.decode_s for r in records)
    return sum(r.stats.generated for r in records) / t if t > 0 else 0.0


def _group(records: Sequence[RunRecord], setting: str, costs: MeasuredCosts) -> dict[str, Any]:
    mine = [r for r in records if r.setting == setting]
    base = [r for r in records if r.setting == BASELINE and any(m.prompt == r.prompt for m in mine)]
    rounds = [ev for r in mine for ev in r.rounds]
    n_rounds = max(1, len(rounds))
    accepted = sum(ev.accepted for ev in rounds)
    rejections = sum(1 for ev in rounds if ev.accepted < ev.drafted)
    drafted = sum(ev.drafted for ev in rounds)
    generated = sum(ev.emitted for ev in rounds)
    # Each kind prices its rounds (its spec's draft_cost; a kind measure_costs does not time,
    # the target's own heads, counts its steps as the round measured them).
    cost = sum(
        costs.round_cost(ev.drafter, ev.drafted, ev.caught_up, ev.looked_up, ev.draft_s) for ev in rounds
    )
    ratios = _ratios(records, setting)
    speedup = statistics.median(ratios) if ratios else 0.0
    predicted = generated / cost if cost else 0.0
    kinds = _kinds(mine)
    by_model = any(d.rounds for kind, d in kinds.items() if uses_draft_model(kind))
    base_ids = {(r.prompt, r.run): r.ids for r in base}
    return {
        "speedup": speedup,
        "aggregate_speedup": _aggregate_tps(mine) / _aggregate_tps(base) if _aggregate_tps(base) else 0.0,
        "runs": len(ratios),
        "alpha": accepted / (accepted + rejections) if accepted + rejections else 0.0,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "tokens_per_round": generated / n_rounds,
        "mean_draft_length": drafted / n_rounds,
        # Each kind's share of the rounds (`<kind>_share`), and its counts (GenerationStats's).
        **{f"{kind}_share": d.rounds / n_rounds for kind, d in kinds.items()},
        "drafters": {kind: asdict(d) for kind, d in kinds.items()},
        "c": (costs.c if by_model else costs.c_lookup) if rounds else 0.0,
        "v": costs.v(drafted / n_rounds + 1),
        "predicted_speedup": predicted,
        "efficiency": speedup / predicted if predicted else 0.0,
        # Meaningful for greedy decoding only; build_report blanks it otherwise.
        "identical_output": all(r.ids == base_ids.get((r.prompt, r.run)) for r in mine),
        "python_overhead": statistics.median(r.stats.python_overhead for r in mine) if mine else 0.0,
        "speculative_tokens_per_s": _aggregate_tps(mine),
        "baseline_tokens_per_s": _aggregate_tps(base),
    }


def _kinds(records: Sequence[RunRecord]) -> dict[str, DrafterStats]:
    """Per drafter kind, the engine's counts summed over the runs."""
    out = {kind: DrafterStats() for kind in drafter_kinds()}
    for r in records:
        for kind, d in r.stats.drafters.items():
            total = out.setdefault(kind, DrafterStats())
            total.rounds += d.rounds
            total.drafted += d.drafted
            total.accepted += d.accepted
            total.draft_s += d.draft_s
            total.seconds += d.seconds
    return out


def build_report(
    prompts: Sequence[BenchPrompt],
    settings: Sequence[BenchSetting],
    records: Sequence[RunRecord],
    costs: MeasuredCosts,
    meta: dict[str, Any],
) -> dict[str, Any]:
    categories = list(dict.fromkeys(p.category for p in prompts))
    names = [s.name for s in settings]
    greedy = settings[0].config.sampler.greedy if settings else True
    report: dict[str, Any] = {
        **meta,
        "settings": {
            s.name: {
                "drafter": s.config.drafter,
                "adaptive": s.config.adaptive,
                "draft_max": s.config.draft_max,
                "exact": s.config.exact,  # as asked (each run's record says as run)
            }
            for s in settings
        },
        "costs": {
            "target_step_ms": 1000 * costs.target_step_s,
            "draft_step_ms": None if costs.draft_step_s is None else 1000 * costs.draft_step_s,
            "lookup_ms": 1000 * costs.lookup_s,
            "c": costs.c,
            "c_lookup": costs.c_lookup,
            "v": {str(n): costs.v(n) for n in sorted(costs.verify_s)},
            # The draft model's catch-up batch of n tokens, in target steps.
            "catchup": {str(n): costs.catchup(n) for n in sorted(costs.draft_batch_s)},
        },
        "prompts": [],
        "categories": {},
        "overall": {},
    }
    for i, p in enumerate(prompts):
        per = [r for r in records if r.prompt == i]
        entry: dict[str, Any] = {"category": p.category, "prompt": p.text, "settings": {}}
        for name in names:
            entry["settings"][name] = _group(per, name, costs)
        report["prompts"].append(entry)
    for cat in categories:
        idx = {i for i, p in enumerate(prompts) if p.category == cat}
        per = [r for r in records if r.prompt in idx]
        report["categories"][cat] = {name: _group(per, name, costs) for name in names}
    for name in names:
        report["overall"][name] = _group(records, name, costs)
    for group in [*report["categories"].values(), report["overall"]]:
        for stats in group.values():
            stats["identical_output"] = stats["identical_output"] if greedy else None
    cat_prompts = {cat: {i for i, p in enumerate(prompts) if p.category == cat} for cat in categories}
    cat_prompts["overall"] = set(range(len(prompts)))
    report["adaptive_vs_best_fixed"] = _adaptive_vs_fixed(report, settings, records, cat_prompts)
    return report


def _paired(records: Sequence[RunRecord], a: str, b: str, prompts: set[int]) -> list[list[float]]:
    """Per prompt, per run: a's decode tokens/s over b's in the same round (the two ran seconds
    apart, so the machine's slow drift cancels out)."""
    tps = {(r.prompt, r.run, r.setting): r.stats.decode_tokens_per_s for r in records}
    out: list[list[float]] = []
    for i in sorted(prompts):
        runs = sorted({r.run for r in records if r.prompt == i})
        mine = [
            tps[(i, run, a)] / tps[(i, run, b)]
            for run in runs
            if tps.get((i, run, a), 0.0) > 0 and tps.get((i, run, b), 0.0) > 0
        ]
        if mine:
            out.append(mine)
    return out


def _adaptive_vs_fixed(
    report: dict[str, Any],
    settings: Sequence[BenchSetting],
    records: Sequence[RunRecord],
    cat_prompts: dict[str, set[int]],
) -> dict[str, Any]:
    """Per category: the best fixed-K setting in hindsight, and each adaptive one against it.

    Two views: the ratio of the two settings' speedups, and the median of paired ratios (the
    adaptive run over the fixed-K run of the same round) with a 95% bootstrap interval. Picking
    the best of several noisy fixed-K results favours the fixed side; the interval shows how
    much of a gap the noise alone can explain.
    """
    fixed = [s.name for s in settings if not s.config.adaptive]
    adaptive = [s.name for s in settings if s.config.adaptive]
    if not fixed or not adaptive:
        return {}
    out: dict[str, Any] = {}
    for cat, group in {**report["categories"], "overall": report["overall"]}.items():
        best = max(fixed, key=lambda n: group[n]["speedup"])
        paired: dict[str, Any] = {}
        for n in adaptive:
            groups = _paired(records, n, best, cat_prompts[cat])
            values = [x for g in groups for x in g]
            low, high = bootstrap_median(groups)
            paired[n] = {
                "median": statistics.median(values) if values else 0.0,
                "low": low,
                "high": high,
                "runs": len(values),
            }
        out[cat] = {
            "best_fixed": best,
            "best_fixed_speedup": group[best]["speedup"],
            **{
                n: group[n]["speedup"] / group[best]["speedup"] if group[best]["speedup"] else 0.0
                for n in adaptive
            },
            "paired": paired,
        }
    return out
