"""TokenStream: UTF-8 safety and stop strings, on hand-made byte pieces."""

from __future__ import annotations

import pytest

from tandem.engine.events import Origin
from tandem.engine.text.text_stream import TokenStream

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)


def feed(pieces: list[bytes], stops: tuple[str, ...] = ()) -> tuple[list[str], TokenStream]:
    stream = TokenStream(lambda i: pieces[i], stops)
    out = [e.text for i in range(len(pieces)) for e in stream.add(i, Origin.DRAFT)]
    return out + [e.text for e in stream.finish()], stream


def test_character_split_across_tokens() -> None:
    emoji = "🎉".encode()
    out, _ = feed([b"Hi ", emoji[:2], emoji[2:], b"!"])
    assert out == ["Hi ", "", "🎉", "!"]


def test_cut_mid_character_drops_the_fragment() -> None:
    out, stream = feed([b"ok", "é".encode()[:1]])
    assert "".join(out) == "ok" == stream.text


def test_stop_string_spanning_tokens_cuts_before_it() -> None:
    out, stream = feed([b"The answer", b" is</an", b"swer> tail"], stops=("</answer>",))
    assert "".join(out) == "The answer is" and stream.stopped


def test_possible_stop_prefix_is_held_then_released() -> None:
    pieces = [b"a <", b"/", b"b"]
    stream = TokenStream(lambda i: pieces[i], ("</x>",))
    assert [e.text for e in stream.add(0, Origin.TARGET)] == []  # "<" might start "</x>"
    assert [e.text for e in stream.add(1, Origin.TARGET)] == []  # "</" still might
    assert [e.text for e in stream.add(2, Origin.BONUS)] == ["a <", "/", "b"]  # "</b" cannot
    assert not stream.stopped


def test_released_tokens_keep_their_origin() -> None:
    pieces = [b"x", b"<", b"y"]
    stream = TokenStream(lambda i: pieces[i], ("<z",))
    events = [*stream.add(0, Origin.DRAFT), *stream.add(1, Origin.TARGET), *stream.add(2, Origin.BONUS)]
    assert [(e.text, e.origin) for e in events] == [
        ("x", Origin.DRAFT),
        ("<", Origin.TARGET),
        ("y", Origin.BONUS),
    ]


def test_stop_string_at_the_very_start() -> None:
    out, stream = feed([b"STOP", b"more"], stops=("STOP",))
    assert out == [] and stream.stopped and stream.text == ""


def test_earliest_of_several_stop_strings_wins() -> None:
    out, _ = feed([b"one two three"], stops=("three", "two"))
    assert "".join(out) == "one "
