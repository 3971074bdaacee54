#!/usr/bin/env python3
"""What exact output costs, and whether it holds: docs/results/history.md, "Exact output".

    .venv/bin/python scripts/exact_cost.py rows      # one decode of n = 1..13 rows, per kernels
    .venv/bin/python scripts/exact_cost.py rows --kv 600
    .venv/bin/python scripts/exact_cost.py prefill   # a 256-token prefill, per kernels
    .venv/bin/python scripts/exact_cost.py answers   # whole answers: exact against --no-exact

On the Qwen2.5-Coder 1.5B Q4_K_M target (0.5B draft) unless --target/--draft name others;
every setting is timed in turn, round-robin, in one process, and medians are reported.

`rows` and `prefill` compare four sets of kernels on one decode of the target: llama.cpp's
default (weights repacked for this CPU, tiled K-quant matmuls), ggml's reference kernels on the
same weights (what exact output uses), and, loaded a second time without repacking
(`use_extra_bufts = false`, the other way to exactness), both again. Each decode asks for every
row, with llama.cpp's in-graph greedy sampler, as a greedy verify batch does.

`answers` runs each prompt as the target alone and speculatively (adaptive K, and K = 4), each
exact and not, and prints tokens/s and where each answer first differs from its own target
alone: exact answers must never differ.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

PROMPTS = {
    "code": "Write a Python function that checks whether a string is a palindrome.",
    "story": "Write a short story about a lighthouse keeper and a storm.",
    "explanation": "Explain the difference between a process and a thread.",
}
CODE = "def quicksort(arr):\n    if len(arr) < 2:\n        return arr\n    pivot = arr[0]\n" * 60


def _timed(fn: Callable[[], object], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _models(target: Path) -> dict[str, object]:
    """The target loaded twice: as llama.cpp loads it, and without repacked weights."""
    from tandem.engine import LoadedModel, LoadOptions
    from tandem.engine.llama.llama_lib import llama_cpp

    plain = llama_cpp.llama_model_default_params

    def no_repack() -> object:
        params = plain()
        params.use_extra_bufts = False
        return params

    repacked = LoadedModel(target, LoadOptions(n_ctx=2048))
    llama_cpp.llama_model_default_params = no_repack
    try:
        not_repacked = LoadedModel(target, LoadOptions(n_ctx=2048))
    finally:
        llama_cpp.llama_model_default_params = plain
    for m in (repacked, not_repacked):
        assert m.exact_plan.possible, m.exact_plan.why_not  # (binds the reference kernels)
    return {"repacked": repacked, "not repacked": not_repacked}


SETTINGS = [  # (name, which load, reference kernels)
    ("default: repacked, tiled", "repacked", False),
    ("exact: repacked, reference", "repacked", True),
    ("not repacked, tiled", "not repacked", False),
    ("not repacked, reference", "not repacked", True),
]


def rows(target: Path, kv: int, reps: int) -> None:
    models = _models(target)
    toks = models["repacked"].tokenize(CODE)  # type: ignore[attr-defined]
    assert len(toks) > kv + 13
    for m in models.values():
        m.decode(toks[:kv], "none")  # type: ignore[attr-defined]
    ns = list(range(1, 14))
    times: dict[str, dict[int, list[float]]] = {s[0]: {n: [] for n in ns} for s in SETTINGS}
    for _ in range(reps):
        for name, which, ref in SETTINGS:
            m: object = models[which]
            m.exact = ref  # type: ignore[attr-defined]
            for n in ns:

                def one(m: object = m, n: int = n) -> None:
                    m.decode_greedy(toks[kv : kv + n], "all")  # type: ignore[attr-defined]
                    m.truncate(kv)  # type: ignore[attr-defined]

                times[name][n] += _timed(one, 3)
    print(f"{target.name}: ms per decode of n rows after {kv} cached tokens (median of {3 * reps})")
    print(f"{'kernels':38}" + "".join(f"{n:>7}" for n in ns))
    default = times[SETTINGS[0][0]]
    for name, *_ in SETTINGS:
        print(f"{name:38}" + "".join(f"{1e3 * statistics.median(times[name][n]):7.1f}" for n in ns))
    for name, *_ in SETTINGS[1:]:
        ratios = [statistics.median(times[name][n]) / statistics.median(default[n]) for n in ns]
        print(f"{'  / default: ' + name.split(':')[0]:38}" + "".join(f"{r:7.2f}" for r in ratios))


def prefill(target: Path, n: int, reps: int) -> None:
    models = _models(target)
    toks = models["repacked"].tokenize(CODE)[:n]  # type: ignore[attr-defined]
    times: dict[str, list[float]] = {s[0]: [] for s in SETTINGS}
    for _ in range(reps):
        for name, which, ref in SETTINGS:
            m: object = models[which]
            m.exact = ref  # type: ignore[attr-defined]  # (its last row is read: all of it with ref)

            def once(m: object = m) -> None:
                m.reset()  # type: ignore[attr-defined]
                m.decode(toks, "last")  # type: ignore[attr-defined]

            times[name] += _timed(once, 1)
    print(f"{target.name}: a {n}-token prefill, s (median of {reps})")
    base = statistics.median(times[SETTINGS[0][0]])
    for name, *_ in SETTINGS:
        t = statistics.median(times[name])
        print(f"  {name:28} {t:6.3f}  ({t / base:.2f}x)")


def answers(target: Path, draft: Path, tokens: int, reps: int) -> None:
    from run_helpers import run
    from tandem.engine import ChatMessage, LoadOptions, ModelPair
    from tandem.engine.drafters.policy import CostModel

    pair = ModelPair.load(target, draft, LoadOptions(n_ctx=4096))
    print(f"exact plan: {pair.target.exact_plan}")
    prompts = {k: pair.chat_prompt([ChatMessage("user", v)]) for k, v in PROMPTS.items()}
    modes = {  # name: (speculative, run's keywords)
        "target alone": (False, {}),
        "adaptive": (True, {"adaptive": True, "draft_max": 12}),
        "K = 4": (True, {"draft_max": 4}),
    }
    got: dict[tuple[str, str, bool], list[tuple[float, list[int], float, int]]] = {}
    for _ in range(reps):
        for name, prompt in prompts.items():
            for mode, (spec, kw) in modes.items():
                for exact in (False, True):
                    extra = {"costs": CostModel()} if kw.get("adaptive") else {}
                    r = run(pair, prompt, speculative=spec, max_tokens=tokens, exact=exact, **kw, **extra)
                    s = r.stats
                    got.setdefault((name, mode, exact), []).append(
                        (s.decode_tokens_per_s, r.ids, s.acceptance_rate, s.draft_max)
                    )

    def first_difference(a: list[int], b: list[int]) -> int | None:
        return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)

    print(f"{tokens} tokens, greedy, {reps} runs each; 'differs at': from its own target alone")
    for name in prompts:
        for exact in (False, True):
            alone = got[(name, "target alone", exact)][0][1]
            for mode in modes:
                runs = got[(name, mode, exact)]
                tps = statistics.median(x[0] for x in runs)
                diffs = [first_difference(x[1], alone) for x in runs]
                label = f"{name}, {mode}, {'exact' if exact else 'no-exact'}"
                print(
                    f"  {label:40} {tps:6.2f} tok/s  K {runs[0][3]:2d}  acceptance "
                    f"{statistics.median(x[2] for x in runs):.2f}  differs at {diffs}"
                )


def main() -> int:
    import model_files

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("rows", "prefill", "answers"))
    ap.add_argument("--target", type=Path, default=None, help="default: Qwen2.5-Coder-1.5B-Instruct Q4_K_M")
    ap.add_argument("--draft", type=Path, default=None, help="default: Qwen2.5-Coder-0.5B-Instruct Q4_K_M")
    ap.add_argument("--kv", type=int, default=40, help="rows: tokens cached before the decode")
    ap.add_argument("--tokens", type=int, default=64, help="prefill: its length; answers: their length")
    ap.add_argument("--reps", type=int, default=4)
    args = ap.parse_args()
    target, draft = args.target, args.draft
    if target is None or (draft is None and args.what == "answers"):
        t, d = model_files.qwen_coder_pair()
        target, draft = target or t, draft or d
    if args.what == "rows":
        rows(target, args.kv, args.reps)
    elif args.what == "prefill":
        prefill(target, args.tokens if args.tokens != 64 else 256, args.reps)
    else:
        answers(target, draft, args.tokens, args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
