#!/usr/bin/env python3
"""Does the terminal app slow the engine down? Decode tokens/s in the TUI vs `tandem run`.

The same prompt, pair and settings go through `tandem run --json` and through the app (run
headless with Textual's run_test, at 120x40, colours on, the message typed and sent with a
Pilot), alternating which goes first, each in a fresh process (both load the pair the same
way). Both report the engine's own decode tokens/s (prefill excluded); the app streams every
token to the screen while it is measured. Prints each pair of runs, then the median and the
aggregate TUI / CLI ratio (1.00 = the UI costs nothing; the goal is >= 0.95).

    .venv/bin/python scripts/bench_tui.py                       # SmolLM2 test pair, 5 run pairs
    .venv/bin/python scripts/bench_tui.py --target T.gguf --draft D.gguf --runs 7 -n 256
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
SYSTEM = "You are a helpful assistant."


def default_pair() -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT / "tests"))
    import model_files  # the test models: SmolLM2-135M-Instruct F16 target, Q4_1 draft

    return model_files.smollm2("F16"), model_files.smollm2_q4_1()


def cli_run(args: argparse.Namespace) -> dict[str, float]:
    cmd = [
        str(Path(sys.executable).parent / "tandem"),
        "run",
        "--target",
        str(args.target),
        "--draft",
        str(args.draft),
        "--json",
        "-n",
        str(args.max_tokens),
        "--temp",
        "0",
        "--system",
        SYSTEM,
        args.prompt,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout)["stats"]
    return {"tokens_per_s": stats["decode_tokens_per_s"], "generated": stats["generated"]}


def tui_run(args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--child", "--target", str(args.target), "--draft", str(args.draft)]
    cmd += ["-n", str(args.max_tokens), "--prompt", args.prompt]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def child(args: argparse.Namespace) -> None:
    """One chat turn in the app, headless; prints the answer's stats as JSON."""
    sys.path.insert(0, str(ROOT))
    from tandem.session.refs import PairRef
    from tandem.ui.app import TandemApp
    from tandem.ui.settings import Settings, save_settings
    from tandem.ui.storage import AppDirs

    with tempfile.TemporaryDirectory() as tmp:
        dirs = AppDirs.under(Path(tmp))
        # The CLI's defaults: adaptive K <= 12, auto drafter, greedy, context 4096.
        save_settings(dirs.settings_file, Settings(max_tokens=args.max_tokens, system_prompt=SYSTEM))
        app = TandemApp(dirs=dirs, pair=PairRef(args.target, args.draft), calibrate_speed=False)
        result: dict[str, float] = {}

        async def main() -> None:
            async with app.run_test(size=(120, 40)) as pilot:
                while app.loaded is None or app.loading is not None:
                    await pilot.pause(0.05)
                app.chat.query_one("#prompt").focus()
                await pilot.press(*args.prompt)
                await pilot.press("enter")
                while not app.chat.live.rounds:  # prefill done, decoding has begun
                    await asyncio.sleep(0.01)
                ui_cpu0, wall0 = time.thread_time(), time.perf_counter()
                while app.chat.live.final is None:
                    await asyncio.sleep(0.05)
                # CPU time of the UI thread (Textual's event loop) while the answer streamed.
                ui_cpu, wall = time.thread_time() - ui_cpu0, time.perf_counter() - wall0
                while not app.chat.conv.turns or app.chat.conv.turns[-1].role != "assistant":
                    await asyncio.sleep(0.2)
                stats = app.chat.conv.turns[-1].stats
                result.update(
                    tokens_per_s=stats["tokens_per_s"],
                    generated=stats["generated"],
                    ui_cpu_share=ui_cpu / wall,
                    ui_lowered=float(app.ui_lowered),  # the UI thread yields to the engine
                )

        asyncio.run(main())
    print(json.dumps(result))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path)
    p.add_argument("--draft", type=Path)
    p.add_argument("-n", "--max-tokens", type=int, default=128)
    p.add_argument("--runs", type=int, default=5, help="alternating run pairs (5)")
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument("--json", type=Path, help="also write the runs and ratios here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if not args.target or not args.draft:
        args.target, args.draft = default_pair()
    if args.child:
        child(args)
        return 0
    print(f"pair: {args.target.name} + {args.draft.name}, {args.max_tokens} tokens, greedy", file=sys.stderr)
    rows = []
    for i in range(args.runs):
        order = ("cli", "tui") if i % 2 == 0 else ("tui", "cli")
        got = {}
        for which in order:
            got[which] = cli_run(args) if which == "cli" else tui_run(args)
        ratio = got["tui"]["tokens_per_s"] / got["cli"]["tokens_per_s"]
        rows.append(
            {"order": "/".join(order), **{f"{k}_{m}": v for m, r in got.items() for k, v in r.items()}}
        )
        rows[-1]["ratio"] = ratio
        print(
            f"[{i + 1}/{args.runs}] {'/'.join(order):8s} cli {got['cli']['tokens_per_s']:6.1f} tok/s  "
            f"tui {got['tui']['tokens_per_s']:6.1f} tok/s  ratio {ratio:.3f}  "
            f"({int(got['cli']['generated'])}/{int(got['tui']['generated'])} tokens, UI thread "
            f"{100 * got['tui']['ui_cpu_share']:.1f}% of a core)",
            flush=True,
        )
    ratios = [r["ratio"] for r in rows]
    agg = statistics.mean(r["tokens_per_s_tui"] for r in rows) / statistics.mean(
        r["tokens_per_s_cli"] for r in rows
    )
    med = statistics.median(ratios)
    sys.path.insert(0, str(ROOT))
    from tandem.bench.interval import bootstrap_median

    low, high = bootstrap_median([ratios], resamples=4000)
    print(
        f"TUI / CLI decode tokens/s: median {med:.3f} (95% bootstrap interval {low:.3f}-{high:.3f}), "
        f"aggregate {agg:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} alternating pairs)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "runs": rows,
                    "median_ratio": med,
                    "median_ratio_95": [low, high],
                    "aggregate_ratio": agg,
                    "when": time.time(),
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
