"""Reasoning and answer apart in real generations (llama.cpp, tiny random-weight models): a
tiny target carrying Qwen3.5's real chat template, thinking on and off, and a split placed in
the middle of a real speculative output, with the stats of each part."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

import model_files
from run_helpers import TINY
from tandem.engine import ChatMessage, GenerationConfig, ModelPair, Origin
from tandem.engine.decoding.answer import marker_pieces
from tandem.engine.reasoning import ReasoningSplit, tags
from tandem.session.collect import collect

CONFIG = GenerationConfig(max_tokens=40, adaptive=False, draft_max=4, drafter="model")
MESSAGES = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hello there")]


@pytest.fixture(scope="module")
def thinker() -> Iterator[ModelPair]:
    pair = ModelPair.load(model_files.tiny_thinker(), model_files.tiny_thinker(draft=True), TINY)
    yield pair
    pair.close()


def test_qwen35_thinking_is_found_from_its_template(thinker: ModelPair) -> None:
    thinking = thinker.thinking
    assert thinking.thinks and thinking.switch and thinking.default_on


def test_prompt_opens_the_reasoning_and_the_output_is_reasoning(thinker: ModelPair) -> None:
    prompt = thinker.chat(MESSAGES)
    assert prompt.text.endswith("<|im_start|>assistant\n<think>\n")
    assert prompt.reasoning is not None and prompt.reasoning.opened
    out = collect(thinker.generate(prompt.tokens, replace(CONFIG, reasoning=prompt.reasoning)))
    # A random model never closes its reasoning: all of it is reasoning, none the answer.
    assert out.done is not None and out.done.reasoning and out.done.text == ""
    assert all(t.part == "reasoning" and not t.text for t in out.tokens)
    assert "".join(t.reasoning for t in out.tokens) == out.done.reasoning
    s = out.stats
    assert s.reasoning_tokens == s.generated and s.answer.tokens == 0
    assert s.reasoning.drafted == s.drafted > 0 and s.reasoning.accepted == s.accepted


def test_thinking_off_changes_the_prompt_as_the_template_says(thinker: ModelPair) -> None:
    on, off = thinker.chat(MESSAGES), thinker.chat(MESSAGES, think=False)
    assert off.text == on.text.removesuffix("<think>\n") + "<think>\n\n</think>\n\n"
    assert off.reasoning is not None and not off.reasoning.opened
    assert thinker.chat(MESSAGES, think=True).text == on.text
    # chat_template_kwargs say the same thing as `think`.
    assert thinker.chat(MESSAGES, variables={"enable_thinking": False}).text == off.text
    out = collect(thinker.generate(off.tokens, replace(CONFIG, reasoning=off.reasoning)))
    assert out.done is not None and out.done.reasoning == "" and out.text
    assert all(t.part == "answer" for t in out.tokens) and out.stats.reasoning_tokens == 0


def test_split_in_the_middle_of_a_speculative_output(tiny_pair: ModelPair) -> None:
    """A closing marker chosen from the output itself: the reasoning is the text before it and
    the answer the text after, with drafts accepted on both sides counted for each."""
    prompt = tiny_pair.raw_prompt("Once upon a time")
    plain = collect(tiny_pair.generate(prompt, CONFIG))
    text = plain.text
    close = text[len(text) // 2 :][:6]
    middle = text.find(close)  # the reasoning ends where the marker first appears
    assert len(close) == 6 and 0 < middle < len(text) - 6
    split = ReasoningSplit(tags("<reasoning>", close), opened=True)
    out = collect(tiny_pair.generate(prompt, replace(CONFIG, reasoning=split)))
    assert out.ids == plain.ids  # the same tokens, one event each
    assert out.done is not None
    assert out.done.reasoning == text[:middle].strip()
    assert out.done.text == text[middle + 6 :].lstrip()
    s = out.stats
    reasoning = [t for t in out.tokens if t.part == "reasoning"]
    assert s.reasoning_tokens == len(reasoning) and 0 < s.reasoning_tokens < s.generated
    assert s.reasoning_accepted == sum(t.origin is Origin.DRAFT for t in reasoning)
    assert s.answer.accepted == sum(t.origin is Origin.DRAFT for t in out.tokens if t.part == "answer")
    assert s.reasoning.drafted + s.answer.drafted == s.drafted
    assert 0 < s.reasoning.decode_s < s.decode_s


def test_template_without_a_system_role_folds_it(tmp_path: Path) -> None:
    gemma = model_files.tiny_thinker("google-gemma-2-2b-it")
    with ModelPair.load(gemma, None, TINY) as pair:
        prompt = pair.chat(MESSAGES)
        assert prompt.system_folded and prompt.reasoning is None
        assert "<start_of_turn>user\nBe brief.\nHello there<end_of_turn>" in prompt.text
        assert not pair.thinking.thinks


def test_markers_that_are_control_tokens_reach_the_splitter(tiny_pair: ModelPair) -> None:
    """gpt-oss's markers (`<|channel|>`, `<|message|>`, `<|end|>`) are control tokens, which the
    output's text leaves out: the splitter must still see them. SmolLM2's vocabulary (the tiny
    models') has control tokens of its own to stand in for them."""
    target = tiny_pair.target
    im_start = target.tokenize("<|im_start|>", add_special=False, parse_special=True)
    assert len(im_start) == 1 and target.piece(im_start[0]) == b""  # a control token: no text
    fmt = tags("<|im_start|>", "</answer>")
    assert marker_pieces(target, fmt)(im_start[0]) == b"<|im_start|>"
    plain = target.tokenize("Hello", add_special=False)[0]
    assert marker_pieces(target, fmt)(plain) == target.piece(plain)
    # A control token that is no marker's keeps no text.
    assert marker_pieces(target, tags("<think>", "</think>"))(im_start[0]) == b""
