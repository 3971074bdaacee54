"""`tandem chat --target --draft` and plain `tandem` start the app (its run() is replaced here;
the app itself is driven in the other tests of this folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.cli.main import main
from tandem.ui.app import TandemApp


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[TandemApp]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    runs: list[TandemApp] = []
    monkeypatch.setattr(TandemApp, "run", lambda self, *a, **k: runs.append(self))
    return runs


def test_chat_opens_the_given_pair(started: list[TandemApp], tmp_path: Path) -> None:
    assert main(["chat", "--target", "~/t.gguf", "--draft", "d.gguf", "--ctx", "2048", "--threads", "1"]) == 0
    [app] = started
    assert app.initial_pair is not None
    assert app.initial_pair.target == Path("~/t.gguf").expanduser() and app.initial_pair.draft == Path(
        "d.gguf"
    )
    assert app.settings.n_ctx == 2048 and app.settings.n_threads == 1
    # The user directories come from platformdirs (XDG on Linux).
    assert app.dirs.config == tmp_path / "config" / "tandem"
    assert app.dirs.data == tmp_path / "data" / "tandem"


def test_plain_tandem_starts_the_app(started: list[TandemApp]) -> None:
    assert main([]) == 0
    [app] = started
    assert app.initial_pair is None  # last pair used, or the picker


def test_chat_needs_both_files(started: list[TandemApp], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--target", "t.gguf"]) == 1
    assert "give both --target PATH and --draft PATH" in capsys.readouterr().err
    assert main(["chat", "--target", "t.gguf", "--draft", "d.gguf", "--ctx", "10"]) == 1
    assert "context size must be at least 64" in capsys.readouterr().err.lower()
    assert not started


def test_chat_with_a_target_that_has_its_own_draft_heads_needs_no_draft(
    started: list[TandemApp], capsys: pytest.CaptureFixture[str]
) -> None:
    from catalogs import mtp_target, no_heads_target

    assert main(["chat", "--target", str(mtp_target())]) == 0
    [app] = started
    assert app.initial_pair is not None and app.initial_pair.draft is None
    assert main(["chat", "--target", str(no_heads_target())]) == 1
    err = capsys.readouterr().err
    assert "give both --target PATH and --draft PATH" in err and "its own draft heads" in err
    assert len(started) == 1


def test_other_commands_are_still_there(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for cmd in ("chat", "run", "bench", "pairs", "pull", "models"):
        assert cmd in out
