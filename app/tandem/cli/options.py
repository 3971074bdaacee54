"""Command-line options: the flags every command shares, and turning a parsed command line into
typed options. The argparse Namespace stays in this module: each command's handler receives
its own frozen dataclass (RunOptions, BenchOptions, ...), built here by `options_for`.

Each option's flag, help and bounds are declared once, in session/options.py; a flag not given
is not in the namespace (argparse.SUPPRESS): the option is not chosen, and `layered` there
fills it from the catalog pair or the defaults.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tandem.session.options import Group, Options, base_type, fields_with, opt
from tandem.session.refs import PairRequest


# ------------------------------------------------------------------------------ flags
def add_model_options(p: argparse.ArgumentParser, *, app: bool = False) -> None:
    """The model and loading flags; `app`: for `tandem chat`, whose defaults are the app's
    settings (and a flag changes them for this session only)."""
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
    add_option_flags(g, "models", said_default="the app's settings" if app else None)


def add_generation_options(p: argparse.ArgumentParser, *, max_tokens: int | None) -> None:
    """The generation flags; `max_tokens` None: no limit but the context's (tandem serve)."""
    g = p.add_argument_group("generation")
    defaults = {} if max_tokens is None else {"max_tokens": max_tokens}
    said = {} if max_tokens is not None else {"max_tokens": "until the context is full"}
    add_option_flags(g, "generation", defaults=defaults, said=said)


def add_option_flags(
    g: argparse._ArgumentGroup,
    group: Group,
    *,
    defaults: Mapping[str, Any] | None = None,
    said: Mapping[str, str] | None = None,
    said_default: str | None = None,
) -> None:
    """A flag for each option of `group` that has one (session/options.py declares them). A
    flag left out is not in the namespace at all (SUPPRESS): the option is not chosen, and the
    pair's value or the default applies (`defaults`: the command's own, e.g. -n 256)."""
    defaults, said = defaults or {}, said or {}
    for name, o in fields_with("flag"):
        if o.group != group:
            continue
        default = defaults.get(name, argparse.SUPPRESS)
        shown = said_default or said.get(name) or _default_text(name, defaults)
        flags = [f for f in (o.short, o.flag) if f]
        kind = base_type(name)
        if kind is bool:  # --exact / --no-exact: both set one value
            pair = g.add_mutually_exclusive_group()
            pair.add_argument(
                *flags,
                dest=name,
                action="store_const",
                const=True,
                default=default,
                help=f"{o.help or o.hint} (default: {shown})",
            )
            if o.off:
                pair.add_argument(o.off, dest=name, action="store_const", const=False, help=o.off_help)
        elif kind is tuple and not o.commas:
            g.add_argument(
                *flags, dest=name, action="append", default=default, metavar=o.metavar, help=o.help or o.hint
            )
        else:
            choices = [str(v) for _, v in o.choices] if o.choices else None
            g.add_argument(
                *flags,
                dest=name,
                type=str if kind is tuple else kind,
                default=default,
                metavar=None if choices else o.metavar,
                choices=choices,
                help=f"{o.help or o.hint} (default: {shown})",
            )
    for name, o in fields_with("off"):  # a switch with only an "off" flag (--no-adaptive)
        if o.group == group and not o.flag and o.off:
            g.add_argument(
                o.off, dest=name, action="store_const", const=False, default=argparse.SUPPRESS, help=o.help
            )


def _default_text(name: str, defaults: Mapping[str, Any]) -> str:
    if name in defaults:
        return str(defaults[name])
    if opt(name).unset:
        return opt(name).unset
    value = Options.model_fields[name].default
    return "none" if value is None or value == () else str(value).lower()


def given_options(args: argparse.Namespace) -> Options:
    """The options given on the command line (only those: the rest are not chosen)."""
    return Options.parse({name: getattr(args, name) for name in Options.model_fields if hasattr(args, name)})


def add_think_option(p: argparse.ArgumentParser) -> None:
    """--think / --no-think: a thinking model's reasoning on or off (default: the model's own)."""
    add_option_flags(p.add_argument_group("thinking"), "thinking")


# ------------------------------------------------------------------------------ typed options
@dataclass(frozen=True)
class RunOptions:
    models: PairRequest
    options: Options  # those given (the pair's and the defaults apply to the rest)
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
    options: Options  # those given (the pair's and the defaults apply to the rest)
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
    options: Options  # those given (the pair's and the defaults apply to the rest)
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
    options: Options


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


def run_options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(
        _models(args),
        given_options(args),
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
        given_options(args),
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
        given_options(args),
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
        return ChatOptions(PairRequest(), False, Options())
    return ChatOptions(_models(args), args.yes, given_options(args))


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
