"""`tandem bench`: target-only vs speculative on a set of prompts, in one process.

Method (also in docs/benchmarks.md): both models are loaded once; one short warm-up run of
each mode; then for every prompt `--runs` pairs of runs, alternating which mode goes first so
that drift (thermal, other load) hits both equally. Runs never overlap. Speed is decode
tokens/s, prefill excluded. A prompt's speedup is the median of its per-pair ratios; the
overall figures are the median of all per-pair ratios and the ratio of aggregate tokens/s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from app import __version__
from app.cli.options import (
    add_generation_options,
    add_model_options,
    generation_config,
    load_options,
    model_choice,
)
from app.cli.process import peak_rss_bytes
from app.cli.run_cmd import build_prompt
from app.engine import DoneEvent, GenerationConfig, GenerationStats, ModelPair, TandemError, TokenEvent
from app.engine.costs import MeasuredCosts, measure_costs

DEFAULT_PROMPTS = Path(__file__).resolve().parent.parent.parent / "assets" / "prompts" / "bench.txt"


@dataclass(frozen=True)
class BenchPrompt:
    category: str
    text: str


@dataclass
class PromptResult:
    prompt: BenchPrompt
    baseline: list[GenerationStats] = field(default_factory=list)
    speculative: list[GenerationStats] = field(default_factory=list)
    identical: bool = True

    @property
    def ratios(self) -> list[float]:
        return [
            s.decode_tokens_per_s / b.decode_tokens_per_s
            for b, s in zip(self.baseline, self.speculative, strict=True)
            if b.decode_tokens_per_s > 0
        ]

    def summary(self, costs: MeasuredCosts) -> dict[str, Any]:
        drafted = sum(s.drafted for s in self.speculative)
        accepted = sum(s.accepted for s in self.speculative)
        gen = sum(s.generated for s in self.speculative)
        rounds = sum(s.rounds for s in self.speculative)
        speedup = statistics.median(self.ratios) if self.ratios else 0.0
        predicted = costs.predicted_speedup(gen / rounds, drafted / rounds) if rounds else 0.0
        return {
            "category": self.prompt.category,
            "prompt": self.prompt.text,
            "baseline_tokens_per_s": statistics.median(b.decode_tokens_per_s for b in self.baseline),
            "speculative_tokens_per_s": statistics.median(s.decode_tokens_per_s for s in self.speculative),
            "speedup": speedup,
            "predicted_speedup": predicted,
            "efficiency": speedup / predicted if predicted else 0.0,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "tokens_per_round": gen / rounds if rounds else 0.0,
            "mean_draft_length": drafted / rounds if rounds else 0.0,
            "python_overhead": statistics.median(s.python_overhead for s in self.speculative),
            "generated_tokens": self.speculative[0].generated if self.speculative else 0,
            "identical_output": self.identical,
        }


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="measure speculative vs target-only speed",
        description="Run each prompt target-only and speculative, alternating, and "
        "print speedup, acceptance and tokens per target pass.",
    )
    add_model_options(p)
    add_generation_options(p)
    p.set_defaults(max_tokens=128)
    p.add_argument(
        "--prompts",
        metavar="FILE",
        type=Path,
        default=DEFAULT_PROMPTS,
        help="prompts, one per line ('category: text' allowed; # comments), or JSONL "
        'with {"prompt", "category"}',
    )
    p.add_argument("--runs", type=int, default=3, metavar="R", help="alternating run pairs per prompt (3)")
    p.add_argument("--raw", action="store_true", help="send prompts without the chat template")
    p.add_argument("--json", metavar="OUT", type=Path, help="also write the results as JSON to OUT")
    p.set_defaults(func=bench)


def load_prompts(path: Path) -> list[BenchPrompt]:
    if not path.exists():
        raise TandemError(f"prompt file not found: {path}")
    prompts: list[BenchPrompt] = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if path.suffix == ".jsonl":
            try:
                obj = json.loads(line)
                prompts.append(BenchPrompt(str(obj.get("category", "general")), str(obj["prompt"])))
            except (ValueError, KeyError, AttributeError) as exc:
                raise TandemError(f'{path}:{lineno}: expected {{"prompt": ...}} ({exc})') from exc
            continue
        category, sep, text = line.partition(":")
        if sep and category.strip().isidentifier() and len(category) <= 24:
            prompts.append(BenchPrompt(category.strip(), text.strip().replace("\\n", "\n")))
        else:
            prompts.append(BenchPrompt("general", line.replace("\\n", "\n")))
    if not prompts:
        raise TandemError(f"{path} has no prompts")
    return prompts


def _run_once(
    pair: ModelPair, prompt: list[int], cfg: GenerationConfig, speculative: bool
) -> tuple[GenerationStats, list[int]]:
    stats: GenerationStats | None = None
    ids: list[int] = []
    for ev in pair.generate(prompt, cfg, speculative=speculative):
        if isinstance(ev, TokenEvent):
            ids.append(ev.id)
        elif isinstance(ev, DoneEvent):
            stats = ev.stats
    assert stats is not None
    return stats, ids


def bench(args: argparse.Namespace) -> int:
    if args.runs < 1:
        raise TandemError("--runs must be at least 1")
    choice = model_choice(args, need_draft=True)
    cfg = generation_config(args)
    prompts = load_prompts(args.prompts)
    with ModelPair.load(choice.target, choice.draft, load_options(args)) as pair:
        for note in pair.notes:
            print(f"note: {note}", file=sys.stderr)
        encoded = [build_prompt(pair, p.text, raw=args.raw, system=None) for p in prompts]
        warm = replace(cfg, max_tokens=min(16, cfg.max_tokens))
        _run_once(pair, encoded[0], warm, False)
        _run_once(pair, encoded[0], warm, True)
        assert pair.draft is not None
        flat = [t for e in encoded for t in e]
        context = (flat * (1 + (cfg.draft_max + 64) // len(flat)))[:256]  # long enough for K+1
        costs = measure_costs(pair.target, pair.draft, context, range(2, cfg.draft_max + 2))
        print(
            f"costs: target step {1000 * costs.target_step_s:.1f} ms, draft step "
            f"{1000 * costs.draft_step_s:.1f} ms (c = {costs.c:.2f}), verify {cfg.draft_max + 1} tokens "
            f"= {costs.v(cfg.draft_max + 1):.2f} target steps",
            file=sys.stderr,
        )
        results: list[PromptResult] = []
        for i, (p, tokens) in enumerate(zip(prompts, encoded, strict=True), 1):
            res = PromptResult(p)
            for r in range(args.runs):
                order = (False, True) if r % 2 == 0 else (True, False)
                outs: dict[bool, list[int]] = {}
                for speculative in order:
                    stats, ids = _run_once(pair, tokens, cfg, speculative)
                    (res.speculative if speculative else res.baseline).append(stats)
                    outs[speculative] = ids
                res.identical = res.identical and outs[True] == outs[False]
            results.append(res)
            s = res.summary(costs)
            print(
                f"[{i}/{len(prompts)}] {p.category}: {s['speedup']:.2f}x, acceptance "
                f"{100 * s['acceptance_rate']:.0f}%",
                file=sys.stderr,
            )
        report = _report(args, cfg, pair, results, costs)
    print(format_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"results written to {args.json}", file=sys.stderr)
    return 0


def _report(
    args: argparse.Namespace,
    cfg: GenerationConfig,
    pair: ModelPair,
    results: list[PromptResult],
    costs: MeasuredCosts,
) -> dict[str, Any]:
    all_ratios = [r for res in results for r in res.ratios]
    base = [b for res in results for b in res.baseline]
    spec = [s for res in results for s in res.speculative]

    def agg_tps(runs: list[GenerationStats]) -> float:
        t = sum(r.decode_s for r in runs)
        return sum(r.generated for r in runs) / t if t > 0 else 0.0

    drafted = sum(s.drafted for s in spec)
    rounds = max(1, sum(s.rounds for s in spec))
    tokens_per_round = sum(s.generated for s in spec) / rounds
    aggregate = agg_tps(spec) / agg_tps(base) if agg_tps(base) else 0.0
    predicted = costs.predicted_speedup(tokens_per_round, drafted / rounds)
    assert pair.draft is not None
    return {
        "tandem_version": __version__,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine()},
        "target": str(pair.target.path),
        "draft": str(pair.draft.path),
        "settings": {
            "max_tokens": cfg.max_tokens,
            "draft_max": cfg.draft_max,
            "adaptive": cfg.adaptive,
            "temperature": cfg.sampler.temperature,
            "runs": args.runs,
            "ctx": pair.target.n_ctx,
        },
        "costs": {
            "target_step_ms": 1000 * costs.target_step_s,
            "draft_step_ms": 1000 * costs.draft_step_s,
            "c": costs.c,
            "v": {str(n): costs.v(n) for n in sorted(costs.verify_s)},
        },
        "prompts": [r.summary(costs) for r in results],
        "overall": {
            "median_speedup": statistics.median(all_ratios) if all_ratios else 0.0,
            "aggregate_speedup": aggregate,
            "predicted_speedup": predicted,
            "efficiency": aggregate / predicted if predicted else 0.0,
            "baseline_tokens_per_s": agg_tps(base),
            "speculative_tokens_per_s": agg_tps(spec),
            "acceptance_rate": sum(s.accepted for s in spec) / drafted if drafted else 0.0,
            "tokens_per_round": tokens_per_round,
            "mean_draft_length": drafted / rounds,
            "python_overhead": statistics.median(s.python_overhead for s in spec),
            "identical_output": all(r.identical for r in results),
            "peak_rss_bytes": peak_rss_bytes(),
        },
    }


def format_table(report: dict[str, Any]) -> str:
    rows = [("#", "category", "target tok/s", "spec tok/s", "speedup", "accept", "tok/pass", "same")]
    for i, p in enumerate(report["prompts"], 1):
        rows.append(
            (
                str(i),
                p["category"],
                f"{p['baseline_tokens_per_s']:.1f}",
                f"{p['speculative_tokens_per_s']:.1f}",
                f"{p['speedup']:.2f}x",
                f"{100 * p['acceptance_rate']:.0f}%",
                f"{p['tokens_per_round']:.2f}",
                "yes" if p["identical_output"] else "NO",
            )
        )
    o = report["overall"]
    rows.append(
        (
            "all",
            "",
            f"{o['baseline_tokens_per_s']:.1f}",
            f"{o['speculative_tokens_per_s']:.1f}",
            f"{o['median_speedup']:.2f}x",
            f"{100 * o['acceptance_rate']:.0f}%",
            f"{o['tokens_per_round']:.2f}",
            "yes" if o["identical_output"] else "NO",
        )
    )
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.rjust(w) if c >= 2 else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    s = report["settings"]
    lines.append("")
    c = report["costs"]
    k = f"K adaptive <= {s['draft_max']}" if s["adaptive"] else f"K={s['draft_max']}"
    lines.append(
        f"{k}, {s['max_tokens']} tokens, temp {s['temperature']}, {s['runs']} alternating run pairs "
        f"per prompt. Overall: median speedup {o['median_speedup']:.2f}x, "
        f"aggregate {o['aggregate_speedup']:.2f}x."
    )
    lines.append(
        f"Costs: c = {c['c']:.2f} (draft step {c['draft_step_ms']:.1f} ms / target step "
        f"{c['target_step_ms']:.1f} ms), mean draft length {o['mean_draft_length']:.1f}, "
        f"{o['tokens_per_round']:.2f} tokens per target pass; predicted {o['predicted_speedup']:.2f}x, "
        f"efficiency {o['efficiency']:.2f}. Python outside llama_decode: {100 * o['python_overhead']:.1f}% "
        "of decode time."
    )
    return "\n".join(lines)
