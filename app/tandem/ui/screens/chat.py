"""The chat screen: a multi-turn conversation with tokens coloured by origin, live numbers.

Each turn re-sends the whole conversation through the model's chat template; the engine keeps
both KV caches and reuses their longest common prefix, so only the new turn is prefilled (the
panel shows how many tokens that was).

Generation runs in a thread worker (`GenerationJob`); its events wait in a buffer that this
screen drains at most once a frame (screens/streaming.py), so a fast engine produces one
screen update per frame however many tokens it made, and appending never re-renders the
earlier text.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.widgets import Footer, Header, Input, Static

from tandem.engine import ChatPrompt, DoneEvent
from tandem.session.prompts import FittingChatPrompt, system_folded_note, thinking_note
from tandem.ui.conversations import Conversation, Turn, encode_spans
from tandem.ui.host import AppHost
from tandem.ui.jobs import GenerationJob, JobFailed
from tandem.ui.live_stats import LiveStats, stats_summary
from tandem.ui.screens.streaming import StreamingScreen, take_events
from tandem.ui.widgets.chat_log import AnswerView, ChatLog, Note, UserTurn
from tandem.ui.widgets.stats import Legend, StatsPanel, StatsView
from tandem.ui.widgets.token_text import Piece
from tandem.ui.workers import run_in_thread

if TYPE_CHECKING:
    from tandem.engine import ModelPair

# The numbers are redrawn at most every STATS_S while streaming (tokens: once a frame,
# screens/streaming.py); far below what the eye needs, and cheap for the engine's CPU.
STATS_S = 0.5
NARROW_BELOW = 100  # columns: below this the numbers go in a bar under the chat


class ChatScreen(StreamingScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "stop", "Stop"),
        Binding("ctrl+r", "regenerate", "Retry"),
        Binding("ctrl+n", "new_chat", "New"),
        Binding("ctrl+t", "toggle_colour", "Colour"),
        # Not in the footer (80 columns hold only so much): in the help screen and the palette.
        Binding("ctrl+y", "copy_answer", "Copy", show=False),
        Binding("ctrl+o", "open_chats", "Chats", show=False),
        Binding("ctrl+g", "edit_system", "System", show=False),
        # A thinking model: open or fold the last answer's reasoning; thinking on/off this chat.
        Binding("ctrl+l", "toggle_thinking", "Thinking", show=False),
        Binding("f5", "toggle_think", "Think on/off", show=False),
    ]

    def __init__(self) -> None:
        super().__init__(id="chat")
        self.conv = Conversation()
        self.answer: AnswerView | None = None
        self.live = LiveStats()
        self.colour = True
        self._last_stats = 0.0
        self._pending_user: UserTurn | None = None
        self._failed = False
        self._prompt: FittingChatPrompt | None = None
        self._folded_noted = False  # "the template takes no system prompt" said once per chat

    @property
    def tandem(self) -> AppHost:
        return cast("AppHost", self.app)  # (TandemApp: the app these screens run in)

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield Header(icon="⇉")
        with Horizontal(id="body"):
            with Vertical(id="main"):
                with Horizontal(id="system-row"):
                    yield Static("system ›", id="system-label")
                    yield Input(placeholder="no system prompt (Ctrl+G edits)", id="system")
                yield ChatLog(id="log")
                yield Legend()
                yield Input(placeholder="Message · Enter sends · Esc stops", id="prompt")
            yield StatsPanel()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.conv.system_prompt = self.tandem.settings.system_prompt
        self.query_one("#system", Input).value = self.conv.system_prompt
        self.query_one("#prompt", Input).focus()
        self.refresh_pair()

    def on_resize(self, event: Resize) -> None:
        narrow = event.size.width < NARROW_BELOW
        self.set_class(narrow, "-narrow")
        self.query_one(StatsPanel).set_narrow(narrow)

    @property
    def log_view(self) -> ChatLog:
        return self.query_one("#log", ChatLog)

    # ------------------------------------------------------------------ pair state
    def refresh_pair(self) -> None:
        """The app loaded, failed to load or re-measured a pair: update title and numbers."""
        app = self.tandem
        loaded = app.loaded
        self.sub_title = loaded.ref.label if loaded else "no pair loaded · F2 pairs"
        self.update_stats(force=True)

    def pair_loaded_note(self, text: str) -> None:
        self.log_view.mount(Note(text))
        self.log_view.follow()

    def _state_text(self) -> str:
        app = self.tandem
        if app.loading is not None:
            return f"loading {app.loading.label}…"
        if app.loaded is None:
            return "no pair loaded: F2 picks one"
        if self.job is not None:
            return "stopping…" if self.job.cancel.is_set() else "generating…"
        return "ready"

    def stats_view(self) -> StatsView:
        app = self.tandem
        live = self.live
        started = live.prefill is not None
        final = live.final
        # K, adaptive and the drafter as the engine runs them: from the answer's StartEvent
        # once there is one, else what the engine will run with these settings and this pair.
        if live.start is not None:
            k_max, adaptive, drafter = live.start.draft_max, live.start.adaptive, live.start.drafter
        else:
            cfg = app.generation_config()
            k_max, adaptive, drafter = cfg.k_max, cfg.drafts_adaptively, cfg.drafter
        parts = live.parts()
        record = live.record()
        return StatsView(
            pair=app.loaded.ref.label if app.loaded else "",
            state=self._state_text(),
            tokens_per_s=live.tokens_per_s if live.rounds else None,
            speedup=record.speedup,
            speedup_low=record.speedup_low,
            speedup_high=record.speedup_high,
            target_alone_tps=record.target_alone_tps,
            speedup_steps=record.speedup_steps,
            load_changed=record.load_changed,
            speculative=record.mode == "speculative",
            acceptance=live.acceptance if live.drafted else None,
            accepted=live.accepted,
            drafted=live.drafted,
            tokens_per_round=live.tokens_per_round if live.rounds else None,
            k=live.k if live.rounds else None,
            k_max=k_max,
            adaptive=adaptive,
            drafter=drafter,
            last_drafter=live.drafter,
            drafters=record.drafters,
            rounds=live.rounds,
            prefill_tokens=live.prefill.prefill_tokens if live.prefill else None,
            prompt_tokens=live.prefill.prompt_tokens if live.prefill else 0,
            generated=live.generated if started else 0,
            stop_reason=final.stop_reason if final else "",
            per_round=live.per_round,
            reasoning=parts[0] if parts else None,
            answer=parts[1] if parts else None,
        )

    def update_stats(self, force: bool = False) -> None:
        if not self.is_mounted:
            return
        now = time.monotonic()
        if force or now - self._last_stats >= STATS_S:
            self._last_stats = now
            self.query_one(StatsPanel).show(self.stats_view())

    # ------------------------------------------------------------------ sending
    @on(Input.Changed, "#system")
    def _system_changed(self, event: Input.Changed) -> None:
        # Applies from the next turn; the engine re-prefills from the first changed token.
        self.conv.system_prompt = event.value

    @on(Input.Submitted, "#system")
    def _system_done(self) -> None:
        self.query_one("#prompt", Input).focus()

    @on(Input.Submitted, "#prompt")
    def _submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.send(text):
            event.input.value = ""

    def send(self, text: str) -> bool:
        """Send a user message; False (with a notification) when that cannot happen now."""
        if not self._can_start():
            return False
        user = UserTurn(text)
        self.log_view.mount(user)
        self._pending_user = user
        self.conv.turns.append(Turn("user", text))
        self._start_answer()
        return True

    def _can_start(self) -> bool:
        app = self.tandem
        if self.job is not None:
            self.notify("Still answering: Esc stops it.", severity="warning", markup=False)
            return False
        if app.loading is not None:
            self.notify("The pair is still loading…", severity="warning", markup=False)
            return False
        if app.loaded is None:
            self.notify("No model pair is loaded: press F2 to pick one.", severity="warning", markup=False)
            return False
        return True

    def _start_answer(self) -> None:
        """Answer the conversation as it stands (its last turn is the user's)."""
        app = self.tandem
        assert app.loaded is not None
        messages = self.conv.messages()
        self.conv.pair = app.loaded.ref.label
        self.live = LiveStats()
        self._failed = False
        self._prompt = fitting = FittingChatPrompt(
            messages, app.settings.generation_config().max_tokens, think=self.think
        )

        def prompt(pair: ModelPair) -> ChatPrompt:
            fitting(pair)
            assert fitting.prompt is not None  # set by the call
            return fitting.prompt

        job = GenerationJob(
            app.loaded,
            prompt,
            app.generation_config(),
            speculative=True,
            wake=lambda: self._wake(job.id),
        )
        self.job = job
        self.answer = AnswerView(colour=self.colour)
        self.log_view.mount(self.answer)
        self.log_view.follow()
        self.update_stats(force=True)
        self._quiet_input(True)
        run_in_thread(self, job.run, group="generate", name="The answer")

    def _quiet_input(self, quiet: bool) -> None:
        # A blinking cursor repaints the screen twice a second; while the engine shares the CPU
        # with the UI, the prompt's cursor stays solid.
        self.query_one("#prompt", Input).cursor_blink = not quiet

    # ------------------------------------------------------------------ streaming
    @property
    def think(self) -> bool | None:
        """Thinking on or off for this chat: its own toggle (F5), else the setting (None: the
        model's default)."""
        return self.conv.think if self.conv.think is not None else self.tandem.settings.think

    def show_events(self, job: GenerationJob) -> None:
        reasoning: list[Piece] = []
        pieces, done, failed = take_events(job, self.live, reasoning=reasoning)
        log = self.log_view
        follow = log.near_end
        if self.answer is not None:
            if reasoning:
                self.answer.append_reasoning(reasoning)
            if pieces:
                self.answer.append(pieces)
        if done is not None:
            self._finish(done)
        elif failed is not None:
            self._fail(failed)
        else:
            self.update_stats()
        if follow:
            log.follow()

    def _finish(self, done: DoneEvent) -> None:
        answer = self.answer
        dropped = self._prompt.dropped if self._prompt is not None else 0
        loaded = self.tandem.loaded
        if dropped and answer is not None and loaded is not None:
            # Said where it happened, above the answer it affected.
            self.log_view.mount(
                Note(
                    f"The conversation no longer fits the {loaded.pair.context_size:,}-token "
                    f"context: the oldest {dropped} message(s) were left out of this answer "
                    "(the system prompt is kept). They stay in the saved chat."
                ),
                before=answer,
            )
        prompt = self.job.prompt if self.job is not None else None
        if prompt is not None and prompt.system_folded and not self._folded_noted and loaded is not None:
            self._folded_noted = True
            self.log_view.mount(Note(system_folded_note(loaded.pair) + "."), before=answer)
        summary = stats_summary(done.stats)
        if answer is not None:
            answer.finish(summary)
            spans = encode_spans(answer.tokens.pieces)
            thinking = answer.thinking
            self.conv.turns.append(
                Turn(
                    "assistant",
                    done.text,
                    spans,
                    summary,
                    reasoning=done.reasoning,
                    reasoning_spans=encode_spans(thinking.pieces) if thinking is not None else [],
                )
            )
        self.job = None
        self.answer = None
        self._pending_user = None
        self._quiet_input(False)
        self.tandem.save_conversation(self.conv)
        self.update_stats(force=True)

    def _fail(self, failed: JobFailed) -> None:
        """The engine refused (context full, no template...): undo the turn, keep the text."""
        self.job = None
        self._quiet_input(False)
        if self.answer is not None:
            self.answer.remove()
            self.answer = None
        if self._pending_user is not None:
            prompt = self.query_one("#prompt", Input)
            if not prompt.value:
                prompt.value = self._pending_user.text
            self._pending_user.remove()
            self._pending_user = None
            if self.conv.turns and self.conv.turns[-1].role == "user":
                self.conv.turns.pop()
        self._failed = True
        self.notify(failed.message, title="Could not answer", severity="error", timeout=8, markup=False)
        self.update_stats(force=True)

    def keep_unfinished(self) -> None:
        """The app is closing mid-answer (its engine job has already stopped): save the
        question and what was written of the answer, as Esc would have."""
        job, answer = self.job, self.answer
        if job is None:
            return
        new_reasoning: list[Piece] = []
        new_pieces, done, _ = take_events(job, self.live, reasoning=new_reasoning)
        pieces = (list(answer.tokens.pieces) if answer is not None else []) + new_pieces
        thought = (
            list(answer.thinking.pieces) if answer is not None and answer.thinking is not None else []
        ) + new_reasoning
        self.job = None
        self.answer = None
        text = done.text if done is not None else "".join(t for t, _ in pieces)
        reasoning = done.reasoning if done is not None else "".join(t for t, _ in thought)
        if text or reasoning:
            summary: dict[str, Any] = (
                stats_summary(done.stats) if done is not None else {"generated": len(pieces) + len(thought)}
            )
            summary["stop_reason"] = "app closed"
            self.conv.turns.append(
                Turn("assistant", text, encode_spans(pieces), summary, reasoning, encode_spans(thought))
            )
        self._pending_user = None
        self.tandem.save_conversation(self.conv)

    # ------------------------------------------------------------------ actions
    def action_stop(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
            self.update_stats(force=True)

    def stop_generation(self) -> None:
        self.action_stop()

    def action_regenerate(self) -> None:
        if self.job is not None:
            self.notify("Still answering: Esc stops it first.", severity="warning", markup=False)
            return
        if not self.conv.turns:
            self.notify("Nothing to regenerate yet.", markup=False)
            return
        if not self._can_start():
            return
        if self.conv.turns[-1].role == "assistant":
            self.conv.turns.pop()
            answers = list(self.log_view.query(AnswerView))
            if answers:
                answers[-1].remove()
        self._start_answer()

    def action_new_chat(self) -> None:
        self.action_stop()
        self._detach_job()
        self.tandem.save_conversation(self.conv)
        self.load_conversation(Conversation(system_prompt=self.tandem.settings.system_prompt))

    def _detach_job(self) -> None:
        """Forget a running job (it was cancelled; its events are ignored from now on)."""
        if self.job is not None:
            self.job.cancel.set()
            self.job = None
            if self.answer is not None:
                self.answer.finish({})
                self.answer = None

    def load_conversation(self, conv: Conversation) -> None:
        self._detach_job()
        self.conv = conv
        self._folded_noted = False
        self.live = LiveStats()
        log = self.log_view
        log.remove_children()
        widgets: list[Any] = []
        for turn in conv.turns:
            if turn.role == "user":
                widgets.append(UserTurn(turn.content))
            else:
                view = AnswerView(
                    turn.pieces(), colour=self.colour, finished=True, reasoning=turn.reasoning_pieces()
                )
                view.finish(turn.stats)
                widgets.append(view)
        if widgets:
            log.mount_all(widgets)
        self.query_one("#system", Input).value = conv.system_prompt
        log.follow()
        self.update_stats(force=True)

    def action_copy_answer(self) -> None:
        last = next((t for t in reversed(self.conv.turns) if t.role == "assistant"), None)
        if last is None:
            self.notify("No answer to copy yet.", markup=False)
            return
        # OSC 52: the terminal puts it on the clipboard (most terminals; tmux with set-clipboard).
        self.app.copy_to_clipboard(last.content)
        self.notify(f"Copied the last answer ({len(last.content)} characters).", markup=False)

    def action_toggle_colour(self) -> None:
        follow = self.log_view.near_end
        self.colour = not self.colour
        for view in self.log_view.query(AnswerView):
            view.set_colour(self.colour)
        self.query_one(Legend).set_colour(self.colour)
        if follow:
            self.call_after_refresh(self.log_view.follow)

    def action_open_chats(self) -> None:
        from tandem.ui.screens.conversations import ConversationsScreen

        def opened(conv_id: str | None) -> None:
            if conv_id is None:
                return
            conv = self.tandem.conversations.load(conv_id)
            if conv is None:
                self.notify("That conversation could not be read.", severity="error", markup=False)
                return
            self.action_stop()
            self.tandem.save_conversation(self.conv)
            self.load_conversation(conv)

        self.app.push_screen(ConversationsScreen(self.tandem.conversations), opened)

    def action_edit_system(self) -> None:
        self.query_one("#system", Input).focus()

    def action_toggle_thinking(self) -> None:
        """Open or fold the reasoning of the latest answer that has some."""
        for view in reversed(list(self.log_view.query(AnswerView))):
            if view.toggle_thinking():
                return
        self.notify("No answer here has a thinking section.", markup=False)

    def action_toggle_think(self) -> None:
        """Thinking on or off for this chat (from the next answer); the setting is the default."""
        loaded = self.tandem.loaded
        thinking = loaded.pair.thinking if loaded is not None else None
        current = self.think
        if current is None:  # the model's default: what it does unless told
            current = bool(thinking.default_on) if thinking is not None and thinking.thinks else True
        self.conv.think = not current
        line = f"Thinking {'on' if self.conv.think else 'off'} for this chat, from the next answer."
        note = thinking_note(loaded.pair, self.conv.think) if loaded is not None else None
        self.notify(f"{line} {note}." if note else line, markup=False)
