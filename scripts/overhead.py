#!/usr/bin/env python3
"""Time Tandem spends outside llama.cpp per generated token, measured as a user runs it.

Runs `tandem run --json --threads 1` (one llama.cpp thread, so its workers do not compete with
Python on a small machine) on SmolLM2-135M-Instruct Q4_0 drafting for itself (every draft is
accepted), greedy, fixed K, 256 tokens; speculative and target-only alternated, each several
times, and prints per mode the median of

    overhead per token = python_overhead x decode_s / generated

(python_overhead: the share of decode time outside llama.cpp's decode calls). With --stream the same
generations run in this process and their text goes through the CLI's own coloured writer
into a file, so the cost of rendering is included too.

    .venv/bin/python scripts/overhead.py                  # 5 runs per mode
    .venv/bin/python scripts/overhead.py --runs 9 --stream
    git worktree add /tmp/before REV && .venv/bin/python scripts/overhead.py --against /tmp/before
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PROMPT = "Write a long story about a dragon who learns to write computer programs."


def one_run(
    model: Path, speculative: bool, k: int, n: int, checkout: Path = ROOT, threads: int = 1
) -> dict[str, float]:
    """One `tandem run --json` process of the code in `checkout`; its stats."""
    mode = ["--draft", str(model), "--drafter", "model", "--no-adaptive", "--draft-max", str(k)]
    # Exact output (where a checkout has it) caps K at 2 on repacked weights, which would make
    # this a measure of shorter rounds: both checkouts verify K tokens as before it existed.
    if "--no-exact" in (checkout / "app" / "tandem" / "cli" / "options.py").read_text(encoding="utf-8"):
        mode.append("--no-exact")
    cmd = [sys.executable, "-m", "tandem.cli.main", "run", "--threads", str(threads), "--target", str(model)]
    cmd += [*(mode if speculative else ["--baseline"]), "-n", str(n), "--json", PROMPT]
    # Its own code: the venv's install points at this checkout's app/, which PYTHONPATH overrides.
    env = {**os.environ, "PYTHONPATH": str(checkout / "app")}
    out = subprocess.run(cmd, check=True, capture_output=True, cwd=checkout, env=env).stdout
    stats = json.loads(out)["stats"]
    return _figures(stats)


def one_streamed_run(model: Path, speculative: bool, k: int, n: int) -> dict[str, float]:
    """The same generation in this process, its text streamed through the CLI's own writer
    (coloured, flushed once a round) into a file: the rendering's cost included."""
    from tandem.cli.render import TokenWriter
    from tandem.engine import GenerationConfig, LoadOptions, ModelPair
    from tandem.session.collect import collect
    from tandem.session.prompts import text_prompt

    cfg = GenerationConfig(max_tokens=n, draft_max=k, adaptive=False, drafter="model", exact=False)
    with ModelPair.load(model, model if speculative else None, LoadOptions(n_threads=1)) as pair:
        prompt = text_prompt(pair, PROMPT)
        with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
            stats = collect(pair.generate(prompt, cfg, speculative=speculative), TokenWriter(out, True)).stats
    return _figures(stats.to_dict())


def _figures(stats: dict[str, float]) -> dict[str, float]:
    return {
        "us_per_token": 1e6 * stats["python_overhead"] * stats["decode_s"] / stats["generated"],
        "tokens_per_s": stats["decode_tokens_per_s"],
        "acceptance": stats["acceptance_rate"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("-k", type=int, default=8)
    parser.add_argument("-n", type=int, default=256)
    parser.add_argument("--stream", action="store_true", help="stream the text as `tandem run` does")
    parser.add_argument("--model", type=Path, help="a GGUF to draft for itself (default: SmolLM2 Q4_0)")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="another checkout (e.g. `git worktree add /tmp/old REV`): its `tandem run --json` runs "
        "alternate with this one's, and both are printed",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="llama.cpp threads (1: Python alone on its core; 2+: with the thread governor's reads)",
    )
    args = parser.parse_args()
    if args.stream and args.against is not None:
        parser.error("--stream runs in this process, so only with this checkout's code")
    if args.model is None:
        import model_files

        args.model = model_files.smollm2("Q4_0")
    checkouts = {"": ROOT} if args.against is None else {"this: ": ROOT, f"{args.against}: ": args.against}
    results: dict[str, list[dict[str, float]]] = {
        f"{label}{mode}": [] for label in checkouts for mode in ("speculative", "target only")
    }
    for _ in range(args.runs):
        for label, checkout in checkouts.items():
            for mode, speculative in (("speculative", True), ("target only", False)):
                if args.stream:
                    figures = one_streamed_run(args.model, speculative, args.k, args.n)
                else:
                    figures = one_run(args.model, speculative, args.k, args.n, checkout, args.threads)
                results[f"{label}{mode}"].append(figures)
    how = "streamed by the CLI's writer, in process" if args.stream else "tandem run --json"
    print(
        f"{args.model.name}, K={args.k} fixed, greedy, {args.n} tokens, --threads {args.threads}, {how}, "
        f"{args.runs} runs"
    )
    for name, runs in results.items():
        us = [r["us_per_token"] for r in runs]
        tps = statistics.median(r["tokens_per_s"] for r in runs)
        print(
            f"{name:>12}: outside llama.cpp {statistics.median(us):6.1f} us/token "
            f"(min {min(us):.1f}, max {max(us):.1f}); {tps:.1f} tok/s"
        )


if __name__ == "__main__":
    main()
