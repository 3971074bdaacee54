"""`tandem bench`: target-only vs speculative decoding, per prompt and per category.

Method (docs/benchmarks.md): both models load once; costs are measured directly; every prompt
then runs `--runs` rounds of [target alone + each setting], rotating the order each round, one
generation at a time. Speed is decode tokens/s (prefill excluded); a speedup is the median of
per-round ratios against the target-only run of the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from tandem import __version__
from tandem.bench import chart, versus
from tandem.bench.prompts import DEFAULT_PROMPTS, BenchPrompt, load_prompts
from tandem.bench.report import build_report
from tandem.bench.runner import RunRecord, run_bench
from tandem.bench.settings import BenchSetting, parse_drafters, parse_settings
from tandem.cli.fetch import terminal_fetch
from tandem.cli.options import BenchOptions, add_generation_options, add_model_options, bench_options
from tandem.cli.process import peak_rss_bytes
from tandem.engine import (
    GenerationConfig,
    ModelPair,
    TandemError,
    drafter_choices,
    mean_costs,
    measure_costs,
)
from tandem.session import measured
from tandem.session.drafting import exact_note
from tandem.session.pairs import open_pair
from tandem.session.prompts import text_prompt
from tandem.session.refs import PairRef
from tandem.session.runner import Runner


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="measure speculative vs target-only speed",
        description="Run each prompt target-only and speculative (one or more settings), alternating, "
        "and report speedup, acceptance, tokens per target pass, the measured costs, the speedup the "
        "cost model predicts and the efficiency (measured / predicted), per prompt and per category.",
    )
    add_model_options(p)
    add_generation_options(p, max_tokens=128)
    p.add_argument(
        "--prompts",
        metavar="PATH",
        type=Path,
        nargs="+",
        default=[DEFAULT_PROMPTS],
        help='prompt files or folders: JSONL with {"category", "prompt"}, or text with one '
        "'category: prompt' per line (default: assets/bench, six categories)",
    )
    p.add_argument(
        "--category", action="append", default=[], metavar="NAME", help="only these categories (repeatable)"
    )
    p.add_argument("--runs", type=int, default=3, metavar="R", help="rounds per prompt (3)")
    p.add_argument(
        "--compare",
        metavar="SPECS",
        help=f"settings to compare, comma-separated, each DRAFTER[:k=K][:p=P]: DRAFTER one of "
        f"{', '.join(drafter_choices())} (as --drafter), adaptive K unless :k=K fixes it, :p=P a "
        "--p-min (e.g. auto,lookup:k=5). Default: the drafting options given",
    )
    p.add_argument("--raw", action="store_true", help="send prompts without the chat template")
    p.add_argument("--json", metavar="OUT", type=Path, help="write the full results as JSON")
    p.add_argument("--chart", metavar="PNG", type=Path, help="draw the speedups per category as a PNG")
    p.add_argument(
        "--llama-bench",
        metavar="WHICH",
        default="auto",
        help="llama.cpp's own plain decode of the target, timed between the prompts and printed beside "
        "Tandem's: auto (llama-bench built from the vendored llama.cpp, where built), build (build it "
        "first: minutes, once), off, or the path of a llama-bench",
    )
    p.set_defaults(func=bench, options=bench_options)


def bench(opts: BenchOptions) -> int:
    if opts.runs < 1:
        raise TandemError("--runs must be at least 1")
    opts.options.validate_all()
    # Before minutes of benchmark: an output nowhere to be written is refused now, not after.
    _check_output(opts.json, "--json")
    _check_output(opts.chart, "--chart")
    if opts.chart is not None:
        chart.check_available()
    prompts = load_prompts(opts.prompts)
    if opts.categories:
        prompts = [p for p in prompts if p.category in opts.categories]
        if not prompts:
            raise TandemError(f"no prompts in the categories {', '.join(opts.categories)}")
    drafters = parse_drafters(opts.compare, opts.options.drafter)
    settings: list[BenchSetting] = []

    def read_settings(ref: PairRef, base: GenerationConfig) -> None:
        settings.extend(parse_settings(opts.compare, base))  # (refused before the models load)

    fetch = terminal_fetch(yes=opts.yes)
    with open_pair(
        opts.models,
        opts.options,
        fetch=fetch,
        drafters=sorted(drafters),
        raw=opts.raw,
        before_load=read_settings,
    ) as opened:
        pair, base = opened.pair, opened.config
        for note in opened.notes:
            print(f"note: {note}", file=sys.stderr)
        # (a K exactness caps, said once)
        for note in dict.fromkeys(filter(None, (exact_note(pair, s.config) for s in settings))):
            print(f"note: {note}", file=sys.stderr)
        encoded = [text_prompt(pair, p.text, raw=opts.raw, within_context=True) for p in prompts]
        k_top = max(s.config.k_max for s in settings)
        flat = [t for e in encoded for t in e]
        context = (flat * (1 + (k_top + 64) // len(flat)))[:256]  # long enough for K+1
        sizes = range(2, k_top + 2)
        greedy = base.sampler.greedy
        costs = measure_costs(pair.target, pair.draft, context, sizes, greedy=greedy)
        llama = _llama_bench(opts, pair, base.max_tokens)
        if llama is not None:
            llama.measure(pair.target.path)
        c = f"{costs.c:.2f}" if costs.c is not None else "n/a (no draft model)"
        print(
            f"costs: target step {1000 * costs.target_step_s:.1f} ms; c = {c}; lookup search "
            f"{1000 * costs.lookup_s:.2f} ms; verify {k_top + 1} tokens = {costs.v(k_top + 1):.2f} "
            "target steps",
            file=sys.stderr,
        )
        # The costs are measured again after every quarter of the prompts and averaged: the
        # prediction should describe the machine the runs ran on, not its first ten seconds.
        measured = [costs]
        checkpoints = {len(prompts) * q // 4 for q in range(1, 5)}

        def progress(i: int, records: list[RunRecord]) -> None:
            print(f"[{i + 1}/{len(prompts)}] {prompts[i].category}: done", file=sys.stderr)
            if i + 1 in checkpoints:
                measured.append(measure_costs(pair.target, pair.draft, context, sizes, greedy=greedy))
                if llama is not None:
                    llama.measure(pair.target.path)

        with Runner.open(pair) as runner:
            records = run_bench(runner, prompts, encoded, settings, base, opts.runs, progress)
        meta = {
            "tandem_version": __version__,
            "machine": {
                "platform": platform.platform(),
                "processor": platform.processor() or platform.machine(),
            },
            "target": str(pair.target.path),
            "draft": str(pair.draft.path) if pair.draft else None,
            "run": {
                "max_tokens": base.max_tokens,
                "temperature": base.sampler.temperature,
                "runs": opts.runs,
                "ctx": pair.target.n_ctx,
            },
            "peak_rss_bytes": peak_rss_bytes(),
        }
        costs = mean_costs(measured)
        meta["costs_measured"] = len(measured)
        report = build_report(prompts, settings, records, costs, meta)
        if llama is not None:
            if llama.error is not None:
                print(f"note: {llama.error}", file=sys.stderr)
            report["llama_bench"] = llama.summary(
                report["overall"][settings[0].name]["baseline_tokens_per_s"],
                {name: group["speculative_tokens_per_s"] for name, group in report["overall"].items()},
            )
        _keep_measurement(pair, report, exact=any(r.stats.exact for r in records))
    print(format_tables(report, prompts))
    written = True
    if opts.json:
        text = json.dumps(report, indent=2, ensure_ascii=False) + "\n"
        written &= _write_output(opts.json, text.encode("utf-8"), "results")
    if opts.chart:
        cats = list(report["categories"])
        names = list(report["settings"])
        title = f"tandem bench: {Path(report['target']).stem}"
        values = [[report["categories"][cat][n]["speedup"] for n in names] for cat in cats]
        png = chart.speedup_chart(
            title,
            [*cats, "overall"],
            names,
            [*values, [report["overall"][n]["speedup"] for n in names]],
        )
        written &= _write_output(opts.chart, png, "chart")
    return 0 if written else 1


def _check_output(path: Path | None, flag: str) -> None:
    """Refuse (TandemError, one line) an output file that cannot be written: its folder is
    missing or is not a folder, it is a folder itself, or nothing can be created there (read
    only, no permission). A device or a pipe that exists (/dev/stdout) is written as it is."""
    if path is None:
        return
    try:
        if path.is_dir():
            raise TandemError(f"{flag} {path} is a folder: give the path of a file to write")
        if path.exists() and not path.is_file():
            return
        folder = Path(os.path.realpath(path)).parent  # (a link: where the file it names is)
        if not folder.exists():
            raise TandemError(
                f"{flag} {path}: the folder {folder} does not exist: create it first, or give another path"
            )
        if not folder.is_dir():
            raise TandemError(f"{flag} {path}: {folder} is not a folder: give another path")
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise TandemError(f"{flag} {path} cannot be written: {exc.strerror or exc}") from None


def _write_output(path: Path, data: bytes, what: str) -> bool:
    """Write `data` to `path` whole or not at all, and say so on standard error: a temporary
    file beside it is renamed over it, so a full disk leaves the previous file (or none), never
    an empty or partial one. False, after one line saying why, when it could not be written
    (the tables on standard output still hold the results)."""
    try:
        _write_whole(path, data)
    except OSError as exc:
        print(
            f"tandem: error: the {what} could not be written to {path}: {exc.strerror or exc} "
            "(the tables above hold the results)",
            file=sys.stderr,
        )
        return False
    print(f"{what} written to {path}", file=sys.stderr)
    return True


def _write_whole(path: Path, data: bytes) -> None:
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:  # a device or a pipe (/dev/stdout): nothing to rename over
        with open(path, "wb") as fh:
            fh.write(data)
        return
    dest = Path(os.path.realpath(path))  # (a link keeps pointing at the file it names)
    try:
        mode = stat.S_IMODE(os.stat(dest).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # as open() would have created it
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _llama_bench(opts: BenchOptions, pair: ModelPair, tokens: int) -> versus.LlamaBench | None:
    """llama.cpp's llama-bench for the target, where there is one (else a note)."""
    on_gpu = pair.target.gpu_layers != 0
    path, note = versus.find(opts.llama_bench, on_gpu)
    if note is not None:
        print(f"note: {note}", file=sys.stderr)
    if path is None:
        return None
    layers = pair.target.gpu_layers if on_gpu else 0
    return versus.LlamaBench(path, tokens, pair.target.n_threads, 99 if layers < 0 else layers)


