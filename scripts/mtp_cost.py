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

    import model_files
    from tandem.engine import GenerationConfig, LoadOptions, ModelPair
    from tandem.engine.draft_policy import expected_tokens
    from tandem.engine.mtp import heads_of
    from tandem.session.collect import collect

    shape = model_files.QWEN35_SHAPES[args.shape]
    print(f"writing/reading the {args.shape}-shaped random model (once: a few GB)...", flush=True)
    path = model_files.tiny_mtp_model(f"qwen35-{args.shape}-shaped-mtp", seed=5, shape=shape)
    opts = LoadOptions(n_ctx=1024, n_threads=args.threads, n_gpu_layers=0)
    prompt_text = "Write a long story about the sea, the wind and an old lighthouse keeper. " * 4
    steps: list[float] = []
    first: dict[int, list[float]] = {k: [] for k in KS}
    rest: dict[int, list[float]] = {k: [] for k in KS}
    verify: dict[int, list[float]] = {k: [] for k in KS}
    caught: list[int] = []
    with ModelPair.load(path, None, opts) as pair:
        head = heads_of(pair.target)
        assert head is not None, "the heads did not load"
        prompt = pair.raw_prompt(prompt_text)
        print(
            f"{path.name}: {pair.target.size_bytes / 2**30:.2f} GiB, n_embd {shape.n_embd}, "
            f"{shape.n_layer} layers + 1 MTP block, vocabulary {pair.target.n_vocab:,}; "
            f"{args.threads} thread(s), prompt {len(prompt)} tokens, {args.tokens} tokens per run"
        )
        for run in range(args.runs):
            base = collect(pair.generate(prompt, GenerationConfig(max_tokens=args.tokens), speculative=False))
            # A plain round's verify_s is one target step (the first runs cold: skipped).
            steps += [r.verify_s for r in base.rounds[1:]]
            for k in KS:
                cfg = GenerationConfig(max_tokens=args.tokens, drafter="mtp", adaptive=False, draft_max=k)
                out = collect(pair.generate(prompt, cfg))
                for r in out.rounds[1:]:
                    if r.drafted == k:
                        first[k].append(r.first_draft_s)
                        if r.draft_passes > 1:
                            rest[k].append((r.draft_s - r.first_draft_s) / (r.draft_passes - 1))
                        verify[k].append(r.verify_s - r.checkpoint_s - r.restore_s)
                        caught.append(r.caught_up)
            print(f"  run {run + 1}/{args.runs} done", flush=True)
    step = statistics.median(steps)
    c_first = statistics.median(x for k in KS for x in first[k]) / step
    c = statistics.median(x for k in KS for x in rest[k]) / step
    v = {k + 1: statistics.median(verify[k]) / step for k in KS}
    print(f"\nplain target step: {step * 1000:.1f} ms (median of {len(steps)})")
    print(
        f"c_first = {c_first:.3f}  (first head step, median catch-up {statistics.median(caught):.0f} "
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
