"""The request bodies `tandem serve` accepts, checked before anything runs.

The fields people use mean what the same options mean in `tandem run`; a field left out takes
the value `tandem serve` was started with (its flags, the pair's settings, the defaults).
Types are strict (a string is not a number) and ranges are OpenAI's where it sets one.
Features Tandem does not have (several choices, log-probabilities, tools, penalties) are refused
with a sentence rather than silently ignored: ignoring them would return something other than
what was asked for. Other fields are ignored, as OpenAI-compatible servers do.

Lists are bounded (MAX_MESSAGES, MAX_CONTENT_PARTS, 16 stop strings): a body of a million tiny
items would otherwise cost a million validation errors before the first one could be reported.
Numbers must be finite (JSON's NaN and Infinity, which Python reads, are refused by name).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from tandem.engine import RESERVED_VARIABLES, ChatMessage, think_from_variables
from tandem.session.options import Options, fields_with, from_request, layered, request_fields

from .errors import bad_request

# Messages in one chat request. A real conversation that fits a context has far fewer (each
# message costs at least a few tokens of template markup: 10,000 messages are 40,000+ tokens of
# markup alone), and the bound keeps a hostile list of millions from costing seconds to check.
MAX_MESSAGES = 10_000
# Content parts in one message: text parts are joined, so a real client sends a handful.
MAX_CONTENT_PARTS = 1_000
# A cache key (prompt_cache_key, user) is a name, not a document.
MAX_CACHE_KEY = 512


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    # "developer" is the newer name OpenAI gives the system role.
    role: Literal["system", "developer", "user", "assistant"]
    # A string, or a list of content parts of which only text ones are supported (checked
    # here rather than by a union type, whose errors would name each member of the union).
    content: Any = None
    # An earlier answer's reasoning, as this server (and llama-server, vLLM, DeepSeek) returns
    # it: the chat template keeps or drops it as it was written to.
    reasoning_content: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, v: Any) -> str | list[dict[str, Any]] | None:
        if v is None or isinstance(v, str):
            return v
        if not isinstance(v, list):
            raise ValueError("must be a string or a list of content parts")
        if len(v) > MAX_CONTENT_PARTS:
            raise ValueError(f"at most {MAX_CONTENT_PARTS:,} content parts")
        for part in v:
            if not (
                isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            ):
                raise ValueError("only text content parts ({'type': 'text', 'text': '...'}) are supported")
        return v

    def as_chat_message(self) -> ChatMessage:
        content = self.content
        if isinstance(content, list):
            content = "".join(str(part["text"]) for part in content)
        role = "system" if self.role == "developer" else self.role
        reasoning = self.reasoning_content if role == "assistant" else None
        return ChatMessage(role, content or "", reasoning or "")


# The options a request may set (max_tokens, temperature, top_p, top_k, min_p, seed, stop and
# Tandem's own `exact`), with the types, bounds and checks the options declare
# (session/options.py): each optional, left out meaning the server's.
_REQUEST_OPTIONS = frozenset(name for name, _ in fields_with("request"))
if TYPE_CHECKING:
    _RequestOptions = BaseModel
else:
    _RequestOptions = create_model(
        "_RequestOptions", __config__=ConfigDict(extra="ignore", strict=True), **request_fields()
    )


class _Sampling(_RequestOptions):
    """The fields chat and text completions share."""

    model_config = ConfigDict(extra="ignore", strict=True)

    model: str | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Refused unless they ask for nothing (see the module's docstring).
    n: int | None = None
    logprobs: Any = None
    presence_penalty: float | None = Field(default=None, allow_inf_nan=False)
    frequency_penalty: float | None = Field(default=None, allow_inf_nan=False)
    # Whose cached prefixes this request may reuse (OpenAI's prompt_cache_key; `user`, its older
    # name for a caller): only those left by requests with the same value (see cache_group).
    prompt_cache_key: str | None = Field(default=None, max_length=MAX_CACHE_KEY)
    user: str | None = Field(default=None, max_length=MAX_CACHE_KEY)

    def unsupported(self) -> None:
        """Refuse what the request asks for that Tandem cannot do."""
        if self.n not in (None, 1):
            raise bad_request("only one choice per request is supported (n = 1)", param="n")
        if self.logprobs not in (None, False, 0):
            raise bad_request("log-probabilities are not supported by tandem serve", param="logprobs")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                raise bad_request(f"{name} is not supported by tandem serve (leave it at 0)", param=name)

    def cache_group(self, private: bool) -> str | None:
        """The cache group this request reuses from and leaves to (SeqRequest.cache_group): its
        key, else every request without one ("", shared), or none (None) on a server started
        with --private-cache."""
        key = self.prompt_cache_key or self.user
        if key:
            return "key:" + key
        return None if private else ""

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def options(self, base: Options, max_tokens: int | None) -> Options:
        """The server's options with this request's over them (`max_tokens`: the request's
        newer name for it, which wins)."""
        asked = self.model_dump(include=set(_REQUEST_OPTIONS))
        if max_tokens is not None:
            asked["max_tokens"] = max_tokens
        return layered(base, from_request(asked))


# chat_template_kwargs: variables for the chat template, as llama-server and vLLM take them
# ({"enable_thinking": false}). Small and simple: a template is code, and these are its input.
MAX_TEMPLATE_KWARGS = 16
MAX_TEMPLATE_KWARG_CHARS = 1024
# What the request's own fields refuse cannot come in through the template's variables either.
UNSUPPORTED_TEMPLATE_KWARGS = {
    "tools": "'tools' (function calling) are not supported by tandem serve",
    "functions": "'functions' (function calling) are not supported by tandem serve",
}


def _check_template_kwargs(v: Any) -> dict[str, Any] | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise ValueError('must be a JSON object of template variables, e.g. {"enable_thinking": false}')
    if len(v) > MAX_TEMPLATE_KWARGS:
        raise ValueError(f"at most {MAX_TEMPLATE_KWARGS} variables")
    for key, value in v.items():
        if not (isinstance(key, str) and key.isidentifier() and key.isascii() and len(key) <= 64):
            raise ValueError(f"{str(key)[:64]!r} is not a variable name (letters, digits and _)")
        if key in RESERVED_VARIABLES:
            raise ValueError(f"{key!r} is set by the server and cannot be given")
        if key in UNSUPPORTED_TEMPLATE_KWARGS:
            raise ValueError(UNSUPPORTED_TEMPLATE_KWARGS[key])
        if value is not None and not isinstance(value, (bool, int, float, str)):
            raise ValueError(f"{key!r} must be a string, number, boolean or null")
        if isinstance(value, str) and len(value) > MAX_TEMPLATE_KWARG_CHARS:
            raise ValueError(f"{key!r} is longer than {MAX_TEMPLATE_KWARG_CHARS} characters")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key!r} must be a finite number")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
            raise ValueError(f"{key!r} is too large a number")
    return v


class ChatCompletionRequest(_Sampling):
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: int | None = Field(default=None, ge=1)  # the newer name of max_tokens
    tools: list[Any] | None = None  # refused when not empty; any length costs one check
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: Any = None  # checked by _template_kwargs (one sentence per problem)

    @field_validator("chat_template_kwargs")
    @classmethod
    def _template_kwargs(cls, v: Any) -> dict[str, Any] | None:
        return _check_template_kwargs(v)

    def think(self, default: bool | None) -> bool | None:
        """Thinking on or off: what chat_template_kwargs ask for, else the server's default."""
        asked = think_from_variables(self.chat_template_kwargs or {})
        return asked if asked is not None else default

    def unsupported(self) -> None:
        super().unsupported()
        if self.tools:
            raise bad_request("tools (function calling) are not supported by tandem serve", param="tools")
        if self.response_format is not None and self.response_format.get("type", "text") != "text":
            raise bad_request(
                "structured output (response_format) is not supported by tandem serve",
                param="response_format",
            )

    def request_options(self, base: Options) -> Options:
        return self.options(base, self.max_completion_tokens)

    def chat_messages(self) -> list[ChatMessage]:
        return [m.as_chat_message() for m in self.messages]


class CompletionRequest(_Sampling):
    # A prompt in a list is accepted when it is one string (several would mean several choices).
    prompt: Any  # a string, or a list of one string

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: Any) -> str | list[str]:
        if isinstance(v, list) and len(v) > 1:  # refused by unsupported(), without looking at each
            return v
        if isinstance(v, str) or (isinstance(v, list) and all(isinstance(p, str) for p in v)):
            return v
        raise ValueError("must be a string (token-id prompts are not supported)")

    echo: bool = False
    suffix: str | None = None

    def unsupported(self) -> None:
        super().unsupported()
        if isinstance(self.prompt, list) and len(self.prompt) != 1:
            raise bad_request("send one prompt per request (a string, or a list of one)", param="prompt")
        if self.echo:
            raise bad_request("echo is not supported by tandem serve", param="echo")
        if self.suffix:
            raise bad_request("suffix (fill-in-the-middle) is not supported by tandem serve", param="suffix")

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else str(self.prompt[0])

    def request_options(self, base: Options) -> Options:
        return self.options(base, None)
