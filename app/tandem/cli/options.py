"""Command-line options: the flags every command shares, and turning a parsed command line into
typed options. The argparse Namespace stays in this module: each command's handler receives
its own frozen dataclass (RunOptions, BenchOptions, ...), built here by `options_for`.

Defaults are not written here: an option left unset stays None, and the session layer
(app/session/choices.py) fills it from the catalog pair or the engine's defaults.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tandem.engine import (
    ADAPTIVE_K_MAX,
    DRAFT_MAX_LIMIT,
    FIXED_K,
    RPC_PORT_DEFAULT,
    GenerationConfig,
    LoadOptions,
    SamplerSettings,
    drafter_choices,
    drafter_help,
)
from tandem.session.choices import Choices
from tandem.session.refs import PairRequest

_SAMPLER = SamplerSettings()
_LOAD = LoadOptions()


# ------------------------------------------------------------------------------ flags
def add_model_options(p: argparse.ArgumentParser, *, app: bool = False) -> None:
    """The model and loading flags; `app`: for `tandem chat`, whose defaults are the app's
    settings (and a flag changes them for this session only)."""
    default_ctx = "the app's settings" if app else f"the --pair's, else {_LOAD.n_ctx}"
    default_gpu = "the app's settings" if app else "-1"
    default_threads = (
        "the app's settings" if app else "all logical CPUs up to 4, half of them above that, at most 8"
    )
    g = p.add_argument_group("models")
    g.add_argument("--target", metavar="PATH", type=Path, help="target GGUF (the model whose output you get)")
    g.add_argument(
        "--draft",
        metavar="PATH",
        type=Path,
        help="draft GGUF (a small model, best with the same tokenizer; another one drafts across tokenizers)",
    )
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
        "--ctx", type=int, default=None, metavar="N", help=f"context size in tokens (default: {default_ctx})"
    )
    g.add_argument(
        "--gpu-layers",
        type=int,
        default=None,
        metavar="N",
        help=f"layers to put on the GPU: -1 all, 0 none (default: {default_gpu})",
    )
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help=f"CPU threads, at most the logical CPUs (default: {default_threads})",
    )
    default_rpc = "the app's settings" if app else "none: the target runs on this machine"
    g.add_argument(
        "--rpc",
        metavar="HOST:PORT[,HOST:PORT...]",
        default=None,
        help="spread the target's layers over these llama.cpp rpc-server hosts (port "
        f"{RPC_PORT_DEFAULT} by default there); the draft stays on this machine. rpc-server has no "
        f"authentication: trusted networks only (default: {default_rpc})",
    )


def add_generation_options(p: argparse.ArgumentParser, *, max_tokens: int | None) -> None:
    """The generation flags; `max_tokens` None: no limit but the context's (tandem serve)."""
    g = p.add_argument_group("generation")
    g.add_argument(
        "-n",
        "--max-tokens",
        type=int,
        default=max_tokens,
        metavar="N",
        help=f"most tokens to generate ({'until the context is full' if max_tokens is None else max_tokens})",
    )
    g.add_argument(
        "--temp",
        type=float,
        default=_SAMPLER.temperature,
        metavar="T",
        help="temperature; 0 = greedy (default)",
    )
    g.add_argument(
        "--top-k",
        type=int,
        default=_SAMPLER.top_k,
        metavar="K",
        help=f"top-k when sampling ({_SAMPLER.top_k}; 0 = off)",
    )
    g.add_argument(
        "--top-p",
        type=float,
        default=_SAMPLER.top_p,
        metavar="P",
        help=f"top-p when sampling ({_SAMPLER.top_p})",
    )
    g.add_argument(
        "--min-p",
        type=float,
        default=_SAMPLER.min_p,
        metavar="P",
        help=f"min-p when sampling ({_SAMPLER.min_p})",
    )
    g.add_argument("--seed", type=int, default=None, metavar="S", help="random seed for sampling")
    g.add_argument(
        "--draft-max",
        type=int,
        default=None,
        metavar="K",
        help=f"most tokens drafted per round, max {DRAFT_MAX_LIMIT}: adaptive drafting picks 0..K each "
        f"round (default: the --pair's, else {ADAPTIVE_K_MAX}); with --no-adaptive, or a --seed when "
        f"sampling, exactly K (default {FIXED_K})",
    )
    g.add_argument(
        "--drafter",
        choices=drafter_choices(),
        default=GenerationConfig.drafter,
        help=f"who drafts (default: {GenerationConfig.drafter}): {drafter_help()}",
    )
    g.add_argument(
        "--no-adaptive",
        dest="adaptive",
        action="store_false",
        help="draft exactly K tokens every round instead of choosing K from measured speed",
    )
    exact = g.add_mutually_exclusive_group()
    exact.add_argument(
        "--exact",
        dest="exact",
        action="store_const",
        const=True,
        default=None,
        help="require output bit-identical to the target alone's: verified rows are computed as the "
        "target computes them one at a time (CPU, quantized weights; K at most 2 where the weights "
        "are repacked); refused, saying why, where that is not possible. Default: exact wherever "
        "the target allows it",
    )
    exact.add_argument(
        "--no-exact",
        dest="exact",
        action="store_const",
        const=False,
        help="verify with llama.cpp's fastest kernels: the output may differ from the target alone's "
        "at near-ties (its batched rows round differently)",
    )
    g.add_argument(
        "--p-min",
        type=float,
        default=None,
        metavar="P",
        help="stop drafting when the draft's confidence drops below P (default: the --pair's, else "
        f"{GenerationConfig.p_min})",
    )
    g.add_argument(
        "--stop", action="append", default=[], metavar="TEXT", help="stop when this text appears (repeatable)"
    )