def _table(rows: list[tuple[str, ...]], right_from: int) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [
        "  ".join(
            cell.rjust(w) if c >= right_from else cell.ljust(w)
            for c, (cell, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    ]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def _same(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "NO")


def format_tables(report: dict[str, Any], prompts: list[BenchPrompt]) -> str:
    names = list(report["settings"])
    out: list[str] = []
    # Per prompt: the first setting in detail (speedup, acceptance, tokens per pass).
    first = names[0]
    rows = [
        (
            "#",
            "category",
            "target tok/s",
            "spec tok/s",
            "speedup",
            "accept",
            "tok/pass",
            "same",
            *[f"{n}" for n in names[1:]],
        )
    ]
    for i, p in enumerate(report["prompts"], 1):
        s = p["settings"][first]
        rows.append(
            (
                str(i),
                p["category"],
                f"{s['baseline_tokens_per_s']:.1f}",
                f"{s['speculative_tokens_per_s']:.1f}",
                f"{s['speedup']:.2f}x",
                f"{100 * s['acceptance_rate']:.0f}%",
                f"{s['tokens_per_round']:.2f}",
                _same(s["identical_output"]),
                *[f"{p['settings'][n]['speedup']:.2f}x" for n in names[1:]],
            )
        )
    o = report["overall"][first]
    rows.append(
        (
            "all",
            "",
            f"{o['baseline_tokens_per_s']:.1f}",
            f"{o['speculative_tokens_per_s']:.1f}",
            f"{o['speedup']:.2f}x",
            f"{100 * o['acceptance_rate']:.0f}%",
            f"{o['tokens_per_round']:.2f}",
            _same(o["identical_output"]),
            *[f"{report['overall'][n]['speedup']:.2f}x" for n in names[1:]],
        )
    )
    lines = _table(rows, 2)
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    out += [f"per prompt ({first} in detail; other columns: their speedups)", *lines, ""]
    # Per category and setting: the quantities that explain the speedup.
    rows = [
        (
            "category",
            "setting",
            "speedup",
            "alpha",
            "E",
            "K",
            "c",
            "v(K+1)",
            "predicted",
            "efficiency",
            "same",
        )
    ]
    for cat, group in [*report["categories"].items(), ("overall", report["overall"])]:
        for n in names:
            s = group[n]
            rows.append(
                (
                    cat,
                    n,
                    f"{s['speedup']:.2f}x",
                    f"{s['alpha']:.2f}",
                    f"{s['tokens_per_round']:.2f}",
                    f"{s['mean_draft_length']:.1f}",
                    f"{s['c']:.2f}",
                    f"{s['v']:.2f}",
                    f"{s['predicted_speedup']:.2f}x",
                    f"{s['efficiency']:.2f}",
                    _same(s["identical_output"]),
                )
            )
    out += [
        "per category (alpha: per-token acceptance; E: tokens per target pass; K: mean draft length;",
        "c: draft step / target step; v: verify cost in target steps; predicted = E / (K*c + v))",
        *_table(rows, 2),
        "",
    ]
    avf = report.get("adaptive_vs_best_fixed") or {}
    if avf:
        out.append(
            "adaptive vs the best fixed K in hindsight: ratio of speedups; in brackets the median "
            "of paired runs (same round) and its 95% bootstrap interval:"
        )
        for cat, d in avf.items():
            paired = d.get("paired", {})
            ratios = ", ".join(
                f"{n} {d[n]:.3f}"
                + (
                    f" (paired {paired[n]['median']:.3f}, {paired[n]['low']:.3f}-{paired[n]['high']:.3f})"
                    if n in paired
                    else ""
                )
                for n in d
                if n not in ("best_fixed", "best_fixed_speedup", "paired")
            )
            out.append(f"  {cat}: best fixed {d['best_fixed']} {d['best_fixed_speedup']:.2f}x; {ratios}")
        out.append("")
    llama = report.get("llama_bench")
    if llama:
        where = "on the GPU" if llama["gpu_layers"] else f"{llama['threads']} threads"
        ratios = "; ".join(
            f"{n} {report['overall'][n]['speculative_tokens_per_s']:.1f} tok/s ({v:.2f}x)"
            for n, v in llama["settings_vs_llama"].items()
        )
        out += [
            f"against llama.cpp's own plain decode (llama-bench tg{llama['tokens']}, the same file, {where}; "
            f"median of {len(llama['runs'])} runs between the prompts): {llama['tokens_per_s']:.1f} tok/s",
            f"  Tandem's target alone {report['overall'][names[0]]['baseline_tokens_per_s']:.1f} tok/s "
            f"({llama['target_alone_vs_llama']:.2f}x); {ratios}",
            "",
        ]
    r = report["run"]
    worst = max(report["overall"][n]["python_overhead"] for n in names)
    out.append(
        f"{r['max_tokens']} tokens, temperature {r['temperature']}, {r['runs']} rounds per prompt, "
        f"context {r['ctx']}. Python outside llama_decode: {100 * worst:.1f}% of decode time "
        f"(worst setting). c and v: the mean of {report.get('costs_measured', 1)} measurements "
        "spread over the run."
    )
    return "\n".join(out)


def _keep_measurement(pair: ModelPair, report: dict[str, Any], *, exact: bool) -> None:
    """What the pair gave here, for `tandem pairs` and the app's picker to say (a failure to save
    it is a note: the report is what was asked for)."""
    m = measured.from_report(report, pair.target.device_label, exact)
    if m is None:
        return
    draft = pair.draft.path if pair.draft is not None else pair.draft_file
    try:
        measured.record(pair.target.path, draft, m)
    except OSError as exc:
        print(f"note: could not keep this measurement for `tandem pairs`: {exc}", file=sys.stderr)
        return
    print(f"note: kept as this pair's figure on this machine: {m.summary()}", file=sys.stderr)
