#!/usr/bin/env python3
r"""Tandem against llama.cpp's own plain decode, as a user compares them: the same file, the same
threads, nothing else running.

Each round runs, in alternating order, llama.cpp's `llama-bench -p 0 -n N` on the target (built
from the vendored llama.cpp: scripts/llama_tools.py), `tandem run --baseline -n N` (the target
alone) and `tandem run -n N` with the pair's defaults on every prompt, each a fresh process (so
every speculative answer is the first this pair ever gave here: nothing is carried between
processes: each gets a data directory of its own, so not even what drafting learnt is kept,
session/learnt.py). It prints the median tok/s of each and, round by round, Tandem's decode
speed over llama-bench's in the same round (the median of those paired ratios, and the lowest
per prompt). `--known`: answers of a pair this machine knows instead, as a user's second and
later `tandem run`: one unmeasured run per prompt first, then every run starts from what the
ones before it learnt.

    .venv/bin/python scripts/vs_llama.py --pair smollm2 --runs 5            # SmolLM2 F16 + Q4_1
    .venv/bin/python scripts/vs_llama.py --pair qwen --runs 3 --json OUT    # Qwen2.5-Coder 1.5B + 0.5B
    .venv/bin/python scripts/vs_llama.py --pair qwen --runs 3 --known       # a pair known here
    .venv/bin/python scripts/vs_llama.py --target T.gguf --draft D.gguf

Time it alone. Models: scripts/test_models.py (--qwen for the Qwen pair).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

import llama_tools  # noqa: E402

import model_files  # noqa: E402

# One prompt per kind of text: prose (little to copy), code, a summary (much to copy).
PROMPTS = {
    "prose": "Write a short story about a robot who learns to paint.",
    "code": "Write a Python function that merges two sorted lists, with a docstring and tests.",
    "summary": (
        "Summarize in three sentences: The Great Barrier Reef is the world's largest coral reef "
        "system, composed of over 2,900 individual reefs and 900 islands stretching for over 2,300 "
        "kilometres over an area of approximately 344,400 square kilometres. The reef is located in "
        "the Coral Sea, off the coast of Queensland, Australia. The Great Barrier Reef can be seen "
        "from outer space and is the world's biggest single structure made by living organisms. This "
        "reef structure is composed of and built by billions of tiny organisms, known as coral "
        "polyps. It supports a wide diversity of life and was selected as a World Heritage Site in "
        "1981. CNN labelled it one of the seven natural wonders of the world in 1997."
    ),
}
TIMEOUT_S = 900


def pair_files(args: argparse.Namespace) -> tuple[Path, Path | None]:
    if args.target:
        return Path(args.target).expanduser(), Path(args.draft).expanduser() if args.draft else None
    if args.pair == "qwen":
        target, draft = model_files.qwen_coder_pair()
        return target, draft
    return model_files.smollm2("F16"), model_files.smollm2("Q4_1")


def default_threads() -> int:
    sys.path.insert(0, str(ROOT / "app"))
    from tandem.engine.llama.threads import usable_cpus

    n = usable_cpus()
    return max(1, min(8, n if n <= 4 else n // 2))  # (engine/model.default_threads, without llama.cpp)


def llama_bench(binary: Path, model: Path, tokens: int, threads: int) -> float:
    cmd = [str(binary), "-m", str(model), "-p", "0", "-n", str(tokens), "-t", str(threads), "-r", "1"]
    out = subprocess.run([*cmd, "-o", "json"], capture_output=True, text=True, timeout=TIMEOUT_S, check=True)
    return float(json.loads(out.stdout)[0]["avg_ts"])


def tandem(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tandem.cli.main", "run", "--json", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=True, env=env)
    stats: dict[str, Any] = json.loads(out.stdout)["stats"]
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", choices=("smollm2", "qwen"), default="smollm2")
    ap.add_argument("--target", help="a target GGUF instead of --pair's")
    ap.add_argument("--draft", help="its draft GGUF (none: prompt lookup and what the target offers)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-n", "--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="both sides' threads (default: Tandem's)")
    ap.add_argument("--prompts", default=",".join(PROMPTS), help="which of: " + ", ".join(PROMPTS))
    ap.add_argument("--no-speculative", action="store_true", help="only the target alone")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--known", action="store_true", help="a pair known here, not first answers (above)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="vs-llama-") as data:
        compare(args, Path(data))


def compare(args: argparse.Namespace, data: Path) -> None:
    def data_env() -> dict[str, str]:
        """Where a `tandem run` keeps what it learnt: one directory for every run (--known), or
        a new one for each (a first answer)."""
        where = data / "known" if args.known else Path(tempfile.mkdtemp(dir=data))
        return {**os.environ, "XDG_DATA_HOME": str(where)}

    target, draft = pair_files(args)
    threads = args.threads or default_threads()
    bench_bin = llama_tools.build("llama-bench")["llama-bench"]
    prompts = {k: PROMPTS[k] for k in args.prompts.split(",")}
    n = ["-n", str(args.tokens)]
    t_args = ["--threads", str(threads)] if args.threads else []
    spec_files = ["--target", str(target), *(["--draft", str(draft)] if draft else [])]

    subjects: dict[str, Any] = {
        "llama-bench": lambda: {"decode_tokens_per_s": llama_bench(bench_bin, target, args.tokens, threads)},
        "tandem --baseline": lambda: tandem(
            ["--target", str(target), "--baseline", *n, *t_args, PROMPTS["prose"]], data_env()
        ),
    }
    if not args.no_speculative:
        for name, prompt in prompts.items():
            subjects[f"tandem ({name})"] = lambda prompt=prompt: tandem(
                [*spec_files, *n, *t_args, prompt], data_env()
            )
            if args.known:  # (learning, not measured)
                tandem([*spec_files, *n, *t_args, prompt], data_env())
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in subjects}
    for r in range(args.runs):
        order = list(subjects) if r % 2 == 0 else list(reversed(subjects))
        for name in order:
            runs[name].append(subjects[name]())
        bench = runs["llama-bench"][-1]["decode_tokens_per_s"]
        row = "  ".join(
            f"{k} {v[-1]['decode_tokens_per_s'] / bench:.3f}" for k, v in runs.items() if k != "llama-bench"
        )
        print(f"round {r + 1}/{args.runs}: llama-bench {bench:.1f} tok/s; against it: {row}", flush=True)

    bench_runs = [x["decode_tokens_per_s"] for x in runs["llama-bench"]]
    table: dict[str, Any] = {}
    print(
        f"\n{target.name}" + (f" + {draft.name}" if draft else "") + f", {threads} threads, -n {args.tokens}"
    )
    print(f"{'':<22}{'tok/s (median)':>16}{'/ llama-bench':>16}{'lowest':>10}  speedup shown")
    for name, stats in runs.items():
        tps = [s["decode_tokens_per_s"] for s in stats]
        ratios = [a / b for a, b in zip(tps, bench_runs, strict=True)]
        shown = [s["speedup"] for s in stats if s.get("speedup")]
        changed = sum(s.get("threads_changed", 0) for s in stats)
        table[name] = {
            "tok_s": statistics.median(tps),
            "vs_llama_bench": statistics.median(ratios),
            "lowest_vs_llama_bench": min(ratios),
            "all_tok_s": tps,
            "speedup_shown": shown,
            "threads_changed": changed,
            "acceptance": [s.get("acceptance_rate") for s in stats],
        }
        shown_txt = f"{statistics.median(shown):.2f}x" if shown else ""
        note = f"  (thread count changed {changed}x)" if changed else ""
        print(
            f"{name:<22}{statistics.median(tps):>16.1f}{statistics.median(ratios):>15.3f}x"
            f"{min(ratios):>9.3f}x  {shown_txt}{note}"
        )
    if args.json:
        result = {
            "target": str(target),
            "draft": str(draft) if draft else None,
            "threads": threads,
            "tokens": args.tokens,
            "runs": args.runs,
            "known": args.known,
            "machine": machine(),
            "results": table,
        }
        args.json.write_text(json.dumps(result, indent=1))


def machine() -> dict[str, Any]:
    cpu = platform.processor()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {"cpu": cpu, "cpus": len(os.sched_getaffinity(0)), "python": platform.python_version()}


if __name__ == "__main__":
    main()
