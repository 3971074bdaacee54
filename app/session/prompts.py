"""The one rule for turning what the user wrote into a prompt, in every front-end.

* A model with a chat template (in its GGUF) gets the conversation through that template.
* A model without one (a base model) gets a plain transcript, "User: …" turns and a final
  "Assistant:", which base models continue sensibly; the front-end says so (`no_template_note`).
* Raw mode (`tandem run --raw`) sends the text exactly as written.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from app.engine import ChatMessage, ModelPair


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
    `cancel` and `within_context`: as for ModelPair.chat_prompt (the server's)."""
    if pair.has_chat_template():
        return pair.chat_prompt(messages, cancel=cancel, within_context=within_context)
    return pair.raw_prompt(transcript(messages), within_context=within_context)


def text_prompt(pair: ModelPair, text: str, *, raw: bool = False, system: str | None = None) -> list[int]:
    """One prompt (`tandem run`, the benchmark, the demo): raw text, or a one-turn chat."""
    if raw:
        return pair.raw_prompt(text)
    return chat_prompt(pair, messages_for(text, system))


def transcript(messages: Sequence[ChatMessage]) -> str:
    lines = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


class FittingChatPrompt:
    """A conversation's prompt that fits the context with room for the answer: when it does
    not, the oldest turns are left out (the system prompt and the new message always stay) and
    `dropped` says how many, for the front-end to show. Called where the engine runs (it
    tokenizes)."""

    def __init__(self, messages: Sequence[ChatMessage], answer_room: int) -> None:
        self.messages = list(messages)
        self.answer_room = answer_room
        self.dropped = 0

    def __call__(self, pair: ModelPair) -> list[int]:
        # Room for the answer, but never more than half the context: a long conversation in a
        # small context still gets an answer (it stops at the context's end if it must).
        reserve = min(self.answer_room, pair.context_size // 2)
        if pair.has_chat_template():
            tokens, self.dropped = pair.chat_prompt_fitting(self.messages, reserve)
            return tokens
        return chat_prompt(pair, self.messages)  # base models: a transcript, no turns to drop
