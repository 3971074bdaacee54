#!/usr/bin/env python3
"""Tandem on a busy machine: speed under neighbours, and the honesty of the speedup it shows.

    .venv/bin/python scripts/busy_bench.py threads [--runs 5] [--against REF] [--json OUT]
    .venv/bin/python scripts/busy_bench.py speedup [--runs 3] [--json OUT]
    .venv/bin/python scripts/busy_bench.py idle [--runs 7] [--against REF] [--spins 300,3000]

`threads`: the target alone (`tandem run --baseline -n 64`, default settings), alternated over
three conditions: alone; two such processes at once; one CPU-bound process per core beside it.
The same for `--threads 1`, for llama.cpp's own `llama-bench` built from the same llama.cpp
(scripts/llama_tools.py), and with `--against REF` for Tandem as committed at REF (its app/ on
PYTHONPATH: the same venv, the same llama.cpp). Prints each one's median tok/s and its ratio
to its own idle speed.

`speedup`: for the SmolLM2 pair (F16 drafted by its Q4_1) and a pair where drafting does not
pay (Gemma 3 270M F16 drafted by SmolLM2 across tokenizers), `tandem run --json` speculative and
`--baseline` alternated, idle and with one CPU-bound process per core starting mid-answer (the
same delay after launch for both): the ratio of their tok/s against the `stats.speedup` the
speculative run showed, and whether it ever exceeded the tokens per pass.

`idle`: the idle speed and two at once, for this tree, the thread governor off
(`TANDEM_ADAPTIVE_THREADS=off`), each `GOMP_SPINCOUNT` of `--spins` and Tandem at REF,
alternated round by round: the medians, and each one's paired ratio to REF's (or this tree's).

Time it alone: nothing else running (it is the neighbour itself). Models: scripts/test_models.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

import llama_tools  # noqa: E402

import model_files  # noqa: E402

PROMPT = "Write a short story about a robot who learns to paint."
SPEEDUP_PROMPTS = (
    "Write a short story about a robot who learns to paint.",
    "Write a Python function that merges two sorted lists, with a docstring and tests.",
    "Explain how a hash map works and why lookups are fast on average.",
)
CONDITIONS = ("alone", "two at once", "a busy process per core")
TIMEOUT_S = 600


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@contextlib.contextmanager
def neighbours(n: int, delay: float = 0.0) -> Iterator[None]:
    """n CPU-bound processes (Python busy loops), started after `delay` seconds."""
    code = f"import time; time.sleep({delay}); exec('while True: pass')"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def tandem_cmd(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "tandem.cli.main", "run", "--json", *args]


# Each Tandem a data directory of its own: what drafting learnt (session/learnt.py) is not
# carried from one measured run to the next, nor from one side of an A/B to the other.
_DATA = tempfile.TemporaryDirectory(prefix="busy-bench-")


def run_tandem(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    own = {**(env if env is not None else os.environ), "XDG_DATA_HOME": tempfile.mkdtemp(dir=_DATA.name)}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=own)


def stats_of(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"tandem exited with {proc.returncode}")
    stats: dict[str, Any] = json.loads(out)["stats"]
    return stats


def llama_bench_tps(binary: Path, model: Path, tokens: int, threads: int) -> subprocess.Popen[str]:
    cmd = [
        str(binary),
        "-m",
        str(model),
        "-p",
        "0",
        "-n",
        str(tokens),
        "-t",
        str(threads),
        "-r",
        "1",
        "-o",
        "json",
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def bench_tps(proc: subprocess.Popen[str]) -> float:
    out, _ = proc.communicate(timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"llama-bench exited with {proc.returncode}")
    rows = json.loads(out)
    return float(rows[0]["avg_ts"])


# ----------------------------------------------------------------------------- threads
class Subject:
    def __init__(self, name: str, start: Any, read: Any) -> None:
        self.name, self.start, self.read = name, start, read


@contextlib.contextmanager
def landed_tree(ref: str) -> Iterator[Path]:
    """A worktree of `ref` (its app/ goes on PYTHONPATH), removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix="tandem-landed-"))
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tmp), ref], check=True)
    try:
        yield tmp
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def threads_bench(args: argparse.Namespace) -> dict[str, Any]:
    model = model_files.smollm2("F16")
    base = ["--target", str(model), "--baseline", "-n", str(args.tokens), PROMPT]
    bench_bin = llama_tools.build("llama-bench")["llama-bench"]
    default_threads = min(8, cpus() if cpus() <= 4 else cpus() // 2)
    env_landed: dict[str, str] | None = None
    with contextlib.ExitStack() as stack:
        subjects = [
            Subject(
                "tandem", lambda: run_tandem(tandem_cmd(base)), lambda p: stats_of(p)["decode_tokens_per_s"]
            ),
            Subject(
                "tandem --threads 1",
                lambda: run_tandem(tandem_cmd(["--threads", "1", *base])),
                lambda p: stats_of(p)["decode_tokens_per_s"],
            ),
        ]
        if args.against:
            tree = stack.enter_context(landed_tree(args.against))
            env_landed = dict(os.environ, PYTHONPATH=str(tree / "app"))
            subjects.append(
                Subject(
                    f"tandem at {args.against}",
                    lambda: run_tandem(tandem_cmd(base), env_landed),
                    lambda p: stats_of(p)["decode_tokens_per_s"],
                )
            )
        subjects.append(
            Subject(
                f"llama-bench -t {default_threads}",
                lambda: llama_bench_tps(bench_bin, model, args.tokens, default_threads),
                bench_tps,
            )
        )
        results: dict[str, dict[str, list[float]]] = {s.name: {c: [] for c in CONDITIONS} for s in subjects}
        for r in range(args.runs):
            for cond in CONDITIONS:
                for s in subjects:
                    if cond == "alone":
                        results[s.name][cond].append(s.read(s.start()))
                    elif cond == "two at once":
                        a, b = s.start(), s.start()
                        results[s.name][cond].append(statistics.fmean([s.read(a), s.read(b)]))
                    else:
                        with neighbours(cpus()):
                            time.sleep(0.2)
                            results[s.name][cond].append(s.read(s.start()))
            print(f"run {r + 1}/{args.runs} done", file=sys.stderr)
    table = {}
    for name, by_cond in results.items():
        idle = statistics.median(by_cond["alone"])
        table[name] = {
            c: {"tok_s": statistics.median(v), "ratio": statistics.median(v) / idle, "all": v}
            for c, v in by_cond.items()
        }
    print(f"\n{'':<26}" + "".join(f"{c:>28}" for c in CONDITIONS))
    for name, row in table.items():
        cells = "".join(f"{row[c]['tok_s']:>19.1f} ({row[c]['ratio']:.2f}x)" for c in CONDITIONS)
        print(f"{name:<26}{cells}")
    if args.against:
        mine, landed = table["tandem"]["alone"]["all"], table[f"tandem at {args.against}"]["alone"]["all"]
        print(
            f"\nidle speed against {args.against}: {statistics.median(mine) / statistics.median(landed):.3f}x"
        )
    return {"model": str(model), "tokens": args.tokens, "runs": args.runs, "results": table}


# ----------------------------------------------------------------------------- speedup honesty
def speedup_bench(args: argparse.Namespace) -> dict[str, Any]:
    pairs = {
        "smollm2 F16 + Q4_1": [
            "--target",
            str(model_files.smollm2("F16")),
            "--draft",
            str(model_files.smollm2("Q4_1")),
        ],
        "gemma3 F16 + smollm2 (cross)": [
            "--target",
            str(model_files.gemma3_270m_as("F16")),
            "--draft",
            str(model_files.smollm2("Q4_1")),
        ],
    }
    report: dict[str, Any] = {}
    for pair, files in pairs.items():
        for cond in ("idle", "a neighbour per core from mid-answer"):
            spec_tps: list[float] = []
            base_tps: list[float] = []
            shown: list[float] = []
            per_pass: list[float] = []
            over = 0
            for _ in range(args.runs):
                for prompt in SPEEDUP_PROMPTS:
                    common = [*files, "-n", str(args.tokens), prompt]
                    delay = None
                    for mode in ("spec", "base"):
                        cmd = tandem_cmd([*common, "--baseline"] if mode == "base" else common)
                        if cond == "idle":
                            stats = stats_of(run_tandem(cmd))
                        else:
                            if delay is None:  # launch + prefill + a third of the answer, timed idle
                                t0 = time.perf_counter()
                                idle = stats_of(run_tandem(cmd))
                                delay = time.perf_counter() - t0 - idle["decode_s"] * 0.67
                            with neighbours(cpus(), delay):
                                stats = stats_of(run_tandem(cmd))
                        if mode == "spec":
                            spec_tps.append(stats["decode_tokens_per_s"])
                            if stats["speedup"] is not None:
                                shown.append(stats["speedup"])
                                per_pass.append(stats["tokens_per_round"])
                                over += stats["speedup"] > stats["tokens_per_round"] + 1e-9
                        else:
                            base_tps.append(stats["decode_tokens_per_s"])
            ratio = statistics.median(spec_tps) / statistics.median(base_tps)
            median_shown = statistics.median(shown)
            report[f"{pair} · {cond}"] = {
                "measured_ratio": ratio,
                "stats_speedup_median": median_shown,
                "error": median_shown / ratio - 1,
                "runs_above_tokens_per_pass": over,
                "spec_tok_s": spec_tps,
                "base_tok_s": base_tps,
                "shown": shown,
                "tokens_per_pass": per_pass,
            }
            print(
                f"{pair:<30} {cond:<40} measured {ratio:.2f}x, shown {median_shown:.2f}x "
                f"({100 * (median_shown / ratio - 1):+.0f}%), above tok/pass: {over}",
                flush=True,
            )
    return {"tokens": args.tokens, "runs": args.runs, "results": report}


def idle_bench(args: argparse.Namespace) -> dict[str, Any]:
    model = model_files.smollm2("F16")
    cmd = tandem_cmd(["--target", str(model), "--baseline", "-n", str(args.tokens), PROMPT])
    variants: dict[str, dict[str, str]] = {
        "tandem": dict(os.environ),
        "governor off": dict(os.environ, TANDEM_ADAPTIVE_THREADS="off"),
    }
    for spin in filter(None, args.spins.split(",")):
        variants[f"GOMP_SPINCOUNT={spin}"] = dict(os.environ, GOMP_SPINCOUNT=spin)
    with contextlib.ExitStack() as stack:
        if args.against:
            tree = stack.enter_context(landed_tree(args.against))
            variants[f"tandem at {args.against}"] = dict(os.environ, PYTHONPATH=str(tree / "app"))
        results: dict[str, dict[str, list[float]]] = {v: {"alone": [], "two at once": []} for v in variants}
        for r in range(args.runs):
            for name, env in variants.items():
                results[name]["alone"].append(stats_of(run_tandem(cmd, env))["decode_tokens_per_s"])
                pair = [run_tandem(cmd, env), run_tandem(cmd, env)]
                results[name]["two at once"].append(
                    statistics.fmean(stats_of(p)["decode_tokens_per_s"] for p in pair)
                )
            print(f"run {r + 1}/{args.runs} done", file=sys.stderr)
    ref = f"tandem at {args.against}" if args.against else "tandem"
    print(f"\n{'':<28}{'alone':>12}{'paired vs ' + ref:>32}{'two at once (each)':>22}")
    table = {}
    for name, by in results.items():
        paired = statistics.median(a / b for a, b in zip(by["alone"], results[ref]["alone"], strict=True))
        alone, two = statistics.median(by["alone"]), statistics.median(by["two at once"])
        table[name] = {"alone": alone, "paired_vs_ref": paired, "two_at_once": two, "all": by}
        print(f"{name:<28}{alone:>12.1f}{paired:>31.3f}x{two:>14.1f} ({two / alone:.2f}x)")
    return {"tokens": args.tokens, "runs": args.runs, "reference": ref, "results": table}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode", required=True)
    t = sub.add_parser("threads", help="speed alone, two at once, beside CPU-bound neighbours")
    t.add_argument("--runs", type=int, default=5)
    t.add_argument("--tokens", type=int, default=64)
    t.add_argument("--against", metavar="REF", help="also Tandem as committed at this git ref")
    s = sub.add_parser("speedup", help="stats.speedup against alternated --baseline runs")
    s.add_argument("--runs", type=int, default=3)
    s.add_argument("--tokens", type=int, default=256)
    i = sub.add_parser("idle", help="the idle speed against REF, the governor off, other spin counts")
    i.add_argument("--runs", type=int, default=7)
    i.add_argument("--tokens", type=int, default=64)
    i.add_argument("--against", metavar="REF", help="also Tandem as committed at this git ref")
    i.add_argument("--spins", default="", help="GOMP_SPINCOUNT values to try, comma-separated")
    for p in (t, s, i):
        p.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    bench = {"threads": threads_bench, "speedup": speedup_bench, "idle": idle_bench}[args.mode]
    result = bench(args)
    result["machine"] = {"cpu": _cpu_name(), "cpus": cpus(), "python": platform.python_version()}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
