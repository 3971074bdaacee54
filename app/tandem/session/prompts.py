"""The one rule for turning what the user wrote into a prompt, in every front-end.

* A model with a chat template (in its GGUF) gets the conversation through that template.
* A model without one (a base model) gets a plain transcript, "User: …" turns and a final
  "Assistant:", which base models continue sensibly; the front-end says so (`no_template_note`).
* Raw mode (`tandem run --raw`) sends the text exactly as written.

A prompt is a `ChatPrompt`: its tokens, and how the answer to it splits into a thinking
model's reasoning and its answer (`with_reasoning` puts that into the GenerationConfig).
`think` (True/False/None: the model's default) turns thinking on or off where the template has
a switch; `thinking_note` says what it does where it has none.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tandem.engine import ChatMessage, ChatPrompt, GenerationConfig

if TYPE_CHECKING:
    from tandem.engine import ModelPair


def no_template_note(pair: ModelPair, *, raw_hint: bool = True) -> str | None:
    """What to tell the user when the target has no chat template; None when it has one.
    `raw_hint`: name `--raw`, for the front-ends that have it (run, bench; not the app)."""
    if pair.has_chat_template():
        return None
    hint = " (send the text exactly as written with --raw)" if raw_hint else ""
    name = Path(pair.target.path).name
    return f"{name} has no chat template: sending a plain 'User: … Assistant:' transcript{hint}"


def pair_notes(pair: ModelPair, *, raw: bool = False, raw_hint: bool = True) -> list[str]:
    """What the user should know about a loaded pair: how it was loaded (a CPU fallback...) and,
    unless the text goes in raw, that the target has no chat template (see no_template_note)."""
    template = None if raw else no_template_note(pair, raw_hint=raw_hint)
    return [*pair.notes, *([template] if template else [])]


def messages_for(text: str, system: str | None = None) -> list[ChatMessage]:
    """One user message, after a system prompt if there is one."""
    system = (system or "").strip()
    return [*([ChatMessage("system", system)] if system else []), ChatMessage("user", text)]


def chat_prompt(
    pair: ModelPair,
    messages: Sequence[ChatMessage],
    *,
    cancel: threading.Event | None = None,
    within_context: bool = False,
) -> list[int]:
    """The conversation as tokens: the model's chat template, or a transcript without one.
    `cancel` and `within_context`: as for ModelPair.chat (the server's)."""
    return build_chat(pair, messages, cancel=cancel, within_context=within_context).tokens


def build_chat(
    pair: ModelPair,
    messages: Sequence[ChatMessage],
    *,
    think: bool | None = None,
    variables: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
    within_context: bool = False,
) -> ChatPrompt:
    """The conversation as a prompt: the model's chat template (thinking on, off or its default;
    `variables`: more for the template), or a transcript without one (nothing to split).
    `cancel` and `within_context`: as for ModelPair.chat (the server's)."""
    if pair.has_chat_template():
        return pair.chat(
            messages, think=think, variables=variables, cancel=cancel, within_context=within_context
        )
    return ChatPrompt(pair.raw_prompt(transcript(messages), within_context=within_context))


def text_prompt(
    pair: ModelPair, text: str, *, raw: bool = False, system: str | None = None, within_context: bool = False
) -> list[int]:
    """One prompt (`tandem run`, the benchmark, the demo): raw text, or a one-turn chat.
    `within_context`: as for build_text."""
    return build_text(pair, text, raw=raw, system=system, within_context=within_context).tokens


def build_text(
    pair: ModelPair,
    text: str,
    *,
    raw: bool = False,
    system: str | None = None,
    think: bool | None = None,
    within_context: bool = False,
) -> ChatPrompt:
    """One prompt as a ChatPrompt: raw text (nothing to split), or a one-turn chat.
    `within_context`: refuse (ContextOverflowError) a text with more characters than the
    context can hold before tokenizing it (megabytes took seconds and gigabytes to tokenize
    only to be refused afterwards), as the server does."""
    if raw:
        return ChatPrompt(pair.raw_prompt(text, within_context=within_context))
    return build_chat(pair, messages_for(text, system), think=think, within_context=within_context)


def with_reasoning(config: GenerationConfig, prompt: ChatPrompt) -> GenerationConfig:
    """The config that splits the answer to `prompt` as its template frames the reasoning."""
    return replace(config, reasoning=prompt.reasoning)


def thinking_note(pair: ModelPair, think: bool | None) -> str | None:
    """What the user should know when they asked for thinking on or off and the model's
    template cannot do it (None when it can, or they did not ask)."""
    thinking = pair.thinking
    name = Path(pair.target.path).name
    if think is None or thinking.switch:
        return None
    if not thinking.thinks:
        return (
            f"{name} does not think (its chat template has no reasoning): --think/--no-think change nothing"
        )
    if think:
        return f"{name}'s chat template has no thinking switch: it thinks as it always does"
    return f"{name}'s chat template has no thinking switch: it still thinks, and its reasoning is hidden"


def system_folded_note(pair: ModelPair) -> str:
    """What to tell the user, once, when the template refused the system prompt
    (ChatPrompt.system_folded)."""
    return (
        f"{Path(pair.target.path).name}'s chat template takes no system prompt: it was put at the start "
        "of the first message instead"
    )


def transcript(messages: Sequence[ChatMessage]) -> str:
    lines = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


class FittingChatPrompt:
    """A conversation's prompt that fits the context with room for the answer: when it does
    not, the oldest turns are left out (the system prompt and the new message always stay) and
    `dropped` says how many, for the front-end to show. Called where the engine runs (it
    tokenizes). `think`: thinking on, off or the model's default (None). After the call,
    `prompt` is the whole ChatPrompt: its `reasoning` goes into the generation's config
    (with_reasoning), its `system_folded` is worth a note once (system_folded_note)."""

    def __init__(
        self, messages: Sequence[ChatMessage], answer_room: int, *, think: bool | None = None
    ) -> None:
        self.messages = list(messages)
        self.answer_room = answer_room
        self.think = think
        self.dropped = 0
        self.prompt: ChatPrompt | None = None

    def __call__(self, pair: ModelPair) -> list[int]:
        # Room for the answer, but never more than half the context: a long conversation in a
        # small context still gets an answer (it stops at the context's end if it must).
        reserve = min(self.answer_room, pair.context_size // 2)
        if pair.has_chat_template():
            self.prompt = pair.chat(self.messages, think=self.think, reserve=reserve)
            self.dropped = self.prompt.dropped
        else:  # base models: a transcript, no turns to drop
            self.prompt = build_chat(pair, self.messages)
        return self.prompt.tokens
