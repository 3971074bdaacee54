"""The live numbers next to the chat, the tokens-per-pass chart, and the colour legend."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from tandem.engine import AUTO_DRAFTER, DrafterStats, KindRounds, Origin
from tandem.ui.colours import ORIGIN_COLOURS, ORIGIN_LABELS
from tandem.ui.live_stats import PartCounts
from tandem.ui.widgets.pass_chart import PassChart

CHART_POINTS = 120  # rounds kept for the chart (it shows as many as fit, the latest at the right)


@dataclass
class StatsView(KindRounds):
    """Everything the panel shows; built by the chat screen from LiveStats and the pair."""

    pair: str = ""
    state: str = "no pair loaded"
    tokens_per_s: float | None = None
    # Against the target alone timed during this answer (engine/decoding/speedup.py): the figure, its
    # ~95% interval, the target alone's speed over the same time, the steps timed, whether the
    # machine's speed changed mid-answer; speculative False: the answer was the target alone.
    speedup: float | None = None
    speedup_low: float | None = None
    speedup_high: float | None = None
    target_alone_tps: float | None = None
    speedup_steps: int = 0
    load_changed: bool = False
    speculative: bool = True
    acceptance: float | None = None
    accepted: int = 0
    drafted: int = 0
    tokens_per_round: float | None = None
    k: int | None = None
    k_max: int = 0
    adaptive: bool = True
    drafter: str = AUTO_DRAFTER  # the setting
    last_drafter: str = ""  # who drafted the last round
    rounds: int = 0
    # Per drafter kind, as the engine counts them (GenerationStats.drafters); `view.<kind>_rounds`
    # reads a kind's rounds.
    drafters: dict[str, DrafterStats] = field(default_factory=dict)
    prefill_tokens: int | None = None
    prompt_tokens: int = 0
    generated: int = 0
    stop_reason: str = ""
    per_round: list[float] = field(default_factory=list)
    # A thinking model's reasoning and answer apart; None when the answer has no reasoning.
    reasoning: PartCounts | None = None
    answer: PartCounts | None = None


def _fmt(v: float | None, spec: str, suffix: str = "") -> str:
    return "–" if v is None else f"{v:{spec}}{suffix}"


def _k_text(v: StatsView) -> str:
    if v.k is None:
        return f"≤ {v.k_max} adaptive" if v.adaptive else f"{v.k_max} fixed"
    return f"{v.k} (adaptive ≤ {v.k_max})" if v.adaptive else f"{v.k} (fixed)"


def _drafter_text(v: StatsView) -> str:
    if not v.rounds:
        return v.drafter
    text = f"{v.drafter}, last: {v.last_drafter or 'none'}"
    if v.drafter == AUTO_DRAFTER:
        # Who auto chose: each kind that drafted, from the engine's per-kind counts.
        shares = [f"{d.rounds}/{v.rounds} {kind}" for kind, d in v.drafters.items() if d.rounds]
        if shares:
            text += f" ({', '.join(shares)})"
    return text


def _speedup_text(v: StatsView) -> Text:
    t = Text()
    if v.speedup is None:
        t.append("–")
    else:
        t.append(f"{v.speedup:.2f}×", style="bold")
        if v.speedup_low is not None and v.speedup_high is not None:
            t.append(f" ({v.speedup_low:.2f}–{v.speedup_high:.2f})", style="dim")
    return t


def _reference_text(v: StatsView) -> str:
    if not v.speculative:
        return "this answer was the target alone"
    if v.speedup is None or v.target_alone_tps is None:
        return "target alone: timed during each answer"
    steps = f"{v.speedup_steps} step{'s' if v.speedup_steps != 1 else ''}"
    return f"vs {v.target_alone_tps:.1f} tok/s target alone, timed in {steps} during this answer"


def _stop_text(reason: str) -> str:
    return {
        "eog": "done",
        "max_tokens": "max tokens",
        "stop_string": "stop text",
        "cancelled": "stopped (Esc)",
        "context_full": "context full",
    }.get(reason, reason)


def _part_text(p: PartCounts) -> str:
    """One part's acceptance and speed: "62% · 21.3 tok/s"."""
    acc = p.acceptance
    return f"{_fmt(None if acc is None else 100 * acc, '.0f', '%')} · {_fmt(p.tokens_per_s, '.1f', ' tok/s')}"