def add_think_option(p: argparse.ArgumentParser) -> None:
    """--think / --no-think: a thinking model's reasoning on or off (default: the model's own)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--think",
        dest="think",
        action="store_const",
        const=True,
        default=None,
        help="a thinking model reasons before it answers, where its chat template can be told to "
        "(default: the model's own choice)",
    )
    g.add_argument(
        "--no-think",
        dest="think",
        action="store_const",
        const=False,
        help="a thinking model answers without reasoning (enable_thinking=false); one whose template "
        "cannot be told still reasons, and its reasoning is hidden",
    )


# ------------------------------------------------------------------------------ typed options
@dataclass(frozen=True)
class RunOptions:
    models: PairRequest
    choices: Choices
    yes: bool
    prompt: str  # the text, or "-" for standard input
    baseline: bool
    raw: bool
    system: str | None
    json: bool
    color: Literal["auto", "always", "never"]


@dataclass(frozen=True)
class BenchOptions:
    models: PairRequest
    choices: Choices
    yes: bool
    prompts: tuple[Path, ...]
    categories: tuple[str, ...]
    runs: int
    compare: str | None
    raw: bool
    json: Path | None
    chart: Path | None
    llama_bench: str = "auto"


@dataclass(frozen=True)
class ServeOptions:
    models: PairRequest
    choices: Choices
    yes: bool
    baseline: bool
    host: str
    port: int
    api_key: str | None
    queue: int
    name: str | None
    allow_host: tuple[str, ...]
    max_body: float | None
    parallel: int | None = None
    private_cache: bool = False


@dataclass(frozen=True)
class ChatOptions:
    models: PairRequest
    yes: bool
    # Loading options for this session only (the app's saved settings are not changed).
    n_ctx: int | None
    n_gpu_layers: int | None
    n_threads: int | None
    rpc_servers: tuple[str, ...] | None


@dataclass(frozen=True)
class PairsOptions:
    catalog: Path | None
    ctx: int | None
    json: bool


@dataclass(frozen=True)
class PullOptions:
    pair: str
    catalog: Path | None


@dataclass(frozen=True)
class ModelsOptions:
    paths: tuple[Path, ...]
    json: bool


def _models(args: argparse.Namespace) -> PairRequest:
    return PairRequest(pair=args.pair, target=args.target, draft=args.draft, catalog=args.catalog)


def _choices(args: argparse.Namespace) -> Choices:
    return Choices(
        max_tokens=args.max_tokens,
        draft_max=args.draft_max,
        adaptive=args.adaptive,
        drafter=args.drafter,
        p_min=args.p_min,
        sampler=SamplerSettings(
            temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p, seed=args.seed
        ),
        stop=tuple(args.stop),
        n_ctx=args.ctx,
        n_gpu_layers=args.gpu_layers,
        n_threads=args.threads,
        rpc_servers=_servers(args.rpc) or (),
        think=getattr(args, "think", None),
        exact=args.exact,
    )


def _servers(text: str | None) -> tuple[str, ...] | None:
    """--rpc's list, split only: each entry is checked with the other loading options
    (LoadOptions.validate), so a bad one is the same one-line error everywhere."""
    if text is None:
        return None
    return tuple(s.strip() for s in text.split(",") if s.strip())


def run_options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(
        _models(args),
        _choices(args),
        args.yes,
        args.prompt,
        args.baseline,
        args.raw,
        args.system,
        args.json,
        args.color,
    )


def bench_options(args: argparse.Namespace) -> BenchOptions:
    return BenchOptions(
        _models(args),
        _choices(args),
        args.yes,
        tuple(args.prompts),
        tuple(args.category),
        args.runs,
        args.compare,
        args.raw,
        args.json,
        args.chart,
        args.llama_bench,
    )


def serve_options(args: argparse.Namespace) -> ServeOptions:
    return ServeOptions(
        _models(args),
        _choices(args),
        args.yes,
        args.baseline,
        args.host,
        args.port,
        args.api_key,
        args.queue,
        args.name,
        tuple(args.allow_host),
        args.max_body,
        args.parallel,
        args.private_cache,
    )


def chat_options(args: argparse.Namespace) -> ChatOptions:
    if not hasattr(args, "target"):  # plain `tandem`: no chat flags were parsed
        return ChatOptions(PairRequest(), False, None, None, None, None)
    return ChatOptions(_models(args), args.yes, args.ctx, args.gpu_layers, args.threads, _servers(args.rpc))


def pairs_options(args: argparse.Namespace) -> PairsOptions:
    return PairsOptions(args.catalog, args.ctx, args.json)


def pull_options(args: argparse.Namespace) -> PullOptions:
    return PullOptions(args.pair, args.catalog)


def models_options(args: argparse.Namespace) -> ModelsOptions:
    return ModelsOptions(tuple(args.paths), args.json)


def options_for(args: argparse.Namespace) -> tuple[Callable[[Any], int], object]:
    """The command's handler and its typed options (each parser sets both as defaults)."""
    handler: Callable[[Any], int] = args.func
    convert: Callable[[argparse.Namespace], object] = args.options
    return handler, convert(args)
