"""Does the draft model's confidence say where it will be rejected, and is that worth using?

Records, for every bench prompt, the target's greedy answer and, teacher-forced along it, the
draft model's top-token probability and whether its top token is the target's (under greedy
decoding exactly what decides acceptance: the accepted prefix is always the target's text).
Prints acceptance per confidence bin, then replays (app/bench/replay.py's cost model, costs
from a `tandem bench --json` report) the stopping rules confidence allows:

* p-min: stop before a token whose confidence is below p (the engine's --p-min);
* calibrated: learn acceptance per confidence bin online, keep the survival chance S of the
  round's drafts, and stop drafting once S * (mean acceptance) is worth less than the next
  step costs at the break-even rate R (tokens per target step): S * a < R * (c + dv).

    .venv/bin/python scripts/draft_confidence.py --costs docs/results/smollm2-cpu-model-5runs.json \
        --save docs/results/smollm2-cpu-confidence.json
    .venv/bin/python scripts/draft_confidence.py --costs REPORT.json --traces saved.json

A prediction on recorded text, like scripts/replay_policies.py, not a measurement.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tandem.bench.prompts import DEFAULT_PROMPTS, load_prompts  # noqa: E402
from tandem.bench.replay import ReplayCostModel, costs_from_report  # noqa: E402
from tandem.bench.runner import run_once  # noqa: E402
from tandem.engine import GenerationConfig, ModelPair, SamplerSettings  # noqa: E402
from tandem.engine.decoding.costs import MeasuredCosts  # noqa: E402
from tandem.engine.drafters.policy import AdaptivePolicy, FixedPolicy, expected_tokens  # noqa: E402
from tandem.session.runner import Runner  # noqa: E402

EDGES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]  # confidence bins: [0, .1), [.1, .2), ...


@dataclass
class ConfTrace:
    category: str
    match: list[bool]  # per output position: the draft's top token is the target's
    conf: list[float]  # per output position: the draft's top-token probability


def record(target: Path, draft: Path, max_tokens: int) -> list[ConfTrace]:
    from tandem.session.prompts import text_prompt

    pair = ModelPair.load(target, draft)
    runner = Runner.open(pair)  # (the generations' engine thread; the pair stays usable between them)
    assert pair.draft is not None
    cfg = GenerationConfig(max_tokens=max_tokens, sampler=SamplerSettings(temperature=0.0))
    traces = []
    for p in load_prompts([DEFAULT_PROMPTS]):
        prompt = text_prompt(pair, p.text)
        _, answer, _ = run_once(runner, prompt, cfg, False)
        d = pair.draft
        d.reset()
        logits = d.decode(prompt, "last")
        match, conf = [], []
        for tok in answer:
            assert logits is not None
            row = logits[0]
            top = float(row.max())
            match.append(int(np.argmax(row)) == tok)
            conf.append(float(1.0 / np.exp(row - top).sum()))
            logits = d.decode([tok], "last")
        traces.append(ConfTrace(p.category, match, conf))
        print(f"recorded {p.category}: {len(answer)} tokens", file=sys.stderr)
    runner.close()
    pair.close()
    return traces


class Calibration:
    """Acceptance per confidence bin, learnt online from a prior at `prior` (2 tokens' worth)."""

    def __init__(self, prior: float, weight: float = 2.0) -> None:
        self.accepted = [prior * weight] * (len(EDGES) + 1)
        self.trials = [weight] * (len(EDGES) + 1)

    def chance(self, conf: float) -> float:
        b = bisect.bisect(EDGES, conf)
        return self.accepted[b] / self.trials[b]

    def mean(self) -> float:
        return sum(self.accepted) / sum(self.trials)

    def observe(self, conf: float, ok: bool) -> None:
        b = bisect.bisect(EDGES, conf)
        self.accepted[b] += ok
        self.trials[b] += 1


# A stopping rule: (calibration, survival so far, confidence of the token just drafted, the
# policy's plain α) -> stop after this token?
Stop = Callable[[Calibration, float, float, float], bool]


def replay(
    t: ConfTrace,
    policy: AdaptivePolicy | FixedPolicy,
    cal: Calibration,
    stop: Stop | None,
    p_min: float,
    costs: MeasuredCosts,
    max_tokens: int,
) -> tuple[int, float]:
    """(tokens, cost in target steps): the engine's round rules as in app/bench/replay.py."""
    n, pos, generated, cost, behind = len(t.match), 0, 0, 0.0, 1
    while pos < n and generated < max_tokens:
        owed = costs.catchup(behind) - costs.catchup(2) if behind > 2 else 0.0
        k, _ = policy.plan(max(0, max_tokens - generated - 1), owed_s=owed)
        drafted, survival = 0, 1.0
        alpha = policy.alpha if isinstance(policy, AdaptivePolicy) else cal.mean()
        while drafted < k and pos + drafted < n:
            conf = t.conf[pos + drafted]
            if conf < p_min:
                break
            survival *= cal.chance(conf)
            drafted += 1
            if stop is not None and stop(cal, survival, conf, alpha):
                break
        accepted = 0
        while accepted < drafted and t.match[pos + accepted]:
            accepted += 1
        for j in range(min(drafted, accepted + 1)):  # positions the target judged
            cal.observe(t.conf[pos + j], t.match[pos + j])
        cost += costs.round_cost("model" if drafted else "", drafted, caught_up=behind)
        policy.observe(drafted, accepted)
        behind = (2 if accepted == drafted else 1) if drafted else behind + 1
        pos += accepted + 1
        generated = min(pos, n)
    return min(generated, max_tokens), cost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--costs", type=Path, required=True, help="a `tandem bench --json` report")
    ap.add_argument("--traces", type=Path, help="replay these saved traces instead of recording")
    ap.add_argument("--save", type=Path, help="save the recorded traces here")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    args = ap.parse_args()
    costs = costs_from_report(json.loads(args.costs.read_text()))
    if args.traces:
        traces = [ConfTrace(**t) for t in json.loads(args.traces.read_text())]
    else:
        sys.path.insert(0, str(ROOT / "tests"))
        import model_files

        traces = record(model_files.smollm2("F16"), model_files.smollm2_q4_1(), args.max_tokens)
        if args.save:
            args.save.write_text(json.dumps([asdict(t) for t in traces]))

    print("acceptance by the draft's confidence in its top token (teacher-forced on the target's answers)")
    cats = sorted({t.category for t in traces})
    labels = [f"<{e:g}" for e in EDGES] + [f">={EDGES[-1]:g}"]
    print(f"{'':14}" + "".join(f"{x:>10}" for x in labels))
    for cat in [*cats, "all"]:
        ok = [0] * len(labels)
        seen = [0] * len(labels)
        for t in traces:
            if cat in (t.category, "all"):
                for m, c in zip(t.match, t.conf, strict=True):
                    b = bisect.bisect(EDGES, c)
                    ok[b] += m
                    seen[b] += 1
        print(f"{cat:14}" + "".join(f"{a:>5}/{s:<4}" for a, s in zip(ok, seen, strict=True)))

    slope = costs.v(13) - costs.v(12)  # one more verified token, in target steps
    step = (costs.c or 0.0) + slope
    model = ReplayCostModel(costs)

    def plan_rate(alpha: float) -> float:
        # The best rate a fixed K would give at the plain α: the break-even for one more step.
        def rate(k: int) -> float:
            return expected_tokens(alpha, k) / ((model.draft_time("model", k) or 0.0) + costs.v(k + 1))

        return max(rate(k) for k in range(13))

    def calibrated(rate: float | None) -> Stop:
        def stop(cal: Calibration, survival: float, conf: float, alpha: float) -> bool:
            r = plan_rate(alpha) if rate is None else rate
            return survival * cal.mean() < r * step

        return stop

    rules: dict[str, tuple[Callable[[], AdaptivePolicy | FixedPolicy], Stop | None, float]] = {}
    for k in (5, 8, 12):
        rules[f"K={k}"] = (lambda k=k: FixedPolicy(k), None, 0.0)
    adaptive = lambda: AdaptivePolicy(12, model, "model")  # noqa: E731
    rules["adaptive"] = (adaptive, None, 0.0)
    for p in (0.1, 0.2, 0.3, 0.5):
        rules[f"p-min {p:g}"] = (adaptive, None, p)
    rules["calib. R plan"] = (adaptive, calibrated(None), 0.0)
    for r in (1.0, 1.1, 1.2):
        rules[f"calib. R={r:g}"] = (adaptive, calibrated(r), 0.0)
        rules[f"K=12 calib. R={r:g}"] = (lambda: FixedPolicy(12), calibrated(r), 0.0)

    print(f"\npredicted speedup over the target alone (c {costs.c:.2f}, extra verified token {slope:.2f})")
    print(f"{'rule':20}" + "".join(f"{c[:8]:>9}" for c in [*cats, "overall"]))
    for name, (make, stop, p_min) in rules.items():
        # One pass to warm the long-run estimates (as the bench's warm-up and earlier prompts do).
        model = ReplayCostModel(costs)
        cal = Calibration(prior=0.8)
        per: dict[str, list[float]] = {}
        for final in (False, True):
            for t in traces:
                tokens, cost = replay(t, make(), cal, stop, p_min, costs, args.max_tokens)
                if final and cost > 0:
                    per.setdefault(t.category, []).append(tokens / cost)
        row = [statistics.mean(per[c]) for c in cats] + [statistics.mean(x for v in per.values() for x in v)]
        print(f"{name:20}" + "".join(f"{x:9.3f}" for x in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
