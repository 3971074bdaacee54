"""Command-line options shared by `run`, `bench` and `chat`, and turning them into engine objects."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.engine import DRAFT_MAX_LIMIT, DRAFTERS, GenerationConfig, LoadOptions, SamplerSettings, TandemError

if TYPE_CHECKING:
    from app.catalog import PairSpec

# Measured on the SmolLM2 pair (docs/benchmarks.md): adaptive drafting does best with room to
# go up to 12 on easy text; the best fixed K is 5.
DEFAULT_DRAFT_MAX = 12
DEFAULT_FIXED_K = 5
DEFAULT_P_MIN = 0.0
DEFAULT_CTX = 4096


def add_model_options(p: argparse.ArgumentParser, *, draft_required: bool = False) -> None:
    g = p.add_argument_group("models")
    g.add_argument("--target", metavar="PATH", help="target GGUF (the model whose output you get)")
    g.add_argument("--draft", metavar="PATH", help="draft GGUF (a small model with the same tokenizer)")
    g.add_argument(
        "--pair",
        metavar="NAME",
        help="a catalog pair instead of --target/--draft (see `tandem pairs`); downloaded first if "
        "needed, after asking",
    )
    g.add_argument("--catalog", metavar="PATH", type=Path, help="also read pairs from this TOML file")
    g.add_argument(
        "-y", "--yes", action="store_true", help="download a --pair that is missing without asking"
    )
    g.add_argument(
        "--ctx",
        type=int,
        default=None,
        metavar="N",
        help=f"context size in tokens (default {DEFAULT_CTX}, or the --pair's)",
    )
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
        default=None,
        metavar="P",
        help="stop drafting when the draft's confidence drops below P "
        f"(default {DEFAULT_P_MIN}, or the --pair's)",
    )
    g.add_argument(
        "--stop", action="append", default=[], metavar="TEXT", help="stop when this text appears (repeatable)"
    )


@dataclass(frozen=True)
class ModelChoice:
    target: Path
    draft: Path | None
    pair: PairSpec | None = None  # set when the models came from --pair


def model_choice(args: argparse.Namespace, *, need_draft: bool) -> ModelChoice:
    if getattr(args, "pair", None):
        if args.target or args.draft:
            raise TandemError("use either --pair NAME or --target/--draft, not both")
        return pair_choice(args, need_draft=need_draft)
    if not args.target:
        raise TandemError(
            "say which models to use: --pair NAME (see `tandem pairs`) or --target PATH --draft PATH"
        )
    if need_draft and not args.draft:
        raise TandemError(
            "the model drafter needs a draft model: add --draft PATH, or draft from the context "
            "with --drafter lookup (or run the target alone with --baseline)"
        )
    return ModelChoice(Path(args.target).expanduser(), Path(args.draft).expanduser() if args.draft else None)


def pair_choice(args: argparse.Namespace, *, need_draft: bool) -> ModelChoice:
    """Resolve --pair: the cached files if complete, else download them with consent (a y/N
    question on a terminal, --yes otherwise). The pair's context and draft settings fill in
    options the user left unset."""
    from app.catalog import load_catalog, local_file
    from app.catalog.units import format_bytes
    from app.cli.pairs_cmd import download_with_progress

    spec = load_catalog(getattr(args, "catalog", None)).get(args.pair)
    files = [spec.target, spec.draft] if need_draft else [spec.target]
    missing = [f for f in files if local_file(f) is None]
    if missing:
        size = sum(f.size_bytes for f in missing)
        what = " and ".join(f"{f.repo_id}/{f.filename}" for f in missing)
        amount = format_bytes(size) if size else "size unknown"
        if not getattr(args, "yes", False):
            if not (sys.stdin.isatty() and sys.stderr.isatty()):
                raise TandemError(
                    f"pair {spec.name} is not downloaded yet ({amount}): run `tandem pull {spec.name}` "
                    "first, or add --yes to download it now"
                )
            print(f"Pair {spec.name} needs {what} ({amount}).", file=sys.stderr)
            try:
                answer = input("Download now? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                raise TandemError(
                    f"not downloading; `tandem pull {spec.name}` fetches the pair when you are ready"
                )
        from app.catalog import DownloadCancelled

        try:
            download_with_progress(spec, need_draft=need_draft)
        except DownloadCancelled:
            raise TandemError(
                f"download stopped; what was downloaded is kept: run `tandem pull {spec.name}` to resume"
            ) from None
    target = local_file(spec.target)
    draft = local_file(spec.draft) if need_draft else None
    if target is None or (need_draft and draft is None):  # pragma: no cover - download checked them
        raise TandemError(f"pair {spec.name} is still incomplete in the Hugging Face cache")
    if args.ctx is None:
        args.ctx = spec.context
    if args.p_min is None:
        args.p_min = spec.p_min
    if args.draft_max is None and args.adaptive:
        args.draft_max = spec.draft_max
    return ModelChoice(target, draft, spec)


def load_options(args: argparse.Namespace) -> LoadOptions:
    ctx = args.ctx if args.ctx is not None else DEFAULT_CTX
    if ctx < 64:
        raise TandemError("--ctx must be at least 64 tokens")
    return LoadOptions(n_ctx=ctx, n_gpu_layers=args.gpu_layers, n_threads=args.threads)


def generation_config(args: argparse.Namespace) -> GenerationConfig:
    cfg = GenerationConfig(
        max_tokens=args.max_tokens,
        draft_max=args.draft_max
        if args.draft_max is not None
        else (DEFAULT_DRAFT_MAX if args.adaptive else DEFAULT_FIXED_K),
        adaptive=args.adaptive,
        drafter=args.drafter,
        p_min=args.p_min if args.p_min is not None else DEFAULT_P_MIN,
        sampler=SamplerSettings(
            temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed
        ),
        stop=tuple(args.stop),
    )
    cfg.validate()
    return cfg
