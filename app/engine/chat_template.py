"""Render a conversation with the model's own chat template (GGUF `tokenizer.chat_template`).

Templates are Jinja2 written for Hugging Face transformers; we render them the same way
(sandboxed, trim_blocks/lstrip_blocks, `raise_exception`, `strftime_now`, a `tojson` that
keeps non-ASCII text) so that the prompt matches what the model was trained on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import TandemError


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system", "user" or "assistant"
    content: str


class ChatTemplateError(TandemError):
    pass


def _raise(message: str) -> None:
    raise ChatTemplateError(f"the model's chat template refused the conversation: {message}")


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


_env = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
)
_env.filters["tojson"] = _tojson
_env.globals["raise_exception"] = _raise
_env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
_compiled: dict[str, jinja2.Template] = {}


def render_chat(
    template: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
) -> str:
    try:
        compiled = _compiled.get(template)
        if compiled is None:
            compiled = _compiled[template] = _env.from_string(template)
        return compiled.render(
            messages=[{"role": m.role, "content": m.content} for m in messages],
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
        )
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(
            f"the model's chat template could not be rendered ({exc}); use --raw to send the "
            "prompt as plain text"
        ) from exc
