"""Side-by-side speed demo: one prompt, the target alone vs speculative decoding.

Honest timing: the two runs never share the machine. The target alone runs first, then the
speculative pair, each in full, with the same prompt and settings; each pane shows its live
decode speed (prefill excluded). At the end: the speedup and, for greedy decoding, whether the
two outputs are token-identical (or where they first differ). (The chat's own speedup is timed
within each answer: engine/decoding/speedup.py.)
"""

from __future__ import annotations

from typing import ClassVar, cast

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Header, Input, Static

from tandem.engine import GenerationStats
from tandem.session.prompts import build_text
from tandem.ui.host import AppHost
from tandem.ui.jobs import GenerationJob
from tandem.ui.live_stats import LiveStats
from tandem.ui.screens.streaming import StreamingScreen, take_events
from tandem.ui.widgets.chat_log import STREAM_HEADROOM
from tandem.ui.widgets.speed_chart import SpeedChart
from tandem.ui.widgets.thinking import ThinkingView
from tandem.ui.widgets.token_text import Piece, TokenText
from tandem.ui.workers import run_in_thread

DEFAULT_PROMPT = "Write a Python function that checks whether a string is a palindrome, with a docstring."
EXPLAIN = (
    "Same prompt, same settings. The runs go one after the other, never at the same time: the "
    "target alone first, then target + draft. Speeds are decode tokens/s, prefill excluded."
)


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where the two runs differ (None: identical)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class DemoPane(Vertical):
    def __init__(self, title: str, pane_id: str, *, colour: bool) -> None:
        super().__init__(id=pane_id)
        self.border_title = title
        self.colour = colour  # the target alone: every token is its own, nothing to colour
        self.speed = Static("waiting", classes="pane-speed", markup=False)
        self.text = TokenText(colour=colour, headroom=STREAM_HEADROOM)
        self.scroll = VerticalScroll()
        self.ids: list[int] = []
        self.live = LiveStats()
        self.thinking: ThinkingView | None = None  # a thinking model's reasoning, above its answer

    def compose(self) -> ComposeResult:
        yield self.speed
        with self.scroll:
            yield self.text

    def reset(self) -> None:
        self.ids = []
        self.live = LiveStats()
        self.text.remove()
        if self.thinking is not None:
            self.thinking.remove()
            self.thinking = None
        self.text = TokenText(colour=self.colour, headroom=STREAM_HEADROOM)
        self.scroll.mount(self.text)
        self.speed.update("waiting")

    def append(self, reasoning: list[Piece], pieces: list[Piece]) -> None:
        """Both runs race through the reasoning too: it streams dimmed above the answer."""
        if reasoning:
            if self.thinking is None:
                self.thinking = ThinkingView(colour=self.colour)
                self.scroll.mount(self.thinking, before=self.text)
            self.thinking.append(reasoning)
        if pieces:
            if self.thinking is not None:
                self.thinking.finish()
            self.text.append(pieces)

    def stream_done(self) -> None:
        self.text.stream_done()
        if self.thinking is not None:
            self.thinking.finish(fold=bool(self.text.text))

    def show_speed(self, tokens_per_s: float | None, note: str = "") -> None:
        t = Text()
        if tokens_per_s is None:
            t.append(note or "waiting", style="dim")
        else:
            t.append(f"{tokens_per_s:.1f} tok/s", style="bold")
            t.append(f"  {note}", style="dim")
        self.speed.update(t)


