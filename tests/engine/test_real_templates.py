"""Real chat templates (tests/fixtures/templates, from llama.cpp's vendored copies) render a
system prompt and a multi-turn conversation with every message in it, with thinking on, off
and unset; thinking off changes the prompt exactly as each template says; the reasoning format
and whether the prompt opened it are read from the template."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.engine.reasoning import HARMONY, THINK_TAGS, thinking_variables
from tandem.engine.text.chat_template import (
    ChatMessage,
    reasoning_split,
    render_chat,
    render_conversation,
    thinking_of,
)

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)

TEMPLATES = Path(__file__).parent.parent / "fixtures" / "templates"
NAMES = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
BOS, EOS = "<s>", "</s>"

CONVERSATION = [
    ChatMessage("system", "Answer like a pirate."),
    ChatMessage("user", "What is two plus two?"),
    ChatMessage("assistant", "Four, matey.", reasoning="Two and two make four."),
    ChatMessage("user", "And three plus three?"),
    ChatMessage("assistant", "Six, arr.", reasoning="Three and three make six."),
    ChatMessage("user", "Thank you kindly!"),
]


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


def render(name: str, think: bool | None = None, messages: list[ChatMessage] = CONVERSATION) -> str:
    return render_chat(
        template(name), messages, bos_token=BOS, eos_token=EOS, variables=thinking_variables(think)
    )


def test_every_template_named_is_here() -> None:
    assert len(NAMES) >= 20 and (TEMPLATES / "README.md").exists()
    readme = (TEMPLATES / "README.md").read_text()
    assert all(name in readme for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_renders_every_message_with_thinking_on_off_and_unset(name: str) -> None:
    tmpl = template(name)
    thinking = thinking_of(tmpl, bos_token=BOS, eos_token=EOS)
    switched = []
    # With a system prompt, and without one (Granite 3.3 reads its switch only then).
    for messages in (CONVERSATION, CONVERSATION[1:]):
        prompts = {}
        for think in (None, True, False):
            rendered = render_conversation(
                tmpl, messages, bos_token=BOS, eos_token=EOS, variables=thinking_variables(think)
            )
            for m in messages:
                assert m.content in rendered.text, (name, think, m.role)
            prompts[think] = rendered.text
        switched.append(prompts[True] != prompts[False])
        if prompts[True] != prompts[False]:
            assert prompts[None] == (prompts[True] if thinking.default_on else prompts[False])
    assert any(switched) == thinking.switch


def test_what_each_template_does_about_thinking() -> None:
    found = {name: thinking_of(template(name), bos_token=BOS, eos_token=EOS) for name in NAMES}
    assert {n for n, t in found.items() if not t.thinks} == {
        "LFM2-8B-A1B",
        "fireworks-ai-llama-3-firefunction-v2",
        "google-gemma-2-2b-it",
        "ibm-granite-granite-4.0",
        "meta-llama-Llama-3.1-8B-Instruct",
    }
    assert found["openai-gpt-oss-120b"].format is HARMONY and not found["openai-gpt-oss-120b"].switch
    switched_on = {n for n, t in found.items() if t.switch and t.default_on}
    switched_off = {n for n, t in found.items() if t.switch and t.default_on is False}
    assert {"Qwen-Qwen3-0.6B", "Qwen3.5-4B", "GLM-4.6", "HuggingFaceTB-SmolLM3-3B"} <= switched_on
    assert {
        "deepseek-ai-DeepSeek-V3.1",
        "ibm-granite-granite-3.3-2B-Instruct",
        "google-gemma-4-31B-it",
    } <= switched_off
    assert not found["deepseek-ai-DeepSeek-R1-Distill-Llama-8B"].switch


def test_qwen35_prompt_opens_the_reasoning_unless_thinking_is_off() -> None:
    on, off = render("Qwen3.5-4B"), render("Qwen3.5-4B", think=False)
    assert on.endswith("<|im_start|>assistant\n<think>\n")
    # Exactly what the template writes for enable_thinking=false: an empty reasoning, closed.
    assert off == on.removesuffix("<think>\n") + "<think>\n\n</think>\n\n"
    split_on = reasoning_split(template("Qwen3.5-4B"), on, CONVERSATION, bos_token=BOS, eos_token=EOS)
    split_off = reasoning_split(
        template("Qwen3.5-4B"),
        off,
        CONVERSATION,
        bos_token=BOS,
        eos_token=EOS,
        variables=thinking_variables(False),
    )
    assert split_on is not None and split_on.format is THINK_TAGS and split_on.opened
    assert split_off is not None and not split_off.opened


def test_qwen3_thinking_off_closes_an_empty_reasoning() -> None:
    on, off = render("Qwen-Qwen3-0.6B"), render("Qwen-Qwen3-0.6B", think=False)
    assert on.endswith("<|im_start|>assistant\n")  # the model opens <think> itself
    assert off == on + "<think>\n\n</think>\n\n"


def test_deepseek_v31_thinks_only_when_asked() -> None:
    assert render("deepseek-ai-DeepSeek-V3.1").endswith("<｜Assistant｜><think></think>")
    assert render("deepseek-ai-DeepSeek-V3.1", think=True).endswith("<｜Assistant｜><think>")


def test_earlier_reasoning_is_dropped_where_the_template_drops_it() -> None:
    for name in ("Qwen-Qwen3-0.6B", "Qwen3.5-4B", "openai-gpt-oss-120b", "GLM-4.6"):
        prompt = render(name)
        assert "Two and two make four." not in prompt and "Three and three" not in prompt, name


def test_reasoning_after_the_last_question_is_kept_where_the_template_keeps_it() -> None:
    # A finished exchange (no generation prompt): Qwen3 writes the last answer's reasoning.
    done = CONVERSATION[:5]
    tmpl = template("Qwen-Qwen3-0.6B")
    text = render_chat(tmpl, done, bos_token=BOS, eos_token=EOS, add_generation_prompt=False)
    assert "<think>\nThree and three make six.\n</think>\n\nSix, arr." in text
    assert "Two and two make four." not in text


def test_gpt_oss_channels_and_its_generation_prompt() -> None:
    prompt = render("openai-gpt-oss-120b")
    assert prompt.endswith("<|start|>assistant")
    assert "<|channel|>final<|message|>Four, matey.<|end|>" in prompt
    split = reasoning_split(
        template("openai-gpt-oss-120b"), prompt, CONVERSATION, bos_token=BOS, eos_token=EOS
    )
    assert split is not None and split.format is HARMONY and not split.opened


def test_template_without_a_system_role_gets_it_in_the_first_user_turn() -> None:
    rendered = render_conversation(
        template("google-gemma-2-2b-it"), CONVERSATION, bos_token=BOS, eos_token=EOS
    )
    assert rendered.system_folded
    assert "<start_of_turn>user\nAnswer like a pirate.\nWhat is two plus two?<end_of_turn>" in rendered.text
    # A template that takes the system role is not touched.
    assert not render_conversation(
        template("Qwen3.5-4B"), CONVERSATION, bos_token=BOS, eos_token=EOS
    ).system_folded


def test_generation_tag_renders_its_body() -> None:
    prompt = render("LFM2.5-8B-A1B")
    assert "<|im_start|>assistant\nFour, matey.<|im_end|>" in prompt


def test_unset_variables_read_as_nothing() -> None:
    prompt = render("fireworks-ai-llama-3-firefunction-v2")
    assert "Available functions as JSON spec:\n\n" in prompt or "Available functions" in prompt
    assert (
        render_chat(
            "{{ 'x' + tools + 'y' }}{{ documents.title }}{{ functions | tojson }}"
            "{% if tools is defined %}!{% endif %}",
            [ChatMessage("user", "u")],
            bos_token="",
            eos_token="",
        )
        == "xynull"
    )
