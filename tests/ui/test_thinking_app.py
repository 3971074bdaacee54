"""A thinking model in the app: its reasoning streams into a folding section above the answer,
the panel counts reasoning and answer apart, F5 turns thinking off for one chat, saved chats
keep the reasoning. The target is a tiny random-weight model carrying Qwen3.5's real chat
template, whose generation prompt opens `<think>` (model_files.tiny_thinker)."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.pilot import Pilot
from ui_helpers import FIXED, run_app, send, wait_ready

import model_files
from tandem.engine import Origin
from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.conversations import Conversation, ConversationStore, Turn, encode_spans
from tandem.ui.settings import Settings, load_settings, save_settings
from tandem.ui.storage import AppDirs
from tandem.ui.widgets.chat_log import AnswerView
from tandem.ui.widgets.stats import StatsPanel, render_wide
from tandem.ui.widgets.thinking import ThinkingView


@pytest.fixture(scope="session")
def thinker_ref() -> PairRef:
    return PairRef(model_files.tiny_thinker(), model_files.tiny_thinker(draft=True))


def test_reasoning_streams_into_a_thinking_section_and_is_saved(dirs: AppDirs, thinker_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=thinker_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await send(pilot, "Hello there")
        chat = app.chat
        view = chat.query_one(AnswerView)
        # Qwen3.5's prompt opens the reasoning and a random model never closes it: everything
        # it wrote is reasoning, shown in the section, none of it (and no tag) in the answer.
        assert view.thinking is not None and view.thinking.text.strip()
        assert view.text == "" and "<think>" not in view.thinking.text
        assert {o for _, o in view.thinking.pieces} >= {Origin.DRAFT, Origin.TARGET}
        turn = chat.conv.turns[-1]
        assert turn.reasoning == view.thinking.text and turn.content == ""
        assert turn.stats["reasoning_tokens"] == turn.stats["generated"] == FIXED.max_tokens
        # The panel: reasoning and answer apart.
        panel = chat.query_one(StatsPanel).view
        assert panel.reasoning is not None and panel.answer is not None
        assert panel.reasoning.tokens == FIXED.max_tokens and panel.answer.tokens == 0
        assert panel.reasoning.drafted > 0 and panel.reasoning.acceptance is not None
        assert panel.answer.tokens_per_s is None and panel.answer.acceptance is None
        assert "thinking" in render_wide(panel).plain
        # An answer that ended while thinking keeps its section open (there is nothing else to
        # read); Ctrl+L folds it and opens it again.
        assert not view.thinking.folded
        await pilot.press("ctrl+l")
        assert view.thinking.folded
        await pilot.press("ctrl+l")
        assert not view.thinking.folded
        # Saved with its origins, and shown again when reopened.
        saved = ConversationStore(dirs.conversations).load(chat.conv.id)
        assert saved is not None
        assert encode_spans(saved.turns[-1].reasoning_pieces()) == encode_spans(view.thinking.pieces)
        chat.load_conversation(saved)
        await pilot.pause()
        reopened = chat.query_one(AnswerView)
        assert reopened.thinking is not None and reopened.thinking.text == turn.reasoning
        assert not reopened.thinking.folded

    run_app(app, scenario)


def test_f5_turns_thinking_off_for_this_chat(dirs: AppDirs, thinker_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=thinker_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        chat = app.chat
        await pilot.press("f5")
        assert chat.conv.think is False and chat.think is False
        await send(pilot, "Hello there")
        view = chat.query_one(AnswerView)
        # Thinking off: the template closed an empty reasoning in the prompt, so it is all answer.
        assert view.thinking is None and view.text
        assert chat.conv.turns[-1].reasoning == ""
        assert chat.query_one(StatsPanel).view.reasoning is None
        saved = ConversationStore(dirs.conversations).load(chat.conv.id)
        assert saved is not None and saved.think is False
        await pilot.press("f5")
        assert chat.conv.think is True

    run_app(app, scenario)


def test_thinking_setting_off_is_the_default_for_new_chats(
    dirs: AppDirs, thinker_ref: PairRef, write_settings: object
) -> None:
    assert callable(write_settings)
    write_settings(FIXED.updated(think=False))
    app = TandemApp(dirs=dirs, pair=thinker_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        assert app.chat.think is False
        await send(pilot, "Hello there")
        assert app.chat.query_one(AnswerView).thinking is None

    run_app(app, scenario)


def test_the_setting_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    for think in (None, True, False):
        save_settings(path, Settings(think=think))
        settings, notes = load_settings(path)
        assert settings.think is think and not notes


def test_saved_reasoning_of_the_wrong_type_is_refused() -> None:
    good = Turn("assistant", "answer", [], {}, "thought", [[7, "d"]]).to_json()
    assert Turn.from_json(good) == Turn("assistant", "answer", [], {}, "thought", [[7, "d"]])
    assert Turn.from_json({**good, "reasoning": 3}) is None
    assert Turn.from_json({**good, "reasoning_spans": [[1, "x"]]}) is None
    conv = Conversation(turns=[Turn("user", "hi")], think=False).to_json()
    assert Conversation.from_json(conv) is not None
    assert Conversation.from_json({**conv, "think": "no"}) is None


class _Answer(App[None]):
    def compose(self) -> ComposeResult:
        yield AnswerView()


def test_the_section_folds_when_the_answer_starts_unless_the_user_chose() -> None:
    """The widget alone (the tiny model above never ends its reasoning): reasoning arrives,
    then the answer; the section folds then, or stays open if the user opened it meanwhile."""

    async def main() -> None:
        for user_opens in (False, True):
            app = _Answer()
            async with app.run_test(size=(80, 24)) as pilot:
                view = app.query_one(AnswerView)
                view.append_reasoning([("Let me think", Origin.DRAFT), (" about it.", Origin.TARGET)])
                await pilot.pause()
                thinking = view.query_one(ThinkingView)
                assert not thinking.folded and "Thinking…" in str(thinking.header.render())
                if user_opens:
                    await pilot.click(thinking.header)  # folds it: the user chose
                    await pilot.click(thinking.header)  # and opens it again
                view.append([("Hello!", Origin.BONUS)])
                await pilot.pause()
                assert thinking.folded is not user_opens and view.text == "Hello!"
                assert "Thought for 5 words" in str(thinking.header.render())
                assert thinking.text == "Let me think about it."

    import asyncio

    asyncio.run(main())