class DemoScreen(StreamingScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stop_or_back", "Stop / back"),
        Binding("ctrl+r", "run", "Run again"),
    ]

    def __init__(self) -> None:
        super().__init__(id="demo")
        self.stage = ""  # "", "baseline", "speculative"
        self.results: dict[str, GenerationStats] = {}
        self._stopped = False

    @property
    def tandem(self) -> AppHost:
        return cast("AppHost", self.app)  # (TandemApp: the app these screens run in)

    def compose(self) -> ComposeResult:
        yield Header(icon="⇉")
        yield Static(EXPLAIN, id="explain", markup=False)
        yield Input(DEFAULT_PROMPT, placeholder="Prompt · Enter runs", id="demo-prompt")
        with Horizontal(id="panes"):
            yield DemoPane("Target alone", "baseline", colour=False)
            yield DemoPane("Speculative: target + draft (coloured by origin)", "speculative", colour=True)
        yield SpeedChart(id="demo-chart")
        yield Static("Enter runs the demo.", id="verdict", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        loaded = self.tandem.loaded
        self.sub_title = f"speed demo · {loaded.ref.label}" if loaded else "speed demo · no pair loaded"
        self.query_one("#demo-prompt", Input).focus()

    def pane(self, stage: str) -> DemoPane:
        return self.query_one(f"#{stage}", DemoPane)

    # ------------------------------------------------------------------ running
    @on(Input.Submitted, "#demo-prompt")
    def action_run(self) -> None:
        app = self.tandem
        if self.job is not None:
            self.notify("The demo is running: Esc stops it.", severity="warning", markup=False)
            return
        if app.loaded is None or app.loading is not None:
            self.notify("No model pair is loaded: press F2 to pick one.", severity="warning", markup=False)
            return
        if app.chat_busy():
            self.notify(
                "The chat is still answering: stop it first (Esc in the chat).",
                severity="warning",
                markup=False,
            )
            return
        text = self.query_one("#demo-prompt", Input).value.strip()
        if not text:
            return
        self.results = {}
        self._stopped = False
        for stage in ("baseline", "speculative"):
            self.pane(stage).reset()
        self.query_one(SpeedChart).clear()
        self._verdict("Running the target alone…")
        self._start("baseline", text)

    def _start(self, stage: str, text: str) -> None:
        app = self.tandem
        assert app.loaded is not None
        system, think = app.settings.system_prompt, app.settings.think
        job = GenerationJob(
            app.loaded,
            lambda pair: build_text(pair, text, system=system, think=think),
            app.generation_config(),
            speculative=stage == "speculative",
            wake=lambda: self._wake(job.id),
        )
        self.job = job
        self.stage = stage
        self._text = text
        pane = self.pane(stage)
        pane.add_class("-running")
        pane.show_speed(None, "prefilling…")
        run_in_thread(self, job.run, group="demo", name="The demo")

    def show_events(self, job: GenerationJob) -> None:
        pane = self.pane(self.stage)
        reasoning: list[Piece] = []
        pieces, done, failed = take_events(job, pane.live, pane.ids, reasoning)
        if pieces or reasoning:
            pane.append(reasoning, pieces)
            pane.scroll.scroll_end(animate=False, immediate=False)
        live = pane.live
        if live.rounds:
            pane.show_speed(live.tokens_per_s, f"{live.generated} tokens")
        if failed is not None:
            self.job = None
            pane.stream_done()
            pane.remove_class("-running")
            self._verdict(f"Could not run: {failed.message}")
            self.notify(failed.message, severity="error", markup=False)
        elif done is not None:
            self._stage_done(pane, done.stats)

    def _stage_done(self, pane: DemoPane, stats: GenerationStats) -> None:
        self.job = None
        pane.stream_done()
        pane.remove_class("-running")
        self.results[self.stage] = stats
        note = f"{stats.generated} tokens"
        if stats.mode == "speculative":
            note += f" · {100 * stats.acceptance_rate:.0f}% accepted · {stats.tokens_per_round:.2f} tok/pass"
        pane.show_speed(stats.decode_tokens_per_s, note)
        if stats.stop_reason == "cancelled" or self._stopped:
            self._verdict("Stopped. Ctrl+R (or Enter) runs it again.")
            return
        if self.stage == "baseline":
            self._verdict("Now target + draft…")
            self._start("speculative", self._text)
        else:
            self.show_result(
                self.results["baseline"].decode_tokens_per_s,
                stats.decode_tokens_per_s,
                self.pane("baseline").ids,
                self.pane("speculative").ids,
            )

    def show_result(self, base_tps: float, spec_tps: float, base_ids: list[int], spec_ids: list[int]) -> None:
        """The verdict line and the chart (also used by the snapshot tests with fixed numbers)."""
        t = Text()
        if base_tps > 0:
            self.query_one(SpeedChart).show(base_tps, spec_tps)
            t.append(f"Speedup {spec_tps / base_tps:.2f}×", style="bold")
            t.append(f"  ({spec_tps:.1f} vs {base_tps:.1f} tok/s)")
        if self.tandem.settings.greedy:
            diff = first_difference(base_ids, spec_ids)
            if diff is None:
                t.append(f"  ✓ identical output ({len(spec_ids)} tokens, greedy)", style="green")
            else:
                t.append(f"  ✗ outputs first differ at token {diff + 1}", style="yellow")
                t.append(" (a near-tie of the target's top two logits can flip; see the docs)", style="dim")
        else:
            t.append("  sampling: the two answers differ by design, from the same distribution", style="dim")
        self.query_one("#verdict", Static).update(t)

    def _verdict(self, text: str) -> None:
        self.query_one("#verdict", Static).update(text)

    def action_stop_or_back(self) -> None:
        if self.job is not None:
            self._stopped = True
            self.job.cancel.set()
            self._verdict("Stopping…")
        else:
            self.dismiss()

    def on_unmount(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
