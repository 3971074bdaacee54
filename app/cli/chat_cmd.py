"""`tandem chat` (and plain `tandem`): start the terminal app.

`tandem chat --target T --draft D` opens the chat with that pair; plain `tandem` opens the last
pair used, or the pair picker on a first run. --ctx, --gpu-layers and --threads override the saved
settings for this session only.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from app.engine import TandemError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "chat",
        help="chat in the terminal app (the default command)",
        description="Start Tandem's terminal app: chat with live speculative decoding.",
    )
    p.add_argument("--target", metavar="PATH", help="target GGUF (the model whose output you get)")
    p.add_argument("--draft", metavar="PATH", help="draft GGUF (a small model with the same tokenizer)")
    p.add_argument(
        "--pair", metavar="NAME", help="a catalog pair (see `tandem pairs`); downloaded first, after asking"
    )
    p.add_argument("--catalog", metavar="PATH", type=Path, help="also read pairs from this TOML file")
    p.add_argument("-y", "--yes", action="store_true", help="download a missing --pair without asking")
    p.add_argument("--ctx", type=int, default=None, metavar="N", help="context size (default: settings)")
    p.add_argument(
        "--gpu-layers", type=int, default=None, metavar="N", help="GPU layers, -1 all (default: settings)"
    )
    p.add_argument("--threads", type=int, default=None, metavar="N", help="CPU threads (default: settings)")
    p.set_defaults(func=chat)


def chat(args: argparse.Namespace) -> int:
    from app.ui.app import TandemApp
    from app.ui.session import PairRef

    target, draft = getattr(args, "target", None), getattr(args, "draft", None)
    if getattr(args, "pair", None):
        if target or draft:
            raise TandemError("use either --pair NAME or --target/--draft, not both")
        target, draft = _pair_files(args)
    if bool(target) != bool(draft):
        raise TandemError("give both --target PATH and --draft PATH (or neither, to pick in the app)")
    pair = PairRef(Path(target).expanduser(), Path(draft).expanduser()) if target and draft else None
    app = TandemApp(pair=pair)
    overrides = {
        k: v
        for k, v in (
            ("n_ctx", getattr(args, "ctx", None)),
            ("n_gpu_layers", getattr(args, "gpu_layers", None)),
            ("n_threads", getattr(args, "threads", None)),
        )
        if v is not None
    }
    if overrides:
        app.settings = replace(app.settings, **overrides)
        app.settings.validate()
    app.run()
    return 0


def _pair_files(args: argparse.Namespace) -> tuple[str, str]:
    """The --pair's cached files, downloaded first (with consent) like `tandem run --pair`."""
    from app.cli.options import pair_choice

    # pair_choice fills in the generation options a pair brings; the app has its own settings.
    for name, default in (("p_min", 0.0), ("draft_max", 0), ("adaptive", True), ("drafter", "model")):
        if not hasattr(args, name):
            setattr(args, name, default)
    choice = pair_choice(args, need_draft=True)
    assert choice.draft is not None
    return str(choice.target), str(choice.draft)
