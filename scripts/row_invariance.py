#!/usr/bin/env python3
"""Does a row's result depend on its batch? The logits of tokens decoded one at a time against
the same tokens decoded together in batches of 2..N rows, on the backend the model runs on.

    .venv-vulkan/bin/python scripts/row_invariance.py MODEL.gguf            # default kernels
    .venv-vulkan/bin/python scripts/row_invariance.py MODEL.gguf --exact    # exact output's
    GGML_VK_VISIBLE_DEVICES=0 ... (lavapipe: ggml skips a CPU-type Vulkan device unless told)

Each line: a batch size, "=" when every row of the batch equals that token decoded alone bit
for bit, else "!" and the largest difference in logit, and in how many rows of the batch the
argmax differs. `--kv` tokens are cached first (the view of the KV cache is padded to 256
cells: past 256 the batch sees more cells than the row alone did). Flash attention is on
unless --no-flash-attn; every layer on the GPU (the engine's default where there is one).

`--time`: what exact output costs instead: a decode of 1, 5 and 9 rows (the target alone's
step, verifies at K = 4 and 8) with exact output's kernels and without, alternated, medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TEXT = "def quicksort(arr):\n    if len(arr) < 2:\n        return arr\n    pivot = arr[0]\n" * 80


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--exact", action="store_true", help="exact output's kernels (where possible)")
    ap.add_argument("--kv", type=int, default=40, help="tokens cached before the batches")
    ap.add_argument("--rows", type=int, default=16, help="the largest batch")
    ap.add_argument("--no-flash-attn", action="store_true")
    ap.add_argument("--time", action="store_true", help="time exact against default kernels instead")
    ap.add_argument("--reps", type=int, default=15, help="--time: decodes per setting and size")
    args = ap.parse_args()

    from tandem.engine import LoadedModel, LoadOptions

    options = LoadOptions(n_ctx=2048, flash_attn=0 if args.no_flash_attn else 1, greedy_in_graph=False)
    m = LoadedModel(args.model, options)
    plan = m.exact_plan
    verdict = plan.why_not or f"possible, rows {plan.rows}"
    print(f"{args.model.name} on {m.device_label}; exact output: {verdict}")
    if args.exact and not plan.possible:
        return 1
    if args.time:
        return timed(m, args.kv, args.reps)
    m.exact = args.exact
    toks = m.tokenize(TEXT)
    assert len(toks) > args.kv + args.rows, "the text is too short for --kv"
    m.decode(toks[: args.kv], "none")
    alone = []
    for i in range(args.rows):
        out = m.decode(toks[args.kv + i : args.kv + i + 1], "all")
        assert out is not None
        alone.append(np.array(out[0]))
    m.truncate(args.kv)
    for b in range(1, args.rows + 1):
        out = m.decode(toks[args.kv : args.kv + b], "all")
        assert out is not None
        rows = np.array(out)
        m.truncate(args.kv)
        diff = max(float(np.abs(rows[i] - alone[i]).max()) for i in range(b))
        flips = sum(int(rows[i].argmax() != alone[i].argmax()) for i in range(b))
        same = all(np.array_equal(rows[i], alone[i]) for i in range(b))
        mark = "=" if same else "!"
        print(f"  {b:2d} rows  {mark}  max |diff| {diff:.4g}  argmax differs in {flips} row(s)")
    m.close()
    return 0


def timed(m: object, kv: int, reps: int) -> int:
    """Median ms of a decode of n rows, exact output's kernels against the default ones."""
    if not m.exact_plan.possible:  # type: ignore[attr-defined]
        return 1
    toks = m.tokenize(TEXT)  # type: ignore[attr-defined]
    m.decode(toks[:kv], "none")  # type: ignore[attr-defined]
    sizes = (1, 5, 9)
    times: dict[tuple[bool, int], list[float]] = {(e, n): [] for e in (False, True) for n in sizes}
    for rep in range(reps + 1):
        for exact in (False, True):
            m.exact = exact  # type: ignore[attr-defined]
            for n in sizes:
                t0 = time.perf_counter()
                m.decode(toks[kv : kv + n], "all")  # type: ignore[attr-defined]
                if rep:  # (the first round compiles the shaders)
                    times[(exact, n)].append(time.perf_counter() - t0)
                m.truncate(kv)  # type: ignore[attr-defined]
    print(f"ms per decode after {kv} cached tokens (median of {reps}, alternated)")
    for n in sizes:
        off, on = (statistics.median(times[(e, n)]) * 1e3 for e in (False, True))
        print(f"  {n:2d} rows  default {off:8.2f}  exact {on:8.2f}  exact/default {on / off:.3f}")
    m.close()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
