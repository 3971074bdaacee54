"""The chat screen against real models: send, stream coloured tokens, stop, regenerate..."""

from __future__ import annotations

import time

from textual.pilot import Pilot
from textual.widgets import Input, Markdown
from ui_helpers import FIXED, run_app, send, start_sending, wait_for, wait_ready

from tandem.engine import Origin
from tandem.session.refs import PairRef
from tandem.ui.app import TandemApp
from tandem.ui.conversations import ConversationStore
from tandem.ui.storage import AppDirs
from tandem.ui.widgets.chat_log import AnswerView, Note, UserTurn
from tandem.ui.widgets.stats import Legend, StatsPanel


def test_send_streams_coloured_tokens_and_saves(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        view = app.chat.query_one(StatsPanel).view
        assert view.speedup is None  # timed during each answer: nothing yet
        await send(pilot, "Hello there")
        chat = app.chat
        answers = list(chat.query(AnswerView))
        assert len(answers) == 1 and len(list(chat.query(UserTurn))) == 1
        pieces = answers[0].tokens.pieces
        origins = {o for _, o in pieces}
        # The tiny draft agrees with its target about half the time: both kinds appear.
        assert Origin.DRAFT in origins and Origin.TARGET in origins
        # The rendered lines carry the origin colours.
        strip_styles = {
            str(seg.style.color.triplet.hex)
            if seg.style and seg.style.color and seg.style.color.triplet
            else ""
            for strip in answers[0].tokens._strips + answers[0].tokens._tail
            for seg in strip
        }
        assert "#7bd88f" in strip_styles  # draft accepted (green)
        turns = chat.conv.turns
        assert [t.role for t in turns] == ["user", "assistant"]
        assert turns[1].content and turns[1].stats["generated"] == 32
        view = chat.query_one(StatsPanel).view
        assert view.prefill_tokens is not None and view.prefill_tokens == view.prompt_tokens
        assert view.tokens_per_s and view.speedup and view.acceptance is not None
        # Against the target alone timed during this answer, never above tokens per pass.
        assert view.speedup_steps >= 1 and view.target_alone_tps
        assert view.speedup_low is not None and view.speedup_high is not None
        assert view.speedup_low <= view.speedup <= view.speedup_high <= view.tokens_per_round + 1e-9
        assert turns[1].stats["speedup"] == round(view.speedup, 3)
        assert view.k is not None and 0 <= view.k <= 4 and view.per_round
        # Saved on disk, origins included.
        saved = ConversationStore(dirs.conversations).load(chat.conv.id)
        assert saved is not None and saved.turns[1].pieces() == turns[1].pieces()

    run_app(app, scenario)


def test_second_turn_prefills_only_the_new_turn(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await send(pilot, "First question")
        first = app.chat.live.prefill
        await send(pilot, "And a second one")
        second = app.chat.live.prefill
        assert first is not None and second is not None
        assert second.prompt_tokens > first.prompt_tokens
        # The first turn and its answer stay in the KV cache: only the new turn is prefilled.
        assert second.prefill_tokens < second.prompt_tokens - first.prompt_tokens
        assert len(app.chat.conv.turns) == 4

    run_app(app, scenario)


def test_escape_stops_at_once_and_keeps_the_text(
    dirs: AppDirs, smollm2_ref: PairRef, write_settings: object
) -> None:
    assert callable(write_settings)
    write_settings(FIXED.updated(max_tokens=400, adaptive=True, draft_max=12))
    app = TandemApp(dirs=dirs, pair=smollm2_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        chat = app.chat
        await start_sending(pilot, "Write a long story about a lighthouse keeper.")
        await wait_for(pilot, lambda: chat.answer is not None and len(chat.answer.text) > 20, 60, "tokens")
        await pilot.press("escape")
        await wait_for(pilot, lambda: chat.job is None, 10, "stop")
        last = chat.conv.turns[-1]
        assert last.role == "assistant" and last.stats["stop_reason"] == "cancelled"
        assert 0 < last.stats["generated"] < 400 and len(last.content) > 20
        # The chat goes on after a stop.
        app.settings = app.settings.updated(max_tokens=16)
        await send(pilot, "Thanks!")
        assert chat.conv.turns[-1].role == "assistant" and len(chat.conv.turns) == 4

    run_app(app, scenario)


def test_quitting_mid_answer_saves_what_was_written_and_exits_cleanly(
    dirs: AppDirs, smollm2_ref: PairRef, write_settings: object
) -> None:
    assert callable(write_settings)
    write_settings(FIXED.updated(max_tokens=400, adaptive=True, draft_max=12))
    app = TandemApp(dirs=dirs, pair=smollm2_ref)
    seen: dict[str, object] = {}

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        chat = app.chat
        await start_sending(pilot, "Write a long story about a lighthouse keeper.")
        await wait_for(pilot, lambda: chat.answer is not None and len(chat.answer.text) > 20, 60, "tokens")
        assert chat.answer is not None
        seen["shown"] = chat.answer.text
        seen["id"] = chat.conv.id
        seen["quit_at"] = time.monotonic()
        await pilot.press("ctrl+q")  # quit while the engine is mid-answer

    run_app(app, scenario)
    assert time.monotonic() - float(seen["quit_at"]) < 5  # type: ignore[arg-type]
    assert app.loaded is None  # the models were freed after the job stopped
    saved = ConversationStore(dirs.conversations).load(str(seen["id"]))
    assert saved is not None
    assert [t.role for t in saved.turns] == ["user", "assistant"]
    answer = saved.turns[-1]
    assert answer.stats["stop_reason"] == "app closed"
    assert answer.content.startswith(str(seen["shown"]))  # nothing shown was lost
    assert {o for _, o in answer.pieces()} >= {Origin.DRAFT}  # with its colours


def test_regenerate_new_chat_copy_and_reopen(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        chat = app.chat
        await send(pilot, "Tell me something")
        first = chat.conv.turns[-1].content
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: chat.job is None and len(chat.conv.turns) == 2, 30, "regenerate")
        assert [t.role for t in chat.conv.turns] == ["user", "assistant"]
        assert chat.conv.turns[-1].content == first  # greedy: the same answer again
        assert len(list(chat.query(AnswerView))) == 1
        await pilot.press("ctrl+y")
        assert app.clipboard == first
        conv_id = chat.conv.id
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert chat.conv.id != conv_id and not chat.conv.turns and not list(chat.query(AnswerView))
        await pilot.press("ctrl+o")
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert chat.conv.id == conv_id and len(list(chat.query(AnswerView))) == 1
        assert chat.query_one(AnswerView).text == first

    run_app(app, scenario)


def test_colour_toggle_switches_to_markdown(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        await send(pilot, "Hi")
        answer = app.chat.query_one(AnswerView)
        assert answer.tokens.display
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert not answer.tokens.display and answer.query_one(Markdown).display
        assert "plain reading" in str(app.chat.query_one(Legend).render())
        await pilot.press("ctrl+t")
        await pilot.pause()
        assert answer.tokens.display and not answer.query_one(Markdown).display

    run_app(app, scenario)


def test_system_prompt_is_sent(dirs: AppDirs, tiny_ref: PairRef) -> None:
    app = TandemApp(dirs=dirs, pair=tiny_ref)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        chat = app.chat
        await pilot.press("ctrl+g")
        system = chat.query_one("#system", Input)
        assert system.has_focus
        system.value = "You answer in French."
        await pilot.press("enter")
        assert chat.query_one("#prompt", Input).has_focus
        await send(pilot, "Bonjour")
        msgs = chat.conv.messages()
        assert msgs[0].role == "system" and msgs[0].content == "You answer in French."

    run_app(app, scenario)


def test_no_pair_sending_says_what_to_do(dirs: AppDirs) -> None:
    app = TandemApp(dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.pause()
        # First run: the picker is open; going back to the chat is refused without a pair.
        assert app.screen.id == "picker"
        assert app.chat.send("hello") is False
        await pilot.pause()
        assert any("F2" in n.message for n in app._notifications), [n.message for n in app._notifications]

    run_app(app, scenario)


def test_damaged_saved_chat_is_reported_at_start_and_kept(dirs: AppDirs) -> None:
    folder = dirs.conversations
    folder.mkdir(parents=True)
    (folder / "20260101-000000-abcdef.json").write_text('{"id": "x", "turns": [')
    app = TandemApp(dirs=dirs)

    async def scenario(pilot: Pilot[None]) -> None:
        await pilot.pause()
        messages = [n.message for n in app._notifications]
        assert any("could not be read and were moved to" in m and "damaged" in m for m in messages), messages

    run_app(app, scenario)
    [backup] = (folder / "damaged").iterdir()
    assert backup.read_text() == '{"id": "x", "turns": ['


def test_a_conversation_outgrowing_the_context_drops_its_oldest_turns_with_a_notice(
    dirs: AppDirs, smollm2_ref: PairRef, write_settings: object
) -> None:
    assert callable(write_settings)
    write_settings(FIXED.updated(n_ctx=256, max_tokens=12, system_prompt="Be brief."))
    app = TandemApp(dirs=dirs, pair=smollm2_ref)
    long_message = "Please remember this list: " + ", ".join(f"item {i}" for i in range(30))

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_ready(pilot)
        chat = app.chat
        for _ in range(4):
            await send(pilot, long_message)
            assert not chat._failed
        notes = [str(n.render()) for n in chat.query(Note)]
        assert any("the oldest" in n and "left out of this answer" in n for n in notes), notes
        assert len(chat.conv.turns) == 8  # everything stays in the saved chat

    run_app(app, scenario)
