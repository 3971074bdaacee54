#!/usr/bin/env python3
"""Drafting across tokenizers (engine/drafters/cross.py), measured on this machine.

Both directions of the two real test GGUFs (tests/model_files.py: Gemma 3 270M Q4_K_M, the
SentencePiece 262k vocabulary; SmolLM2-135M-Instruct Q4_1, byte-level BPE 49k), one llama.cpp
thread, the settings alternated prompt by prompt in one run (this machine is shared and noisy):

    target alone   the baseline
    lookup         prompt lookup (the drafter every pair has)
    cross K=4      the cross-tokenizer draft, greedy, 4 target tokens a round, every round
    cross auto     the default: adaptive K, auto (cross + lookup), the costs learnt as it goes
    sampled        temperature 0.8, seed 7 (K=4): the target alone, then the cross draft with
                   one-hot q against the shared vocabulary's real q (on a pair loaded anew)

For each: tokens/s and speed against the target alone, acceptance (drafted tokens accepted),
tokens per target pass, the per-token acceptance alpha (accepted / (accepted + rejections)),
and per cross round the drafting and the translation (re-encoding) time. Then a labelled
prediction for a GPU from the measured alpha and translation time.

    .venv/bin/python scripts/cross_tokenizer.py                 # 6 prompts x 64 tokens
    .venv/bin/python scripts/cross_tokenizer.py --tokens 96 --prompts 4
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

PROMPTS = [
    "The history of the printing press begins in",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "Shopping list:\n- apples\n- bread\n-",
    "Les enfants jouent dans le jardin et",
    "Count: 1, 2, 3, 4, 5,",
    "Dear Sir or Madam,\n\nI am writing to",
]
GREEDY_SETTINGS = ("target alone", "lookup", "cross K=4", "cross auto")
# Sampled runs read logits, which switches a model's in-graph greedy sampler off for good
# (model.py): they run after the greedy ones, on a pair of their own.
SAMPLED_SETTINGS = ("sampled alone", "sampled one-hot", "sampled shared-q")
SETTINGS = GREEDY_SETTINGS + SAMPLED_SETTINGS


def expected(alpha: float, k: int) -> float:
    return k + 1.0 if alpha >= 1.0 else (1 - alpha ** (k + 1)) / (1 - alpha)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=len(PROMPTS))
    args = ap.parse_args()

    import model_files
    from tandem.engine import GenerationConfig, LoadOptions, ModelPair, SamplerSettings
    from tandem.engine.drafters import cross
    from tandem.engine.drafters.policy import CostModel
    from tandem.session.collect import Outcome, collect

    gemma, smol = model_files.gemma3_270m(), model_files.smollm2_q4_1()
    print(f"{platform.processor() or platform.machine()}, 1 llama.cpp thread, {args.tokens} tokens a prompt")
    for target, draft in ((gemma, smol), (smol, gemma)):
        print(f"\n== target {target.name}, draft {draft.name}")
        runs: dict[str, list[Outcome]] = defaultdict(list)
        costs = CostModel()  # the adaptive setting's, kept across its prompts as the app keeps it
        greedy = SamplerSettings(temperature=0.0)
        sampled = SamplerSettings(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, seed=7)
        fixed = {"draft_max": 4, "adaptive": False, "max_tokens": args.tokens}
        configs = {
            "target alone": GenerationConfig(sampler=greedy, max_tokens=args.tokens),
            "lookup": GenerationConfig(drafter="lookup", sampler=greedy, **fixed),  # type: ignore[arg-type]
            "cross K=4": GenerationConfig(drafter="cross", sampler=greedy, **fixed),  # type: ignore[arg-type]
            "cross auto": GenerationConfig(sampler=greedy, max_tokens=args.tokens),
            "sampled alone": GenerationConfig(sampler=sampled, max_tokens=args.tokens),
            "sampled one-hot": GenerationConfig(drafter="cross", sampler=sampled, **fixed),  # type: ignore[arg-type]
            "sampled shared-q": GenerationConfig(drafter="cross", sampler=sampled, **fixed),  # type: ignore[arg-type]
        }
        for settings in (GREEDY_SETTINGS, SAMPLED_SETTINGS):
            pair = ModelPair.load(target, draft, LoadOptions(n_ctx=1024, n_threads=1))
            for text in PROMPTS[: args.prompts]:
                prompt = pair.raw_prompt(text)
                for setting in settings:
                    cross.SHARED_Q = setting == "sampled shared-q"
                    alone = setting in ("target alone", "sampled alone")
                    events = pair.generate(
                        prompt,
                        configs[setting],
                        speculative=not alone,
                        costs=costs if setting == "cross auto" else CostModel(),
                    )
                    runs[setting].append(collect(events))
            if settings is GREEDY_SETTINGS:
                # Draft tokens per target token for the same text (the target alone's answers).
                texts = [o.text for o in runs["target alone"]]
                assert pair.draft is not None
                ratio = sum(len(pair.draft.tokenize(t, add_special=False)) for t in texts) / max(
                    1, sum(len(pair.target.tokenize(t, add_special=False)) for t in texts)
                )
            pair.close()
        cross.SHARED_Q = False

        def rate_of(setting: str, runs: dict[str, list[Outcome]] = runs) -> float:
            return sum(o.stats.generated for o in runs[setting]) / sum(
                o.stats.decode_s for o in runs[setting]
            )

        columns = ("tok/s", "speed", "accept", "tok/pass", "alpha", "draft ms/rd", "transl ms/rd")
        print(f"{'setting':18} " + " ".join(f"{c:>{max(6, len(c))}}" for c in columns))
        alphas: dict[str, float] = {}
        for setting in SETTINGS:
            outs = runs[setting]
            gen = sum(o.stats.generated for o in outs)
            rate = rate_of(setting)
            base = rate_of("sampled alone" if setting in SAMPLED_SETTINGS else "target alone")
            drafted = sum(o.stats.drafted for o in outs)
            accepted = sum(o.stats.accepted for o in outs)
            rounds = [r for o in outs for r in o.rounds]
            rejections = sum(1 for r in rounds if r.drafted and r.accepted < r.drafted)
            alpha = accepted / (accepted + rejections) if accepted + rejections else 0.0
            alphas[setting] = alpha
            crossed = [r for r in rounds if r.drafter == "cross"]
            draft_ms = statistics.fmean(r.draft_s for r in crossed) * 1e3 if crossed else 0.0
            tr_ms = statistics.fmean(r.translate_s for r in crossed) * 1e3 if crossed else 0.0
            passes = gen / sum(o.stats.rounds for o in outs)
            print(
                f"{setting:18} {rate:6.1f} {rate / base:5.2f}x {accepted / drafted if drafted else 0:6.0%} "
                f"{passes:8.2f} {alpha:6.2f} {draft_ms:11.1f} {tr_ms:12.2f}"
            )
            if setting == "cross K=4":
                translate_ms = tr_ms
        # A GPU prediction (labelled: not measured): a target step of 30 ms (a 27B-class model),
        # a draft step c of it per draft token (`ratio` draft tokens per target token), a verify
        # of K+1 tokens at v = 1.1 steps, and the translation as measured here (it runs on the
        # CPU either way); the best K for each c.
        a = alphas["cross K=4"]
        print(f"draft tokens per target token: {ratio:.2f}; per-token acceptance alpha (cross K=4) {a:.2f}")
        for c in (0.03, 0.05, 0.1, 0.2):
            overhead = 1.1 + translate_ms / 30.0  # v, and the translation in target steps
            speeds = {k: expected(a, k) / (k * ratio * c + overhead) for k in range(1, 13)}
            best = max(speeds, key=lambda k: speeds[k])
            print(
                f"PREDICTED (GPU, not measured): c {c:.2f} -> K={best}, E={expected(a, best):.2f} tokens a "
                f"pass, about {speeds[best]:.2f}x the target alone (step 30 ms, v 1.1, translation "
                f"{translate_ms:.2f} ms a round)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
