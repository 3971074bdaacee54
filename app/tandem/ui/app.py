"""TandemApp: owns the settings, the loaded pair and the files; the screens do the rest.

Loading a pair and generating run in Textual thread workers; they
report back with messages (`messages.py`), which Textual delivers on the UI thread. Only one
pair is loaded at a time: before a new one is loaded the old one is freed (big models would not
fit twice), but only after the cheap checks on the new files passed, and if loading still fails
the previous pair is loaded again, so a bad choice never leaves the app without a pair.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable
from functools import partial
from typing import Any, ClassVar

from filelock import Timeout
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from tandem.catalog import BUILTIN_DRAFTER_LABEL
from tandem.catalog.units import format_bytes
from tandem.engine import GenerationConfig
from tandem.session.drafting import drafts_itself, trained_drafter
from tandem.session.files import read_json, update_json
from tandem.session.pairs import as_loaded, load_pair
from tandem.session.preflight import APP_REMEDY, preflight
from tandem.session.prompts import pair_notes
from tandem.session.refs import DraftNeeds, PairRef
from tandem.ui.conversations import Conversation, ConversationStore
from tandem.ui.jobs import LoadedPair, failure_text
from tandem.ui.messages import PairLoaded, PairLoadFailed, WorkerFailed
from tandem.ui.priority import WorkerPool, lower_this_thread, ui_nice
from tandem.ui.screens.chat import ChatScreen
from tandem.ui.screens.picker import PickerScreen
from tandem.ui.settings import Settings, load_settings, save_changes
from tandem.ui.storage import AppDirs
from tandem.ui.styles import STYLESHEET
from tandem.ui.workers import run_in_thread

GIL_SWITCH_S = 0.0005


class TandemApp(App[None]):
    TITLE = "Tandem"
    # Every screen's and widget's styles, in one stylesheet (each rule within its class).
    CSS_PATH = STYLESHEET
    ENABLE_COMMAND_PALETTE = True
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help"),
        Binding("f2", "pairs", "Pairs"),
        Binding("f3", "demo", "Demo"),
        Binding("f4", "settings", "Setup"),
    ]

    def __init__(
        self,
        *,
        dirs: AppDirs | None = None,
        pair: PairRef | None = None,
    ) -> None:
        """`pair`: load it at start (`tandem chat`); otherwise the last pair used, or on a
        first run the pair picker."""
        super().__init__()
        self.dirs = dirs or AppDirs.default()
        self.settings, self._settings_notes = load_settings(self.dirs.settings_file)
        self.conversations = ConversationStore(self.dirs.conversations)
        self.initial_pair = pair
        self.loaded: LoadedPair | None = None
        self.loading: PairRef | None = None
        self.chat = ChatScreen()
        self.ui_lowered = False  # whether the UI thread runs below the engine's priority

    # ------------------------------------------------------------------ start
    async def on_mount(self) -> None:
        # The engine thread needs the GIL back each time a llama.cpp call returns; while the
        # UI thread holds it (drawing), Python hands it over only after the switch interval
        # (5 ms by default), and all of llama.cpp's threads wait for the engine thread.
        sys.setswitchinterval(GIL_SWITCH_S)
        # Thread workers (the engine among them) start from a normal-priority launcher, then
        # the UI thread yields the CPU to them (see priority.py).
        asyncio.get_running_loop().set_default_executor(WorkerPool())
        self.ui_lowered = lower_this_thread(ui_nice())
        await self.push_screen(self.chat)
        for note in self._settings_notes:
            self.notify(note, severity="warning", timeout=10, markup=False)
        self.check_saved_chats()
        ref = self.initial_pair or self.last_pair()
        if ref is not None:
            self.load_pair(ref)
        else:
            self.action_pairs(first_run=True)

    def last_pair(self) -> PairRef | None:
        """The pair used last, if its files are still there (with its catalog entry, so the
        pair's own settings apply as when it was picked)."""
        state = read_json(self.dirs.state_file)
        ref = PairRef.from_json(state.get("last_pair")) if isinstance(state, dict) else None
        if ref is not None and ref.target.is_file() and (ref.draft is None or ref.draft.is_file()):
            return ref.with_catalog_entry()
        return None

    def _remember_pair(self, ref: PairRef) -> None:
        def change(state: Any) -> dict[str, Any]:
            new: dict[str, Any] = dict(state) if isinstance(state, dict) else {}
            new["last_pair"] = ref.to_json()
            return new

        try:
            # Locked read-modify-write: another instance of the app may be saving its own state.
            update_json(self.dirs.state_file, change)
        except OSError as exc:  # the pair is loaded; only the next start will not reopen it
            self.notify(
                f"Could not remember this pair for the next start: {exc}", severity="warning", markup=False
            )

    # ------------------------------------------------------------------ loading
    def load_pair(self, ref: PairRef) -> bool:
        """Start loading `ref` in a worker; False if a load is already under way."""
        if self.loading is not None:
            self.notify(f"Already loading {self.loading.label}…", severity="warning", markup=False)
            return False
        self.loading = ref
        self.chat.stop_generation()
        self.chat.refresh_pair()
        options = self.settings.load_options(ref.spec)
        run_in_thread(
            self, partial(self._load_thread, ref, self.loaded, options), group="load", name="Loading the pair"
        )
        return True

    def _load_thread(self, ref: PairRef, old: LoadedPair | None, options: object) -> None:
        from tandem.engine import LoadOptions

        assert isinstance(options, LoadOptions)
        t0 = time.perf_counter()
        try:
            # Cheap checks first (headers and tokenizers, no weights): a wrong choice keeps
            # the current pair loaded. Without a draft the target drafts with its own heads.
            preflight(ref, DraftNeeds.of_pair(ref), remedy=APP_REMEDY)
        except Exception as exc:  # (anything else too: the app must leave its loading state)
            self.post_message(PairLoadFailed(ref, failure_text(exc), old))
            return
        if old is not None:
            old.close()  # waits for a running job to notice its cancel flag
        try:
            pair = load_pair(ref, options)
        except Exception as exc:
            restored: LoadedPair | None = None
            if old is not None:
                try:
                    restored = LoadedPair(old.ref, load_pair(old.ref, options))
                except Exception:
                    restored = None
            self.post_message(PairLoadFailed(ref, failure_text(exc), restored))
            return
        # (a companion that could not load was skipped: the pair kept is the one that loaded)
        self.post_message(PairLoaded(LoadedPair(as_loaded(ref, pair), pair), time.perf_counter() - t0))

    def on_pair_loaded(self, message: PairLoaded) -> None:
        self.loading = None
        self.loaded = message.loaded
        ref = message.loaded.ref
        self._remember_pair(ref)
        pair = message.loaded.pair
        sizes = f"target {format_bytes(pair.target.size_bytes)}"
        if pair.draft is not None:
            sizes += f", draft {format_bytes(pair.draft.size_bytes)}"
        elif (trained := trained_drafter(pair)) is not None and pair.draft_file is not None:
            sizes += f", draft {format_bytes(pair.draft_file.stat().st_size)}: {trained}"
        elif drafts_itself(pair):
            sizes += f", {BUILTIN_DRAFTER_LABEL}: its own draft heads"
        self.chat.pair_loaded_note(
            f"Loaded {ref.label} ({sizes}, context {pair.target.n_ctx:,} tokens)."
            + "".join(f" Note: {n}." for n in pair_notes(pair, raw_hint=False))  # the app has no --raw
        )
        self._pop_picker()
        self.chat.refresh_pair()

    def on_pair_load_failed(self, message: PairLoadFailed) -> None:
        self.loading = None
        self.loaded = message.current
        kept = f" Still using {message.current.ref.label}." if message.current else ""
        self.notify(
            message.error + kept,
            title=f"Could not load {message.ref.label}",
            severity="error",
            timeout=12,
            markup=False,
        )
        self.chat.refresh_pair()
        picker = self._picker()
        if picker is not None:
            picker.load_failed(message.ref, message.error)
        elif message.current is None:
            self.action_pairs()

    # ------------------------------------------------------------------ conversations
    def save_conversation(self, conv: Conversation) -> None:
        try:
            self.conversations.save(conv)
        except OSError as exc:
            self.notify(f"Could not save the chat: {exc}", severity="error", markup=False)

    def check_saved_chats(self) -> None:
        """Read the saved chats once; any file that is not a readable chat has been moved to a
        backup folder by the store: say so, and where (it is never deleted)."""
        try:
            self.conversations.list()
        except OSError as exc:
            self.notify(f"Could not read the saved chats: {exc}", severity="error", markup=False)
            return
        damaged, self.conversations.damaged = self.conversations.damaged, []
        if damaged:
            self.notify(
                f"{len(damaged)} saved chat file(s) could not be read and were moved to "
                f"{damaged[0].parent} (kept as they were; the other chats are fine).",
                title="Damaged saved chats",
                severity="warning",
                timeout=15,
                markup=False,
            )
        unreadable = self.conversations.unreadable
        if unreadable:
            path, error = unreadable[0]
            self.notify(
                f"{len(unreadable)} saved chat file(s) could not be read right now and were left where "
                f"they are (first: {path.name}: {error.strerror or error}); they show again once readable.",
                title="Saved chats not read",
                severity="warning",
                timeout=15,
                markup=False,
            )

    def generation_config(self) -> GenerationConfig:
        """The settings as the engine will run them with the loaded pair (its catalog entry's
        draft_max and p_min apply where the settings leave them unchosen)."""
        return self.settings.generation_config(self.loaded.ref.spec if self.loaded else None)

    def chat_busy(self) -> bool:
        return self.chat.job is not None

    # ------------------------------------------------------------------ screens
    def _picker(self) -> PickerScreen | None:
        for screen in self.screen_stack:
            if isinstance(screen, PickerScreen):
                return screen
        return None

    def _pop_picker(self) -> None:
        picker = self._picker()
        if picker is not None:
            while self.screen is not picker:
                self.pop_screen()
            self.pop_screen()

    def _reset_to_chat(self) -> None:
        while len(self.screen_stack) > 2 and self.screen is not self.chat:
            self.pop_screen()

    def action_help(self) -> None:
        from tandem.ui.screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_pairs(self, first_run: bool = False) -> None:
        if self._picker() is not None:
            return
        self._reset_to_chat()
        self.push_screen(PickerScreen(first_run=first_run))

    def action_demo(self) -> None:
        from tandem.ui.screens.demo import DemoScreen

        if isinstance(self.screen, DemoScreen):
            return
        self._reset_to_chat()
        self.push_screen(DemoScreen())

    def action_settings(self) -> None:
        from tandem.ui.screens.settings import SettingsScreen

        if isinstance(self.screen, SettingsScreen):
            return
        self.push_screen(SettingsScreen(self.settings), self._settings_saved)

    def _settings_saved(self, settings: Settings | None) -> None:
        if settings is None:
            return
        old, self.settings = self.settings, settings
        try:
            # Only what changed here is written: another instance's saved changes stay.
            self.settings = save_changes(self.dirs.settings_file, old, settings)
        except (OSError, Timeout) as exc:
            self.notify(f"Could not save the settings: {exc}", severity="error", markup=False)
        self.chat.refresh_pair()
        if self.loaded is not None and settings.needs_reload(old, self.loaded.ref.spec):
            self.notify("Loading options changed: reloading the pair.", markup=False)
            self.load_pair(self.loaded.ref)
        else:
            self.notify("Settings saved.", markup=False)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        chat = self.chat
        yield SystemCommand("Pairs", "Pick, download or open a target + draft pair (F2)", self.action_pairs)
        yield SystemCommand("Speed demo", "Target alone vs speculative, side by side (F3)", self.action_demo)
        yield SystemCommand(
            "Settings", "K, adaptive drafting, sampling, context, GPU layers (F4)", self.action_settings
        )
        yield SystemCommand("Help", "What the colours and the numbers mean (F1)", self.action_help)
        yield SystemCommand("New chat", "Start a new conversation (Ctrl+N)", chat.action_new_chat)
        yield SystemCommand("Saved chats", "Reopen a saved conversation (Ctrl+O)", chat.action_open_chats)
        yield SystemCommand("Regenerate", "Answer the last message again (Ctrl+R)", chat.action_regenerate)
        yield SystemCommand("Stop", "Stop the answer, keep what was written (Esc)", chat.action_stop)
        yield SystemCommand(
            "Copy last answer", "To the clipboard via OSC 52 (Ctrl+Y)", chat.action_copy_answer
        )
        yield SystemCommand(
            "Toggle colours", "Colours by token origin / plain reading (Ctrl+T)", chat.action_toggle_colour
        )
        yield SystemCommand("Edit system prompt", "Focus the system prompt (Ctrl+G)", chat.action_edit_system)

    # ------------------------------------------------------------------ failures
    def on_worker_failed(self, message: WorkerFailed) -> None:
        """The safety net under every worker (app/ui/workers.py): one that failed on something
        its own reporting did not expect is shown, and the app goes on."""
        self.notify(
            f"{message.name} stopped: {failure_text(message.error)}",
            title="Something went wrong",
            severity="error",
            timeout=15,
            markup=False,
        )

    # ------------------------------------------------------------------ exit
    def on_unmount(self) -> None:
        # Stop any generation so its thread ends within one step, then free the models
        # (llama.cpp must not be torn down under a running decode).
        for screen in (self.chat, *self.screen_stack):
            job = getattr(screen, "job", None)
            if job is not None:
                job.cancel.set()
        if self.loaded is not None:
            self.loaded.close()  # waits for the cancelled job to finish its step
            self.loaded = None
        # Only now is the answer complete: keep it (and the question) in the saved chat.
        self.chat.keep_unfinished()
