"""The reasoning splitter (pure text handling, fed hand-made token events): reasoning and
answer come apart for each format however the stream is cut into tokens, markers split across
tokens included, with no marker text in either part and every token released once, in order."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tandem.engine.events import Origin, TokenEvent
from tandem.engine.reasoning import (
    HARMONY,
    THINK_TAGS,
    ReasoningFormat,
    ReasoningSplit,
    ReasoningSplitter,
    detect_format,
    opens_reasoning,
    split_text,
    tags,
    think_from_variables,
    thinking_variables,
)

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)

ORIGINS = (Origin.DRAFT, Origin.TARGET, Origin.BONUS)
HARMONY_BETWEEN = "<|end|><|start|>assistant<|channel|>final<|message|>"


def run(pieces: list[str], split: ReasoningSplit) -> tuple[str, str, list[TokenEvent]]:
    """Feed `pieces` as tokens; the reasoning and answer the events carry, and the events."""
    splitter = ReasoningSplitter(split)
    out: list[TokenEvent] = []
    for i, piece in enumerate(pieces):
        out += splitter.add(TokenEvent(i, piece, ORIGINS[i % 3]))
    out += splitter.finish()
    assert [e.id for e in out] == list(range(len(pieces)))  # each once, in order
    assert [e.origin for e in out] == [ORIGINS[i % 3] for i in range(len(pieces))]
    reasoning = "".join(e.reasoning for e in out)
    answer = "".join(e.text for e in out)
    assert (reasoning, answer) == (splitter.reasoning, splitter.answer)
    return reasoning, answer, out


def cut(text: str, points: list[int]) -> list[str]:
    bounds = sorted({0, len(text), *(p % (len(text) + 1) for p in points)})
    return [text[a:b] for a, b in itertools.pairwise(bounds)] or [""]


def markers_free(fmt: ReasoningFormat, *texts: str) -> bool:
    return not any(m.text in t for t in texts for m in fmt.markers)


# Text built from pieces of the markers, so partial markers appear everywhere.
FRAGMENTS = ["a", "b", " ", "\n", "<", ">", "/", "|", "<th", "ink>", "</", "</think", "<|", "<|end", "|>"]
FRAGMENTS += ["<|channel|>", "analysis", "<|message|>", "final", "<|start|>", "é", "🎉"]
texts = st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join)
points = st.lists(st.integers(min_value=0, max_value=400), max_size=12)


@settings(max_examples=300, deadline=None)
@given(r=texts, a=texts, p=points, opened=st.booleans())
def test_think_tags_split_however_the_stream_is_cut(r: str, a: str, p: list[int], opened: bool) -> None:
    assume(markers_free(THINK_TAGS, r, a))
    stream = ("" if opened else "<think>") + r + "</think>" + a
    reasoning, answer, events = run(cut(stream, p), ReasoningSplit(THINK_TAGS, opened))
    assert (reasoning, answer) == (r.strip(), a.lstrip())
    for e in events:  # a token with reasoning text counts for the reasoning
        assert e.part == "reasoning" or not e.reasoning


@settings(max_examples=300, deadline=None)
@given(r=texts, a=texts, p=points)
def test_gpt_oss_channels_split_however_the_stream_is_cut(r: str, a: str, p: list[int]) -> None:
    assume(markers_free(HARMONY, r, a))
    stream = "<|channel|>analysis<|message|>" + r + HARMONY_BETWEEN + a
    reasoning, answer, _ = run(cut(stream, p), ReasoningSplit(HARMONY))
    assert (reasoning, answer) == (r.strip(), a.lstrip())


@settings(max_examples=200, deadline=None)
@given(a=texts, p=points)
def test_answer_alone_passes_through(a: str, p: list[int]) -> None:
    assume(markers_free(THINK_TAGS, a) and markers_free(HARMONY, a))
    for split in (ReasoningSplit(THINK_TAGS), ReasoningSplit(HARMONY)):
        reasoning, answer, events = run(cut(a, p), split)
        assert (reasoning, answer) == ("", a.lstrip())
        assert all(e.part == "answer" for e in events)


@settings(max_examples=200, deadline=None)
@given(r=texts, p=points)
def test_reasoning_cut_off_before_its_end(r: str, p: list[int]) -> None:
    assume(markers_free(THINK_TAGS, r))
    reasoning, answer, _ = run(cut("<think>" + r, p), ReasoningSplit(THINK_TAGS))
    assert (reasoning, answer) == (r.strip(), "")


def test_every_boundary_one_character_a_token() -> None:
    for fmt, stream in (
        (THINK_TAGS, "<think>\nLet me see: 2 < 3 </b>.\n</think>\n\nIt is 4."),
        (
            HARMONY,
            "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant<|channel|>final<|message|>4",
        ),
    ):
        for n in range(1, len(stream) + 1):  # tokens of n characters, then of every size
            pieces = [stream[i : i + n] for i in range(0, len(stream), n)]
            reasoning, answer, _ = run(pieces, ReasoningSplit(fmt))
            assert reasoning in ("Let me see: 2 < 3 </b>.", "Add them.")
            assert answer in ("It is 4.", "4")


def test_tag_tokens_count_for_the_reasoning_and_are_never_shown() -> None:
    _, _, events = run(["<think>", "Hm", "</think>", "\n\n", "Hi"], ReasoningSplit(THINK_TAGS))
    assert [(e.part, e.reasoning, e.text) for e in events] == [
        ("reasoning", "", ""),
        ("reasoning", "Hm", ""),
        ("reasoning", "", ""),
        ("answer", "", ""),
        ("answer", "", "Hi"),
    ]


def test_a_token_across_the_boundary_carries_both_parts() -> None:
    _, _, events = run(["<think>ok.</", "think>Hi"], ReasoningSplit(THINK_TAGS))
    assert [(e.part, e.reasoning, e.text) for e in events] == [
        ("reasoning", "ok.", ""),
        ("reasoning", "", "Hi"),
    ]


def test_possible_marker_is_held_then_released() -> None:
    splitter = ReasoningSplitter(ReasoningSplit(THINK_TAGS, opened=True))
    assert splitter.add(TokenEvent(0, "x </", Origin.DRAFT)) == []  # "</" may start "</think>"
    released = splitter.add(TokenEvent(1, "b>", Origin.TARGET))
    assert [e.reasoning for e in released] == ["x </", "b>"] and splitter.in_reasoning


def test_opening_tag_inside_the_answer_is_text() -> None:
    assert split_text("Hi <think>x</think>", ReasoningSplit(THINK_TAGS)) == ("", "Hi <think>x</think>")


def test_format_from_the_template() -> None:
    assert detect_format("{{ '<think>' }}{{ '</think>' }}") is THINK_TAGS
    assert detect_format("<|channel|>analysis<|message|>") is HARMONY
    assert detect_format("{{ '<seed:think>' }}…{{ '</seed:think>' }}") == tags(
        "<seed:think>", "</seed:think>"
    )
    assert detect_format("{{ messages }}") is None and detect_format(None) is None


def test_prompt_that_opened_the_reasoning() -> None:
    assert opens_reasoning(THINK_TAGS, "<|im_start|>assistant\n<think>\n")
    assert not opens_reasoning(THINK_TAGS, "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not opens_reasoning(THINK_TAGS, "<|im_start|>assistant\n")
    assert not opens_reasoning(HARMONY, "<|start|>assistant")


def test_thinking_switch_variables() -> None:
    assert thinking_variables(None) == {}
    assert thinking_variables(False) == {"enable_thinking": False, "thinking": False}
    assert think_from_variables({"enable_thinking": False}) is False
    assert think_from_variables({"thinking": True}) is True
    assert think_from_variables({"enable_thinking": "no"}) is None
