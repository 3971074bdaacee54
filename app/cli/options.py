"""Command-line options shared by `run`, `bench` and `chat`, and turning them into engine objects."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from app.engine import DRAFT_MAX_LIMIT, DRAFTERS, GenerationConfig, LoadOptions, SamplerSettings, TandemError

# Measured on the SmolLM2 pair (docs/benchmarks.md): adaptive drafting does best with room to
# go up to 12 on easy text; the best fixed K is 5.
DEFAULT_DRAFT_MAX = 12
DEFAULT_FIXED_K = 5
DEFAULT_P_MIN = 0.0


def add_model_options(p: argparse.ArgumentParser, *, draft_required: bool = False) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--target", metavar="PATH", help="target GGUF (the model whose output you get)")
    g.add_argument("--draft", metavar="PATH", help="draft GGUF (a small model with the same tokenizer)")
    g.add_argument("--ctx", type=int, default=4096, metavar="N", help="context size in tokens (default 4096)")
    g.add_argument(
        "--gpu-layers",
        type=int,
        default=-1,
        metavar="N",
        help="layers to put on the GPU: -1 all (default), 0 none",
    )
    g.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: cores)")


def add_generation_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation")
    g.add_argument(
        "-n", "--max-tokens", type=int, default=256, metavar="N", help="most tokens to generate (256)"
    )
    g.add_argument("--temp", type=float, default=0.0, metavar="T", help="temperature; 0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=40, metavar="K", help="top-k when sampling (40; 0 = off)")
    g.add_argument("--top-p", type=float, default=0.95, metavar="P", help="top-p when sampling (0.95)")
    g.add_argument("--min-p", type=float, default=0.05, metavar="P", help="min-p when sampling (0.05)")
    g.add_argument("--seed", type=int, default=None, metavar="S", help="random seed for sampling")
    g.add_argument(
        "--draft-max",
        type=int,
        default=None,
        metavar="K",
        help=f"most tokens drafted per round, max {DRAFT_MAX_LIMIT}: adaptive drafting picks 0..K each "
        f"round (default {DEFAULT_DRAFT_MAX}); with --no-adaptive exactly K (default {DEFAULT_FIXED_K})",
    )
    g.add_argument(
        "--drafter",
        choices=DRAFTERS,
        default="auto",
        help="who drafts: the draft model, prompt lookup (continue text found earlier in the context; "
        "no draft model needed), or auto: each round, whichever promises more speed (default)",
    )
    g.add_argument(
        "--no-adaptive",
        dest="adaptive",
        action="store_false",
        help="draft exactly K tokens every round instead of choosing K from measured speed",
    )
    g.add_argument(
        "--p-min",
        type=float,
        default=DEFAULT_P_MIN,
        metavar="P",
        help=f"stop drafting when the draft's confidence drops below P (default {DEFAULT_P_MIN})",
    )
    g.add_argument(
        "--stop", action="append", default=[], metavar="TEXT", help="stop when this text appears (repeatable)"
    )


@dataclass(frozen=True)
class ModelChoice:
    target: Path
    draft: Path | None


def model_choice(args: argparse.Namespace, *, need_draft: bool) -> ModelChoice:
    if not args.target:
        raise TandemError("say which models to use: --target PATH --draft PATH")
    if need_draft and not args.draft:
        raise TandemError(
            "the model drafter needs a draft model: add --draft PATH, or draft from the context "
            "with --drafter lookup (or run the target alone with --baseline)"
        )
    return ModelChoice(Path(args.target).expanduser(), Path(args.draft).expanduser() if args.draft else None)


def load_options(args: argparse.Namespace) -> LoadOptions:
    if args.ctx < 64:
        raise TandemError("--ctx must be at least 64 tokens")
    return LoadOptions(n_ctx=args.ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads)


def generation_config(args: argparse.Namespace) -> GenerationConfig:
    cfg = GenerationConfig(
        max_tokens=args.max_tokens,
        draft_max=args.draft_max
        if args.draft_max is not None
        else (DEFAULT_DRAFT_MAX if args.adaptive else DEFAULT_FIXED_K),
        adaptive=args.adaptive,
        drafter=args.drafter,
        p_min=args.p_min,
        sampler=SamplerSettings(
            temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed
        ),
        stop=tuple(args.stop),
    )
    cfg.validate()
    return cfg
