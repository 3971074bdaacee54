"""The app's pieces without a screen: settings file, saved chats, the engine -> UI hand-off,
and the incremental text widget."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest
from rich.style import Style
from textual.app import App, ComposeResult
from textual.strip import Strip

from tandem.engine import Origin, PrefillEvent, RoundEvent, TokenEvent
from tandem.session.files import atomic_write_text
from tandem.session.refs import PairRef
from tandem.ui.conversations import Conversation, ConversationStore, Turn, decode_spans, encode_spans
from tandem.ui.jobs import EventBuffer
from tandem.ui.live_stats import LiveStats
from tandem.ui.settings import Settings, load_settings, save_changes, save_settings, settings_toml
from tandem.ui.styles import STYLESHEET
from tandem.ui.widgets.pass_chart import PassChart
from tandem.ui.widgets.token_text import TokenText


# ---------------------------------------------------------------------- settings
def test_settings_round_trip_through_toml(tmp_path: Path) -> None:
    s = Settings(
        draft_max=7, adaptive=False, drafter="lookup", temperature=0.8, top_p=0.9, top_k=20, seed=3,
        max_tokens=99, n_ctx=2048, n_gpu_layers=0, n_threads=2,
        system_prompt='Say "hi"\n\tand\\ bye — ünïcode',
    )  # fmt: skip
    path = tmp_path / "settings.toml"
    save_settings(path, s)
    loaded, notes = load_settings(path)
    assert loaded == s and notes == []
    # None is written as an absent key.
    save_settings(path, Settings())
    assert "seed" not in path.read_text() and load_settings(path)[0] == Settings()


def test_bad_settings_files_fall_back_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    broken = tmp_path / "settings.toml.broken"
    assert load_settings(path) == (Settings(), [])  # no file: defaults, nothing to say
    path.write_text("top_k = 10\ndraft_max = = 3\n")
    s, notes = load_settings(path)
    assert s == Settings() and "could not be read" in notes[0] and "line 2" in notes[0]
    assert "settings.toml.broken" in notes[0] and broken.read_text() == path.read_text()
    path.write_text('# mine\ndraft_max = "five"\ncolour = 1\ntop_k = 10\n')
    s, notes = load_settings(path)
    assert s.top_k == 10 and s.draft_max == Settings().draft_max
    assert f"{path}:2: 'draft_max' must be an int, not a str" in notes[0]
    assert f"{path}:3: unknown setting 'colour'" in notes[1]
    path.write_text('drafter = "psychic"\n')
    s, notes = load_settings(path)
    assert s == Settings() and f"{path}:1: 'drafter': the drafter must be one of" in notes[0]
    path.write_text("top_k = 7\n  draft_max = 99\n")  # one bad value costs only itself
    s, notes = load_settings(path)
    assert s.top_k == 7 and s.draft_max == Settings().draft_max
    assert f"{path}:2: 'draft_max': K (draft max) must be between 0 and 32" in notes[0]
    assert broken.read_text() == path.read_text()  # the hand edit is kept before any save
    path.write_text("adaptive = 1\ntemperature = 1\n")  # an int is no bool; an int is a float
    s, notes = load_settings(path)
    assert s.adaptive is True and s.temperature == 1.0 and len(notes) == 1


def test_settings_toml_is_valid_for_tricky_strings() -> None:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10 (supported): the backport the app uses too
        import tomli as tomllib

    text = settings_toml(Settings(system_prompt="a\x01b\"c'''\n"))
    assert tomllib.loads(text)["system_prompt"] == "a\x01b\"c'''\n"


def test_a_change_saved_from_the_app_keeps_the_user_s_comments_and_keys(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    mine = (
        "# my settings, by hand\n"
        "version = 3\n"
        "temperature = 0.7  # warmer for stories\n"
        "\n"
        "# for the laptop\n"
        "n_threads = 2\n"
        "future_option = 'kept'  # a newer Tandem's\n"
    )
    path.write_text(mine)
    before, _ = load_settings(path)
    after = save_changes(path, before, before.updated(top_k=20, n_threads=None))
    text = path.read_text()
    assert text.startswith("# my settings, by hand\nversion = 3\ntemperature = 0.7  # warmer for stories\n")
    assert "# for the laptop" in text and "future_option = 'kept'  # a newer Tandem's" in text
    assert "n_threads" not in text and "top_k = 20" in text  # None: the key goes; a change: set
    assert load_settings(path)[0] == after and after.top_k == 20 and after.temperature == 0.7
    path.write_text("top_k = = 3\n")  # not TOML: written anew
    assert save_changes(path, Settings(), Settings(seed=5)).seed == 5
    assert load_settings(path)[0].seed == 5 and text.splitlines()[0] not in path.read_text()


def test_an_old_settings_file_upgrades_without_losing_a_chosen_value(tmp_path: Path) -> None:
    """A file an older app wrote (no version; every setting, its defaults included): its
    default draft_max and n_ctx are read as not chosen (a catalog pair's apply), everything
    else as chosen; the first change saved writes the version and keeps every value."""
    path = tmp_path / "settings.toml"
    path.write_text(
        'draft_max = 12\nadaptive = false\ndrafter = "lookup"\ntemperature = 0.7\ntop_k = 20\n'
        "top_p = 0.9\nmin_p = 0.1\nseed = 7\nmax_tokens = 300\nn_ctx = 4096\nn_gpu_layers = 0\n"
        'n_threads = 2\nsystem_prompt = "Be brief."\nexact = true\nthink = false\n'
        'rpc_servers = "10.0.0.1:50052, gpu-box:50052"\n'
    )
    old, notes = load_settings(path)
    assert notes == [] and old.draft_max is None and old.n_ctx is None  # the old app's defaults
    chosen = Settings(
        adaptive=False, drafter="lookup", temperature=0.7, top_k=20, top_p=0.9, min_p=0.1, seed=7,
        max_tokens=300, n_gpu_layers=0, n_threads=2, system_prompt="Be brief.", think=False,
        rpc_servers=("10.0.0.1:50052", "gpu-box:50052"),
    )  # fmt: skip
    # The old switch's "on" was "exact wherever the target allows it": not chosen now.
    assert old == chosen and old.exact is None
    saved = save_changes(path, old, old.updated(top_k=30))
    assert saved == chosen.updated(top_k=30) and load_settings(path) == (saved, [])
    text = path.read_text()
    assert "version = 3" in text and "draft_max" not in text and "n_ctx" not in text
    assert 'rpc_servers = ["10.0.0.1:50052", "gpu-box:50052"]' in text and "exact" not in text


def test_a_version_2_file_keeps_its_exact_off_and_reads_its_on_as_not_chosen(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text("version = 2\nexact = false\n")
    assert load_settings(path) == (Settings(exact=False), [])
    path.write_text("version = 2\nexact = true\n")
    assert load_settings(path) == (Settings(), [])
    path.write_text("version = 3\nexact = true\n")  # now: required
    assert load_settings(path) == (Settings(exact=True), [])


# ---------------------------------------------------------------------- conversations
def test_spans_round_trip() -> None:
    pieces = [("Hel", Origin.DRAFT), ("lo", Origin.DRAFT), (",", Origin.TARGET), (" wor", Origin.BONUS)]
    spans = encode_spans(pieces)
    assert spans == [[5, "d"], [1, "t"], [4, "b"]]
    assert decode_spans("Hello, wor", spans) == [
        ("Hello", Origin.DRAFT),
        (",", Origin.TARGET),
        (" wor", Origin.BONUS),
    ]
    # Damaged spans never lose text: what they do not cover is shown as the target's.
    assert decode_spans("Hello!", [[3, "d"], ["x", "?"]]) == [("Hel", Origin.DRAFT), ("lo!", Origin.TARGET)]


def test_conversation_store(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c")
    assert store.list() == []
    empty = Conversation()
    store.save(empty)
    assert store.list() == []  # empty chats are not saved
    conv = Conversation(system_prompt="sys", pair="p")
    conv.turns += [
        Turn("user", "  a   question\nwith lines "),
        Turn("assistant", "answer", [[6, "d"]], {"x": 1}),
    ]
    store.save(conv)
    (tmp_path / "c" / "junk.json").write_text("{not json")
    [summary] = store.list()
    assert summary.title == "a question with lines" and summary.turns == 2 and summary.pair == "p"
    again = store.load(conv.id)
    assert again is not None and again.to_json() == conv.to_json()
    assert [m.role for m in again.messages("next")] == ["system", "user", "assistant", "user"]
    assert not list((tmp_path / "c").glob("*.tmp"))
    store.delete(conv.id)
    assert store.list() == []


def test_damaged_conversations_are_kept_aside_and_reported(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c")
    good = Conversation()
    good.turns += [Turn("user", "hi"), Turn("assistant", "hello")]
    store.save(good)
    damaged = tmp_path / "c" / "20260101-000000-abcdef.json"
    damaged.write_text('{"id": "20260101-000000-abcdef", "turns": [')  # a crash mid-write elsewhere
    (tmp_path / "c" / "list.json").write_text("[1, 2]")  # valid JSON, not a conversation
    [summary] = store.list()
    assert summary.id == good.id  # the others keep working
    assert sorted(p.name.split(".")[0] for p in store.damaged) == ["20260101-000000-abcdef", "list"]
    backup = next(p for p in store.damaged if p.name.startswith("2026"))
    assert backup.parent == store.backup_directory
    assert backup.read_text() == '{"id": "20260101-000000-abcdef", "turns": ['  # byte for byte
    assert not damaged.exists()  # moved, so a later save under that id cannot overwrite it
    store.damaged.clear()
    assert len(store.list()) == 1 and store.damaged == []  # reported once


def test_atomic_write_leaves_the_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "w" / "f.json"
    atomic_write_text(path, "old")

    def boom(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        atomic_write_text(path, "new")
    assert path.read_text() == "old" and [p.name for p in path.parent.iterdir()] == ["f.json"]


# ---------------------------------------------------------------------- engine -> UI
def test_event_buffer_wakes_once_per_drain() -> None:
    wakes: list[int] = []
    buf = EventBuffer(lambda: wakes.append(1))
    for i in range(100):
        buf.push_event(TokenEvent(i, "x", Origin.DRAFT))
    assert len(wakes) == 1
    items = buf.drain()
    assert [ev.id for _, ev in items if isinstance(ev, TokenEvent)] == list(range(100))
    buf.push_event(TokenEvent(0, "y", Origin.TARGET))
    assert len(wakes) == 2


def test_event_buffer_from_a_thread_loses_nothing() -> None:
    got: list[int] = []
    ready = threading.Event()
    buf = EventBuffer(ready.set)

    def produce() -> None:
        for i in range(20000):
            buf.push_event(TokenEvent(i, "", Origin.DRAFT))

    t = threading.Thread(target=produce)
    t.start()
    while t.is_alive() or ready.is_set():
        ready.wait(0.01)
        ready.clear()
        got += [ev.id for _, ev in buf.drain() if isinstance(ev, TokenEvent)]
    got += [ev.id for _, ev in buf.drain() if isinstance(ev, TokenEvent)]
    assert got == list(range(20000))


def test_live_stats() -> None:
    live = LiveStats()
    live.feed(10.0, PrefillEvent(100, 20, 0.1))
    live.feed(10.5, RoundEvent(drafted=4, accepted=4, emitted=5, draft_s=0.1, verify_s=0.1, k=4))
    live.feed(11.0, RoundEvent(drafted=4, accepted=1, emitted=2, draft_s=0.1, verify_s=0.1, k=4))
    assert live.tokens_per_s == pytest.approx(7.0)
    assert live.acceptance == pytest.approx(5 / 8) and live.tokens_per_round == pytest.approx(3.5)
    assert live.per_round == [5.0, 2.0] and live.k == 4


def test_pair_labels() -> None:
    ref = PairRef(Path("/m/SmolLM2-135M-Instruct.F16.gguf"), Path("/m/SmolLM2-135M-Instruct.Q4_1.gguf"))
    assert ref.label == "SmolLM2-135M-Instruct F16 + Q4_1"
    assert PairRef(Path("/a/big.gguf"), Path("/b/small.gguf")).label == "big + small"
    assert PairRef(Path("a.gguf"), Path("b.gguf"), "cat-name").label == "cat-name"
    assert PairRef.from_json(ref.to_json()) == ref and PairRef.from_json({"target": "x"}) is None


# ---------------------------------------------------------------------- the text widget
class _Host(App[None]):
    CSS_PATH = STYLESHEET  # (the app's: its widgets are styled there)

    def __init__(self, widget: TokenText) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


def _lines(widget: TokenText) -> list[str]:
    return [widget.render_line(y).text.rstrip() for y in range(len(widget._strips) + len(widget._tail))]


def test_token_text_appends_like_a_whole_render() -> None:
    text = (
        "Here is code:\n```python\ndef f(x):\n    return x * 2  # a long comment line here\n```\nDone. " * 3
    )
    pieces = [(text[i : i + 3], list(Origin)[i % 3]) for i in range(0, len(text), 3)]

    async def main() -> tuple[list[str], list[str], int, int]:
        streamed = TokenText()
        async with _Host(streamed).run_test(size=(40, 60)) as pilot:
            for i in range(0, len(pieces), 5):
                streamed.append(pieces[i : i + 5])
                await pilot.pause()
            a = _lines(streamed)
            closed_before = len(streamed._strips)
            streamed.append([("!", Origin.TARGET)])  # only the open line is re-wrapped
            closed_after = len(streamed._strips)
        whole = TokenText(pieces)
        async with _Host(whole).run_test(size=(40, 60)) as pilot:
            await pilot.pause()
            b = _lines(whole)
        return a, b, closed_before, closed_after

    a, b, before, after = asyncio.run(main())
    assert a == b
    assert before == after
    assert max(len(line) for line in a) <= 40 and "```python" in a


def test_token_text_keeps_origins_and_code_background() -> None:
    async def main() -> None:
        w = TokenText(
            [("a", Origin.DRAFT), ("b\n", Origin.TARGET), ("```\n", Origin.DRAFT), ("code", Origin.BONUS)]
        )
        async with _Host(w).run_test(size=(30, 10)) as pilot:
            await pilot.pause()
            assert w.text == "ab\n```\ncode"
            assert w.pieces == [
                ("a", Origin.DRAFT), ("b", Origin.TARGET), ("\n", Origin.TARGET), ("```", Origin.DRAFT),
                ("\n", Origin.DRAFT), ("code", Origin.BONUS),
            ]  # fmt: skip
            colours = {str(s.style.color.triplet.hex) for s in w.render_line(0) if s.style and s.style.color}
            assert {"#7bd88f", "#f5c451"} <= colours
            code_bg = {s.style.bgcolor.triplet.hex for s in w.render_line(2) if s.style and s.style.bgcolor}
            assert "#262b36" in code_bg
            w.set_colour(False)
            plain = {
                s.style.color.triplet.hex
                for s in w.render_line(0)
                if s.style and s.style.color and s.style.color.triplet
            }
            assert "#7bd88f" not in plain

    asyncio.run(main())


def _cells(strip: Strip) -> list[tuple[str, Style | None]]:
    return [(ch, seg.style) for seg in strip for ch in seg.text]


def test_pass_chart_draws_columns_from_the_bottom_latest_at_the_right() -> None:
    async def main() -> None:
        chart = PassChart()
        async with _Host(chart).run_test(size=(10, 3)) as pilot:
            chart.set_data([1.0, 2.0, 4.0])
            await pilot.pause()
            rows = [chart.render_line(y).text for y in range(3)]
            # Three rows are 24 eighths and 4 is the top: 6, 12 and 24 eighths, at the right.
            assert rows == ["         █", "        ▄█", "       ▆██"]
            # More rounds than columns: the latest ten (i = 15..24: 0 1 2 0 1 2 0 1 2 0).
            chart.set_data([float(i % 3) for i in range(25)])
            await pilot.pause()
            rows = [chart.render_line(y).text for y in range(3)]
            assert rows == ["  █  █  █ ", " ▄█ ▄█ ▄█ ", " ██ ██ ██ "]
            # Taller bars are drawn in a deeper colour.
            cells = _cells(chart.render_line(2))
            short, tall = cells[1][1], cells[2][1]
            assert short is not None and tall is not None and short.color != tall.color

    asyncio.run(main())
