"""`tandem chat` (and plain `tandem`): start the terminal app.

`tandem chat --target T --draft D` or `tandem chat --pair NAME` opens the chat with that pair
(`--target T` alone when T has its own draft heads: multi-token prediction);
plain `tandem` opens the last pair used, or the pair picker on a first run. --ctx, --gpu-layers
and --threads override the saved settings for this session only.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tandem.catalog import has_heads, usable_companion
from tandem.cli.fetch import terminal_fetch
from tandem.cli.options import ChatOptions, add_model_options, chat_options
from tandem.engine import TandemError
from tandem.session.pairs import resolve_pair
from tandem.session.refs import DraftNeeds, PairRef

if TYPE_CHECKING:
    from tandem.ui.app import TandemApp


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "chat",
        help="chat in the terminal app (the default command)",
        description="Start Tandem's terminal app: chat with live speculative decoding.",
    )
    add_model_options(p, app=True)
    p.set_defaults(func=chat, options=chat_options)


def chat(opts: ChatOptions) -> int:
    app_for(opts).run()
    return 0


def app_for(opts: ChatOptions, **app_options: Any) -> TandemApp:
    """The app `tandem chat` starts: the pair resolved (and downloaded, after asking) the way
    `tandem run --pair` resolves it, so its catalog settings apply alike; `app_options` go to
    TandemApp (tests give their own directories)."""
    from tandem.ui.app import TandemApp

    request = opts.models
    pair: PairRef | None = None
    if request.pair or request.target or request.draft:
        if not request.pair and not (request.target and (request.draft or _drafts_alone(request.target))):
            raise TandemError(
                "give both --target PATH and --draft PATH (or neither, to pick in the app); only a "
                "target with its own draft heads (multi-token prediction) can come alone"
            )
        # The app drafts with the pair's draft model (download it too, after asking), or with
        # the target's own heads when the pair has no draft model. The app's load runs the
        # preflight, as for any pair it loads: a refusal is shown there, with the picker.
        pair = resolve_pair(
            request, DraftNeeds(use_draft=True), fetch=terminal_fetch(yes=opts.yes), check=False
        )
    app = TandemApp(pair=pair, **app_options)
    settings = app.settings.updated(**opts.options.chosen())
    settings.validate_all()
    app.settings = settings
    return app


def _drafts_alone(target: Path) -> bool:
    """Whether `target` is a readable GGUF with its own draft heads, or a drafter beside it."""
    try:
        return has_heads(target.expanduser()) or usable_companion(target.expanduser()) is not None
    except TandemError:
        return False
