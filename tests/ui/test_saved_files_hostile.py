"""Saved files that are damaged, briefly unreadable or written by two instances at once: the app
starts, keeps every healthy chat where it is, sets damaged ones aside (reported, never deleted)
and loses no update to state.json.

The conversation store is used without the Textual app: that is all the app calls at start
(check_saved_chats -> list()) and when a chat is reopened (load()).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.engine import Origin
from tandem.session.files import read_json, update_json
from tandem.ui.conversations import Conversation, ConversationStore, Turn, decode_spans
from tandem.ui.settings import Settings, load_settings
from tandem.ui.storage import AppDirs

REPO = Path(__file__).resolve().parents[2]


def _healthy(store: ConversationStore, text: str = "hi") -> Conversation:
    conv = Conversation(system_prompt="sys", pair="p")
    conv.turns += [
        Turn("user", text),
        Turn("assistant", "hello there", [[5, "d"], [6, "t"]], {"generated": 3, "tokens_per_s": 10.5}),
    ]
    store.save(conv)
    return conv


def _write_raw(store: ConversationStore, conv_id: str, text: str) -> Path:
    path = store.directory / f"{conv_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _valid_json(conv_id: str) -> dict[str, Any]:
    return {
        "version": 1,
        "id": conv_id,
        "pair": "p",
        "created": 1795262400.0,
        "updated": 1795262460.0,
        "system_prompt": "",
        "turns": [
            {"role": "user", "content": "question"},
            {
                "role": "assistant",
                "content": "answer",
                "spans": [[3, "d"], [3, "b"]],
                "stats": {"mode": "speculative", "tokens_per_s": 12.0, "acceptance": 0.5, "generated": 2},
            },
        ],
    }


def _assert_set_aside(store: ConversationStore, path: Path, original: str) -> None:
    assert not path.exists(), "a damaged chat must be moved out of the way"
    [backup] = store.damaged
    assert backup.parent == store.backup_directory and backup.name.startswith(path.stem + ".")
    assert backup.read_text(encoding="utf-8") == original  # kept byte for byte


# ---------------------------------------------------------------------- damaged chat files
def test_a_created_date_that_is_not_a_number_does_not_stop_the_app(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c")
    good = _healthy(store)
    data = _valid_json("20260101-000000-aaaaaa")
    data["created"] = "yesterday"
    original = json.dumps(data)
    path = _write_raw(store, data["id"], original)
    [summary] = store.list()  # raised ValueError (float("yesterday")) before
    assert summary.id == good.id
    _assert_set_aside(store, path, original)


def test_infinite_spans_are_set_aside_and_reopening_does_not_raise(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c")
    data = _valid_json("20260101-000000-bbbbbb")
    data["turns"][1]["spans"] = [[float("inf"), "d"]]
    original = json.dumps(data)  # writes the bare word Infinity, as Python's json does
    assert "Infinity" in original
    path = _write_raw(store, data["id"], original)
    # Reopened directly (the file was damaged after the list was shown): load() used to return a
    # conversation whose pieces() raised OverflowError while the chat screen drew it.
    conv = store.load(data["id"])
    if conv is not None:
        for turn in conv.turns:
            turn.pieces()
    assert conv is None
    _assert_set_aside(store, path, original)
    # The same through the app's start: list() first.
    store.damaged.clear()
    path = _write_raw(store, data["id"], original)
    assert store.list() == []
    assert store.load(data["id"]) is None
    _assert_set_aside(store, path, original)
    # decode_spans itself keeps the text whatever the spans say.
    for bad in (float("inf"), float("nan"), -1, 10**400, "9" * 5000):
        assert decode_spans("abc", [[bad, "d"], [1, "b"]])[-1][0].endswith("c")
    assert decode_spans("abc", [[float("inf"), "d"]]) == [("abc", Origin.TARGET)]


def _damage(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def apply(d: dict[str, Any]) -> dict[str, Any]:
        change(d)
        return d

    return apply


def _set(*keys: Any, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        target = d
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return change


BAD_VALUES: dict[str, Callable[[dict[str, Any]], None]] = {
    "id-number": _set("id", value=5),
    "id-empty": _set("id", value="/.."),
    "version-text": _set("version", value="1"),
    "pair-list": _set("pair", value=["p"]),
    "system-prompt-number": _set("system_prompt", value=3),
    "created-text": _set("created", value="yesterday"),
    "created-bool": _set("created", value=True),
    "created-negative": _set("created", value=-5.0),
    "updated-infinite": _set("updated", value=float("inf")),
    "updated-nan": _set("updated", value=float("nan")),
    "updated-year-33658": _set("updated", value=1e12),
    "updated-huge-int": _set("updated", value=10**400),
    "turns-dict": _set("turns", value={"0": {}}),
    "turn-not-a-dict": _set("turns", 0, value="hi"),
    "role-unknown": _set("turns", 0, "role", value="robot"),
    "content-number": _set("turns", 0, "content", value=7),
    "content-lone-surrogate": _set("turns", 0, "content", value="a\ud800b"),
    "spans-dict": _set("turns", 1, "spans", value={}),
    "span-infinite": _set("turns", 1, "spans", value=[[float("inf"), "d"]]),
    "span-negative": _set("turns", 1, "spans", value=[[-3, "d"]]),
    "span-float": _set("turns", 1, "spans", value=[[2.5, "d"]]),
    "span-unknown-origin": _set("turns", 1, "spans", value=[[3, "x"]]),
    "span-short": _set("turns", 1, "spans", value=[[3]]),
    "stats-list": _set("turns", 1, "stats", value=[1]),
    "stats-speed-text": _set("turns", 1, "stats", "tokens_per_s", value="fast"),
    "stats-acceptance-nan": _set("turns", 1, "stats", "acceptance", value=float("nan")),
    "stats-generated-negative": _set("turns", 1, "stats", "generated", value=-1),
    "stats-mode-number": _set("turns", 1, "stats", "mode", value=1),
    "stats-nested": _set("turns", 1, "stats", "extra", value={"a": [1]}),
}


@pytest.mark.parametrize("damage", list(BAD_VALUES), ids=list(BAD_VALUES))
def test_every_field_is_checked_and_a_bad_one_sets_the_file_aside(tmp_path: Path, damage: str) -> None:
    store = ConversationStore(tmp_path / "c")
    good = _healthy(store)
    data = _damage(BAD_VALUES[damage])(_valid_json("20260101-000000-cccccc"))
    original = json.dumps(data)
    path = _write_raw(store, "20260101-000000-cccccc", original)
    assert [s.id for s in store.list()] == [good.id]
    _assert_set_aside(store, path, original)


@pytest.mark.parametrize(
    "text",
    ["", "{", "[1, 2]", "null", '"text"', "[" * 100_000, b"\xff\xfe{}".decode("latin-1")],
    ids=["empty", "truncated", "list", "null", "string", "deep-nesting", "not-utf8"],
)
def test_files_that_are_not_json_chats_are_set_aside(tmp_path: Path, text: str) -> None:
    store = ConversationStore(tmp_path / "c")
    path = store.directory / "x.json"
    store.directory.mkdir(parents=True)
    path.write_bytes(text.encode("latin-1"))
    assert store.list() == []
    assert not path.exists() and [p.read_bytes() for p in store.damaged] == [text.encode("latin-1")]


def test_valid_files_are_read_as_before(tmp_path: Path) -> None:
    """Missing optional fields keep their defaults; unknown fields are ignored; ints for floats."""
    store = ConversationStore(tmp_path / "c")
    data = _valid_json("20260101-000000-dddddd")
    data.update(created=1795262400, future_field={"x": 1})
    del data["version"], data["system_prompt"], data["pair"]
    del data["turns"][1]["spans"]
    data["turns"][1]["stats"]["note"] = None
    _write_raw(store, data["id"], json.dumps(data))
    [summary] = store.list()
    assert store.damaged == [] and summary.turns == 2
    conv = store.load(data["id"])
    assert conv is not None and conv.created == 1795262400 and conv.system_prompt == "" and conv.pair == ""
    assert conv.turns[1].pieces() == [("answer", Origin.TARGET)]
    assert Conversation.from_json(conv.to_json()) == conv


# ---------------------------------------------------------------------- transient read errors
@pytest.fixture
def unreadable(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path, int], Callable[[], None]]]:
    """Make one file fail to read, as a transient error would; returns a function that undoes it.

    Not root: a real chmod 000 (EACCES). As root, permissions do not stop reads, so Path.open and
    os.open are patched for that one path to raise the error (Path.read_text and read_bytes go
    through the first, small_files.read_small_text through the second)."""
    undo: list[Callable[[], None]] = []

    def make(path: Path, err: int) -> Callable[[], None]:
        if err == errno.EACCES and os.geteuid() != 0:
            mode = path.stat().st_mode
            path.chmod(0)
            restore = lambda: path.chmod(mode)  # noqa: E731
        else:
            real_open, real_os_open = Path.open, os.open

            def failing_open(self: Path, *args: Any, **kwargs: Any) -> Any:
                if self == path:
                    raise OSError(err, os.strerror(err), str(self))
                return real_open(self, *args, **kwargs)

            def failing_os_open(name: Any, *args: Any, **kwargs: Any) -> int:
                if Path(name) == path:
                    raise OSError(err, os.strerror(err), str(name))
                return real_os_open(name, *args, **kwargs)

            monkeypatch.setattr(Path, "open", failing_open)
            monkeypatch.setattr(os, "open", failing_os_open)

            def restore() -> None:
                monkeypatch.setattr(Path, "open", real_open)
                monkeypatch.setattr(os, "open", real_os_open)

        undo.append(restore)
        return restore

    yield make
    for restore in undo:
        restore()


@pytest.mark.parametrize("err", [errno.EACCES, errno.EIO], ids=["EACCES", "EIO"])
def test_a_chat_that_cannot_be_read_for_now_is_left_where_it_is(
    tmp_path: Path, unreadable: Callable[[Path, int], Callable[[], None]], err: int
) -> None:
    store = ConversationStore(tmp_path / "c")
    other = _healthy(store, "other")
    conv = _healthy(store, "this one")
    path = store.directory / f"{conv.id}.json"
    original = path.read_bytes()
    restore = unreadable(path, err)
    assert [s.id for s in store.list()] == [other.id]  # skipped, the others listed
    assert store.damaged == [] and not store.backup_directory.exists()  # not moved
    assert [(p, e.errno) for p, e in store.unreadable] == [(path, err)]  # reported
    assert store.load(conv.id) is None  # reopening it now: not read, not moved
    assert store.damaged == [] and path.exists()
    restore()
    assert path.read_bytes() == original
    assert {s.id for s in store.list()} == {other.id, conv.id} and store.unreadable == []
    again = store.load(conv.id)
    assert again is not None and again.to_json() == conv.to_json()


def test_update_json_never_overwrites_a_file_it_could_not_read(
    tmp_path: Path, unreadable: Callable[[Path, int], Callable[[], None]]
) -> None:
    path = tmp_path / "state.json"

    def put(key: str) -> Callable[[Any], dict[str, Any]]:
        return lambda data: {**(data if isinstance(data, dict) else {}), key: 1}

    update_json(path, put("a"))
    before = path.read_bytes()
    restore = unreadable(path, errno.EIO)
    with pytest.raises(OSError):
        update_json(path, put("b"))
    restore()
    assert path.read_bytes() == before  # "a" is not lost
    # A missing or damaged file is replaced, as before.
    path.write_text("{broken")
    update_json(path, put("b"))
    assert list(read_json(path)) == ["b"]


# ---------------------------------------------------------------------- not a file at all
def _within(seconds: float, work: Callable[[], Any]) -> Any:
    """What `work` returned, run in a daemon thread: a regression that blocks on a pipe fails
    the test after `seconds` instead of hanging the suite."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    assert out, "it raised (see the thread's traceback above)"
    return out[0]


def _not_a_file(path: Path, kind: str, elsewhere: Path) -> None:
    """Put something that is not a regular file at `path`: a named pipe (reading it waits for a
    writer forever), a link to /dev/zero (endless zeros), a link to a real chat elsewhere (links
    are not followed), or a sparse file of 128 MiB (more than any file the app writes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "link":
        path.symlink_to(elsewhere)
    else:
        with path.open("wb") as fh:
            fh.truncate(128 << 20)


NOT_FILES = ["fifo", "dev-zero", "link", "huge"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("kind", NOT_FILES)
def test_a_chat_that_is_not_a_file_is_set_aside_without_reading_it(tmp_path: Path, kind: str) -> None:
    store = ConversationStore(tmp_path / "c")
    other = _healthy(store, "other")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(_valid_json("20260101-000000-eeeeee")))
    path = store.directory / "20260101-000000-aaaaaa.json"
    _not_a_file(path, kind, elsewhere)
    tracemalloc.start()
    try:
        listed = _within(10, store.list)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [x.id for x in listed] == [other.id] and peak < 32 << 20, f"{peak >> 20} MiB"
    # Set aside as a damaged file is (the link itself, not what it points to), and reported.
    [backup] = store.damaged
    assert not os.path.lexists(path) and os.path.lexists(backup) and elsewhere.exists()
    assert _within(10, lambda: store.load("20260101-000000-aaaaaa")) is None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("kind", NOT_FILES)
def test_state_and_settings_that_are_not_files_are_never_read(tmp_path: Path, kind: str) -> None:
    """The app reads these at start: each is taken as missing (defaults), and the next save
    replaces it with a file of its own."""
    dirs = AppDirs.under(tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"a": {"tokens_per_s": 1.0}}')
    for path in (dirs.state_file, dirs.settings_file):
        _not_a_file(path, kind, elsewhere)
    assert _within(10, lambda: read_json(dirs.state_file)) is None
    settings, notes = _within(10, lambda: load_settings(dirs.settings_file))
    assert settings == Settings() and len(notes) == 1 and "using the default settings" in notes[0]
    assert not dirs.settings_file.with_name("settings.toml.broken").exists()
    _within(10, lambda: update_json(dirs.state_file, lambda _: {"b": 1}))
    assert dirs.state_file.is_file() and not dirs.state_file.is_symlink()
    assert list(read_json(dirs.state_file)) == ["b"] and elsewhere.read_text().startswith('{"a"')


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_lm_studio_s_files_that_are_not_files_are_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tandem.catalog.discovery import lm_studio_dirs

    monkeypatch.setenv("HOME", str(tmp_path))
    os.mkfifo(tmp_path / ".lmstudio-home-pointer")
    _not_a_file(tmp_path / ".lmstudio" / "settings.json", "fifo", tmp_path)
    (tmp_path / ".lmstudio" / "models").mkdir()
    dirs = _within(10, lm_studio_dirs)
    assert tmp_path / ".lmstudio" / "models" in dirs


# ---------------------------------------------------------------------- two instances at once
WORKER = """
import sys, time
from pathlib import Path
kind, path, me, n = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
from tandem.session.files import update_json

def change(state):  # what TandemApp._remember_pair does, plus a counter to see lost updates
    state = state if isinstance(state, dict) else {}
    state["count"] = state.get("count", 0) + 1
    state["last_pair"] = {"target": me, "draft": str(state["count"])}
    return state

path.with_name(f"ready-{me}").touch()
go = path.with_name("go")
while not go.exists():  # start together, so that the updates interleave
    time.sleep(0.001)
for i in range(n):
    if kind == "keys":  # each instance adds keys of its own
        update_json(path, lambda d, key=f"{me}-{i}": {**(d if isinstance(d, dict) else {}), key: i})
    else:
        update_json(path, change)
"""


def _run_two(kind: str, path: Path, n: int) -> None:
    """Two processes, as two instances of the app, each updating `path` n times at once."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    path.parent.mkdir(parents=True, exist_ok=True)
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, kind, str(path), me, str(n)], env=env, cwd=REPO)
        for me in ("one", "two")
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(path.with_name(f"ready-{me}").exists() for me in ("one", "two")):  # importing
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a worker failed"
            time.sleep(0.01)
        path.with_name("go").touch()
        for p in procs:
            assert p.wait(timeout=120) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


N = 150


def test_two_instances_adding_keys_lose_nothing(dirs: AppDirs) -> None:
    path = dirs.data / "keys.json"
    _run_two("keys", path, N)
    saved = read_json(path)
    assert isinstance(saved, dict)
    missing = {f"{me}-{i}" for me in ("one", "two") for i in range(N)} - set(saved)
    assert not missing, f"{len(missing)} of {2 * N} updates lost"
    assert saved["two-7"] == 7


def test_two_instances_updating_state_lose_nothing(dirs: AppDirs) -> None:
    _run_two("state", dirs.state_file, N)
    state = read_json(dirs.state_file)
    assert isinstance(state, dict) and state["count"] == 2 * N, f"{2 * N - state['count']} updates lost"
    assert not [p.name for p in dirs.data.iterdir() if p.name.endswith(".tmp")]