def render_wide(v: StatsView) -> Text:
    """A column of label / value rows for the side panel."""
    t = Text(no_wrap=False)
    t.append(v.pair or "no pair", style="bold")
    t.append("\n")
    t.append(v.state, style="italic dim")
    t.append("\n\n")

    def row(label: str, value: str | Text) -> None:
        t.append(f"{label:<10}", style="dim")
        t.append(value)
        t.append("\n")

    row("speed", _fmt(v.tokens_per_s, ".1f", " tok/s"))
    row("speedup", _speedup_text(v))
    t.append(_reference_text(v), style="dim")
    t.append("\n")
    if v.load_changed:
        t.append("the machine's speed changed mid-answer", style="italic yellow")
        t.append("\n")
    acc = _fmt(None if v.acceptance is None else 100 * v.acceptance, ".0f", "%")
    if v.acceptance is not None:
        acc += f" ({v.accepted}/{v.drafted})"
    row("accepted", acc)
    if v.reasoning is not None and v.answer is not None:
        row("thinking", _part_text(v.reasoning))
        row("answering", _part_text(v.answer))
    row("tok/pass", _fmt(v.tokens_per_round, ".2f"))
    row("K", _k_text(v))
    row("drafter", _drafter_text(v))
    prefill = "–" if v.prefill_tokens is None else f"{v.prefill_tokens} tok this turn"
    row("prefill", prefill)
    if v.prefill_tokens is not None:
        t.append(f"{'':<10}of {v.prompt_tokens} in the prompt\n", style="dim")
    thought = f" ({v.reasoning.tokens} thinking)" if v.reasoning is not None else ""
    row("answer", f"{v.generated} tok{thought}" + (f", {_stop_text(v.stop_reason)}" if v.stop_reason else ""))
    return t


def render_narrow(v: StatsView) -> Text:
    """Two or three lines for the bar under the chat on narrow terminals."""
    t = Text(no_wrap=False)
    if v.tokens_per_s is None:
        t.append(f"no answer yet · K {_k_text(v)} · drafter {v.drafter}", style="dim")
    else:
        t.append(_fmt(v.tokens_per_s, ".1f", " tok/s"), style="bold")
        t.append("  ")
        t.append(_speedup_text(v))
        t.append("  acc ")
        t.append(_fmt(None if v.acceptance is None else 100 * v.acceptance, ".0f", "%"))
        t.append("  ")
        t.append(_fmt(v.tokens_per_round, ".2f", " tok/pass"))
        t.append(f"  K {'–' if v.k is None else v.k}/{v.k_max}")
        if v.last_drafter:
            t.append(f" {v.last_drafter}")
        if v.reasoning is not None and v.answer is not None:
            t.append(f"  thinking {_part_text(v.reasoning)}  answering {_part_text(v.answer)}")
    if v.prefill_tokens is not None:
        t.append(f"  prefill {v.prefill_tokens}/{v.prompt_tokens}")
    t.append("\n")
    t.append(f"{v.state} · {_reference_text(v)}", style="dim")
    if v.load_changed:
        t.append(" · the machine's speed changed mid-answer", style="italic yellow")
    return t


class StatsPanel(Vertical):
    def __init__(self) -> None:
        super().__init__()
        self.view = StatsView()
        self._numbers = Static("", id="numbers", markup=False)
        self._height = -1  # the numbers' wrapped height as last shown
        self._chart = PassChart()
        self._caption = Static("tokens per target pass, per round", id="chart-caption", markup=False)

    def compose(self) -> ComposeResult:
        yield self._numbers
        yield self._caption
        yield self._chart

    def on_mount(self) -> None:
        self.show(self.view)

    def show(self, view: StatsView) -> None:
        self.view = view
        narrow = self.has_class("-narrow")
        self._show_numbers(render_narrow(view) if narrow else render_wide(view))
        recent = view.per_round[-CHART_POINTS:]
        # One column per round, the latest at the right; nothing is drawn before the first.
        self._chart.set_data(recent)
        self._chart.display = bool(recent)

    def _show_numbers(self, text: Text) -> None:
        # A layout pass costs far more than a repaint, and the numbers change several times a
        # second while the engine is decoding on the same CPU: lay out again only when the
        # wrapped text's height changed.
        width = self._numbers.content_size.width
        height = len(text.wrap(self.app.console, width)) if width > 0 else -1
        self._numbers.update(text, layout=height != self._height or height < 0)
        self._height = height

    def set_narrow(self, narrow: bool) -> None:
        if narrow != self.has_class("-narrow"):
            self.set_class(narrow, "-narrow")
            self.show(self.view)


class Legend(Static):
    """What the colours mean, and how to turn them off."""

    def __init__(self) -> None:
        super().__init__("", markup=False)
        self.colour = True

    def on_mount(self) -> None:
        self.set_colour(self.colour)

    def set_colour(self, colour: bool) -> None:
        self.colour = colour
        t = Text(no_wrap=True, overflow="ellipsis")
        if colour:
            for origin in Origin:
                t.append("■ ", style=ORIGIN_COLOURS[origin])
                t.append(ORIGIN_LABELS[origin] + "   ")
            t.append("(^t plain reading)", style="dim")
        else:
            t.append("plain reading: finished answers as Markdown   (^t colours by origin)")
        self.update(t)
