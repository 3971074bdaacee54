#!/usr/bin/env python3
"""What the target's own draft heads (MTP) cost, on a real-shaped random-weight model.

Writes (once, into the test-model cache) a random-weight model with approximately the shape
of Qwen3.5-0.8B or -2B (its 248,320-token LM head included, F16) and one MTP block, then runs,
alternating, the target alone and speculative generations drafted by its heads at fixed K,
one llama.cpp thread, and reports in units of one plain target step (measured by the engine
itself, RoundEvent):

    c_first   a round's first head step: catching up on the tokens the target accepted since
              the last draft, plus the first guess, in one batch
    c         each further head step (one decoder block and the LM head)
    v(n)      the target's verify batch of n tokens

Random weights say nothing about how often the heads are right, so the speedup is PREDICTED
from these costs for a range of acceptance rates, E(a, K) / (c_first + (K - 1) c + v(K + 1)),
with the best K for each.

    .venv/bin/python scripts/mtp_cost.py                 # the 0.8B shape, 48 tokens, 3 runs
    .venv/bin/python scripts/mtp_cost.py --shape 2b --runs 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

KS = (1, 2, 3, 4)
ALPHAS = (0.5, 0.6, 0.7, 0.8, 0.9)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=("0.8b", "2b"), default="0.8b")
    ap.add_argument("--runs", type=int, default=3, help="alternations of every setting")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    from round_times import alternate

    import model_files
    from tandem.engine import LoadOptions, ModelPair
    from tandem.engine.drafters.heads.mtp import head_of
    from tandem.engine.drafters.policy import expected_tokens

    shape = model_files.QWEN35_SHAPES[args.shape]
    print(f"writing/reading the {args.shape}-shaped random model (once: a few GB)...", flush=True)
    path = model_files.tiny_mtp_model(f"qwen35-{args.shape}-shaped-mtp", seed=5, shape=shape)
    opts = LoadOptions(n_ctx=1024, n_threads=args.threads, n_gpu_layers=0)
    prompt_text = "Write a long story about the sea, the wind and an old lighthouse keeper. " * 4
    with ModelPair.load(path, None, opts) as pair:
        head = head_of(pair.target)
        assert head is not None, "the heads did not load"
        prompt = pair.raw_prompt(prompt_text)
        print(
            f"{path.name}: {pair.target.size_bytes / 2**30:.2f} GiB, n_embd {shape.n_embd}, "
            f"{shape.n_layer} layers + 1 MTP block, vocabulary {pair.target.n_vocab:,}; "
            f"{args.threads} thread(s), prompt {len(prompt)} tokens, {args.tokens} tokens per run"
        )
        t = alternate(pair, prompt, "mtp", KS, args.tokens, args.runs)
    step = t.step
    c_first = statistics.median(x for k in KS for x in t.first[k]) / step
    c = statistics.median(x for k in KS for x in t.rest[k]) / step
    v = {k + 1: statistics.median(t.verify[k]) / step for k in KS}
    print(f"\nplain target step: {step * 1000:.1f} ms (median of {len(t.steps)})")
    print(
        f"c_first = {c_first:.3f}  (first head step, median catch-up {statistics.median(t.caught):.0f} "
        f"token(s))   c = {c:.3f}  (each further head step)"
    )
    print("v(n) = " + "  ".join(f"v({n}) {x:.2f}" for n, x in v.items()))
    print("\nPREDICTED speedup over the target alone (acceptance a per draft token, best K of 1-4):")
    for a in ALPHAS:
        best = max((expected_tokens(a, k) / (c_first + (k - 1) * c + v[k + 1]), k) for k in KS)
        print(f"  a = {a:.1f}: {best[0]:.2f}x at K = {best[1]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
