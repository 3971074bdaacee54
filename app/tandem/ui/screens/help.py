"""Help: what the colours and the numbers mean, and the keys."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tandem.engine import Origin, drafter_kinds, drafter_label
from tandem.ui.colours import ORIGIN_COLOURS

_G, _Y, _C = (ORIGIN_COLOURS[o] for o in (Origin.DRAFT, Origin.TARGET, Origin.BONUS))

COLOURS = f"""\
[b]The colours.[/b] A small [i]draft[/i] model (or [i]prompt lookup[/i], which copies what \
followed the same words earlier in the conversation, or the target's own [i]draft heads[/i]) \
guesses the next few tokens; the large [i]target[/i] model checks all the guesses in one \
batched pass and keeps the longest run it agrees with. A [{_G}]green[/] token was guessed and \
accepted by the target. A [{_Y}]yellow[/] token is the target's own: its correction after it \
rejected a guess. A [{_C}]cyan[/] [i]bonus[/i] token comes free when every guess of a round was \
accepted: the same pass already computed the next token. Every token is exactly what the target \
alone would have produced (token for token with greedy decoding; from the very same \
distribution when sampling): only the speed changes. Ctrl+T switches to plain reading, where \
finished answers are shown as Markdown."""

# Who may draft, in the kinds' own words.
DRAFTERS = ", ".join(drafter_label(kind) for kind in drafter_kinds())

NUMBERS = f"""\
[b]The numbers.[/b] [i]Speed[/i] is decode tokens per second, prompt processing (prefill) \
excluded. [i]Speedup[/i] compares it with the target alone under the same conditions: \
plain target steps timed now and then during the same answer, so a program that starts \
mid-answer slows both sides alike; its interval shows how sure it is, and the panel says when \
the machine's speed changed mid-answer. It never exceeds tok/pass. The demo (F3) runs both \
in full, one after the other. \
[i]Accepted[/i] is the share of the draft's guesses the target kept; [i]tok/pass[/i] is how many \
tokens each forward pass of the target yielded (1.0 would be no gain); [i]K[/i] is how many \
tokens were guessed in the last round (adaptive drafting picks 0..K max each round from \
the acceptance and costs it measures), and [i]drafter[/i] who guessed them: {DRAFTERS} (auto \
picks, round by round, the fastest). [i]Prefill[/i] is \
how many prompt tokens this turn really processed: earlier turns stay in the KV caches and \
are not processed again. The chart shows tokens per target pass, round by round."""

KEYS = [
    ("Enter", "send the message"),
    ("Esc", "stop the answer (what was written is kept)"),
    ("Ctrl+R", "regenerate the last answer"),
    ("Ctrl+N / Ctrl+O", "new chat / saved chats"),
    ("Ctrl+Y", "copy the last answer (OSC 52 clipboard)"),
    ("Ctrl+T", "colours by origin / plain reading"),
    ("Ctrl+G", "edit the system prompt"),
    ("Ctrl+L", "open / fold the last answer's thinking (or click it)"),
    ("F5", "thinking on / off for this chat (reasoning models)"),
    ("F2", "pairs: catalog, downloads, GGUFs on disk"),
    ("F3", "side-by-side speed demo"),
    ("F4", "settings"),
    ("Ctrl+P / Ctrl+Q", "command palette / quit"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f1,q", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll() as scroll:
            scroll.border_title = "Help · Esc closes"
            yield Static(COLOURS)
            yield Static(NUMBERS)
            keys = "\n".join(f"[b]{k:<16}[/b] {what}" for k, what in KEYS)
            yield Static(keys)
