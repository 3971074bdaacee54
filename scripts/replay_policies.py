"""Replay fixed-K and adaptive drafting on recorded acceptance, free of timing noise.

Records, with the real engine, which output positions the draft model got right on every bench
prompt (greedy, fixed K = 12 and K = 5: two samples, since near-ties of the draft's top two
logits can flip between runs), then replays every policy on those sequences with the costs a
`tandem bench --json` report measured (see app/bench/replay.py). It prints the predicted
speedup per category for K = 1..12 and adaptive K, and adaptive against the best fixed K.

    .venv/bin/python scripts/replay_policies.py --costs docs/results/smollm2-cpu-model-5runs.json
    .venv/bin/python scripts/replay_policies.py --costs REPORT.json --traces saved.json
    .venv/bin/python scripts/replay_policies.py --costs REPORT.json --traces saved.json --shuffle 30

A prediction, not a measurement: it says whether the adaptive policy's choices are as good as
the best fixed K's when every operation costs its mean; the bench says what the machine did.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tandem.bench.prompts import DEFAULT_PROMPTS, load_prompts  # noqa: E402
from tandem.bench.replay import Policy, Trace, costs_from_report, replay_all, trace_from_rounds  # noqa: E402
from tandem.bench.runner import run_once  # noqa: E402
from tandem.engine import GenerationConfig, ModelPair, SamplerSettings  # noqa: E402
from tandem.engine.drafters.policy import AdaptivePolicy, CostModel, FixedPolicy  # noqa: E402
from tandem.session.runner import Runner  # noqa: E402


def record(target: Path, draft: Path, max_tokens: int) -> list[Trace]:
    from tandem.session.prompts import text_prompt

    pair = ModelPair.load(target, draft)
    runner = Runner.open(pair)  # (the generations' engine thread; the pair stays usable between them)
    # Not exact: exact output caps K on some CPUs (exact.py), and a trace needs long drafts
    # (a bonus token's position is counted as agreed, so K = 2 would flatter the draft).
    base = GenerationConfig(max_tokens=max_tokens, sampler=SamplerSettings(temperature=0.0), exact=False)
    prompts = load_prompts([DEFAULT_PROMPTS])
    traces = []
    for k in (12, 5):
        cfg = replace(base, drafter="model", adaptive=False, draft_max=k)
        for p in prompts:
            tokens = text_prompt(pair, p.text)
            stats, _, rounds = run_once(runner, tokens, cfg, True)
            traces.append(trace_from_rounds(p.category, rounds, stats.generated, stats.stop_reason == "eog"))
            print(f"recorded K={k} {p.category}: {stats.generated} tokens", file=sys.stderr)
    runner.close()
    pair.close()
    return traces


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--costs", type=Path, required=True, help="a `tandem bench --json` report")
    ap.add_argument("--target", type=Path, help="target GGUF (default: the test models' F16)")
    ap.add_argument("--draft", type=Path, help="draft GGUF (default: the test models' Q4_1)")
    ap.add_argument("--traces", type=Path, help="replay these saved traces instead of recording")
    ap.add_argument("--save", type=Path, help="save the recorded traces here")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--k-max", type=int, default=12, help="adaptive K's upper bound (12)")
    ap.add_argument(
        "--iid",
        default="0.4,0.6,0.8,0.9,0.97,0.995",
        help="also replay synthetic traces whose acceptance does not depend on position, at these "
        "rates (24 traces of 128 tokens each; '' for none)",
    )
    ap.add_argument(
        "--shuffle",
        type=int,
        default=0,
        metavar="N",
        help="also replay every trace N times with its rejections moved to random positions (same "
        "length, same number) and print the means: what a category's shape costs, apart from "
        "where its rejections happen to fall (which favours one fixed K in hindsight)",
    )
    args = ap.parse_args()

    report = json.loads(args.costs.read_text())
    costs = costs_from_report(report)
    if args.traces:
        traces = [Trace(**{"kind": "model", **t}) for t in json.loads(args.traces.read_text())]
    else:
        target, draft = args.target, args.draft
        if target is None or draft is None:
            sys.path.insert(0, str(ROOT / "tests"))
            import model_files

            target, draft = model_files.smollm2("F16"), model_files.smollm2_q4_1()
        traces = record(target, draft, args.max_tokens)
        if args.save:
            args.save.write_text(json.dumps([asdict(t) for t in traces]))

    def fixed(k: int) -> Callable[[CostModel], Policy]:
        return lambda model: FixedPolicy(k)

    # K = 0 is the target alone: the policy must also know when not to draft.
    policies: dict[str, Callable[[CostModel], Policy]] = {f"K={k}": fixed(k) for k in range(args.k_max + 1)}
    policies["adaptive"] = lambda model: AdaptivePolicy(args.k_max, model, "model")
    result = replay_all(traces, policies, costs, args.max_tokens)

    agree = sum(sum(t.match) for t in traces) / max(1, sum(len(t.match) for t in traces))
    print(f"costs from {args.costs}: c = {costs.c:.3f}, v(6) = {costs.v(6):.2f}, v(13) = {costs.v(13):.2f}")
    print(f"{len(traces)} traces, the draft agreed at {100 * agree:.1f}% of positions\n")
    cats = list(result["adaptive"])
    shown = [f"K={k}" for k in (1, 2, 3, 4, 5, 6, 8, 10, 12) if k <= args.k_max] + ["adaptive"]
    print("predicted speedup over the target alone (mean over traces); K=0 is the target alone")
    print(f"{'category':<14}" + "".join(f"{n:>9}" for n in shown) + "   best fixed   adaptive/best")
    for cat in cats:
        print_row(cat, result, shown)
    rates = [float(a) for a in args.iid.split(",") if a.strip()]
    if rates:
        print("\nsynthetic traces, acceptance independent of position")
        rng = random.Random(1)
        for a in rates:
            synthetic = [
                Trace(
                    f"alpha {a:g}",
                    [rng.random() < a for _ in range(args.max_tokens + 1)],
                    eog=False,
                    kind="model",
                )
                for _ in range(24)
            ]
            print_row(f"alpha {a:g}", replay_all(synthetic, policies, costs, args.max_tokens), shown)
    if args.shuffle:
        print(f"\nthe same traces with their rejections at random positions, mean of {args.shuffle} draws")
        rng = random.Random(2)
        draws = [
            replay_all([shuffled(t, rng) for t in traces], policies, costs, args.max_tokens)
            for _ in range(args.shuffle)
        ]
        mean = {n: {c: statistics.mean(d[n][c] for d in draws) for c in draws[0][n]} for n in policies}
        for cat in cats:
            print_row(cat, mean, shown)
    return 0


def shuffled(trace: Trace, rng: random.Random) -> Trace:
    """The trace with as many rejections, at uniformly random output positions."""
    n = len(trace.match) - (1 if trace.eog else 0)  # the end token's position stays agreed
    rejected = set(rng.sample(range(n), trace.match[:n].count(False)))
    return Trace(
        trace.category, [i not in rejected for i in range(n)] + trace.match[n:], trace.eog, trace.kind
    )


def print_row(label: str, result: dict[str, dict[str, float]], shown: list[str]) -> None:
    cat = label if label in result["adaptive"] else "overall"
    best = max((n for n in result if n != "adaptive"), key=lambda n: result[n][cat])
    row = "".join(f"{result[n][cat]:>9.3f}" for n in shown)
    ratio = result["adaptive"][cat] / result[best][cat]
    print(f"{label:<14}{row}   {best:>10}   {ratio:>13.3f}")


if __name__ == "__main__":
    sys.exit(main())
