"""Render a conversation with the model's own chat template (GGUF `tokenizer.chat_template`).

Templates are Jinja2 written for Hugging Face transformers; we render them the same way
(sandboxed, trim_blocks/lstrip_blocks, `raise_exception`, `strftime_now`, a `tojson` that
keeps non-ASCII text, transformers' `{% generation %}` tag) so that the prompt matches what the
model was trained on. Three things real templates need beyond plain Jinja:

* `{% generation %}…{% endgeneration %}` (transformers' extension, LFM2.5 and Laguna use it)
  only marks the assistant's text for training: it renders its body.
* A variable the caller does not pass (`tools`, `functions`, `documents`…) is undefined and
  falsy, and stays harmless where a template uses it anyway (`"…" + functions`, `tools.x`,
  `tools | tojson`): it reads as nothing, as in llama.cpp, instead of failing the render.
* A template that refuses a system message ("System role not supported", Gemma 2) gets the
  system text at the start of the first user message instead, as llama.cpp does
  (`RenderedChat.system_folded` says so, for the front-end to tell the user once).

An assistant message's reasoning (`ChatMessage.reasoning`) goes to the template as
`reasoning_content` (Qwen, GLM, DeepSeek…) and `thinking` (gpt-oss, LFM2.5): each template
keeps or drops earlier turns' reasoning as it was written to.

A template is code from whoever made the GGUF, and the app renders it in a worker thread while
it holds the model pair's lock. The sandbox stops it from touching anything outside; on top of
that a render is bounded, so a hostile or broken template costs one ChatTemplateError (the user
can go on with --raw) and never a crash, a prompt of gigabytes or a hang:

* size: the text a render builds, as output or in between, is limited to MAX_OUTPUT_CHARS plus
  four times the conversation's own characters. The checks run before the big operations
  (`*`, `**`, `+`, `~`, `%`, joining a macro's output, and the string methods and filters that
  take a width or a count: template_sizes.py), so a size bomb is refused before it is built.
* time: RENDER_SECONDS, checked between pieces of output and, compiled into the template, at
  the start of every block (each loop iteration, each macro call), so loops that write
  nothing are stopped too.
* anything that still goes wrong (RecursionError, MemoryError, OverflowError, any exception)
  becomes a ChatTemplateError.
* cancel: a render given a `cancel` event stops (PromptCancelled) where it checks its time, once
  the event is set: the server cancels the prompt of a client that left, or when it stops.

What stays out of reach in-process: a template that prints a structure it built by nesting
literal lists of references (each level multiplying the size) can still make one C-level call
(`str()` of it) that runs out of memory; Python's MemoryError is caught, the OS's OOM killer is
not. Real chat templates never do any of this.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
import jinja2.runtime
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension
from jinja2.nodes import Node
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

from ..errors import PromptCancelled, TandemError
from ..files.template_sizes import (
    BoundedEscapeFormatter,
    BoundedFormatter,
    TooLarge,
    bounded_filters,
    check_call,
    check_mod,
    json_size,
    refuse_over,
)
from ..files.template_sizes import limit as _limit
from ..files.template_sizes import weight as _weight
from ..reasoning import ReasoningSplit, Thinking, detect_format, opens_reasoning, thinking_variables

# A real prompt must fit a context window: even 1M tokens is ~4 MiB of text, and a template
# adds a few dozen characters a message. 8 Mi characters is far above any of that, yet small
# enough that building it is harmless (tens of MB at most). The limit also grows with the
# conversation (4 chars per input char): the whole saved chat is rendered before the oldest
# turns are dropped to fit the context, and a long one must never be refused for its length.
MAX_OUTPUT_CHARS = 8 * 1024 * 1024
# Real templates render in well under a millisecond (SmolLM2's, a 20-message chat: 0.1 ms;
# 100 messages: 0.5 ms); 2 s is thousands of times that, enough for a very long chat on a busy
# machine, and short enough that a hung template does not look like a hung app.
RENDER_SECONDS = 2.0
# Integers in templates count messages and characters; a number of 65,536 bits (~20,000 digits)
# is far beyond that, and arithmetic on it stays in microseconds (`**` on big numbers runs in C
# where the time limit cannot stop it).
_MAX_INT_BITS = 1 << 16

_SEQUENCES = (str, bytes, list, tuple)


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system", "user" or "assistant"
    content: str
    reasoning: str = ""  # an assistant turn's reasoning (a thinking model's), kept apart


RAW_HINT = "use --raw to send the prompt as plain text"


class ChatTemplateError(TandemError):
    """`problem`: what went wrong; the message adds `hint` (what to do instead), which a
    front-end without --raw (the server) replaces with its own."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(f"{problem}; {hint}" if hint else problem)
        self.problem = problem
        self.hint = hint


class _Refused(ChatTemplateError):
    """The template's own raise_exception: it refused the conversation."""


def _raise(message: str) -> None:
    raise _Refused(f"the model's chat template refused the conversation: {message}")


def _failed(reason: str) -> ChatTemplateError:
    return ChatTemplateError(f"the model's chat template could not be rendered ({reason})", RAW_HINT)


def _sentence(text: str) -> str:
    """The first sentence of an exception's message, on one line (errors are one sentence)."""
    line = " ".join(text.split())
    first = line.split(". ", 1)[0].rstrip(".")
    return first if len(first) <= 200 else first[:199] + "…"


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    if indent:  # (each item on a line of its own, indented by its depth)
        refuse_over(json_size(x, len(indent) if isinstance(indent, str) else indent, _limit.get()))
    return json.dumps(
        x,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
        default=_undefined_as_null,
    )


def _undefined_as_null(value: Any) -> None:
    if isinstance(value, jinja2.Undefined):
        return None
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class _Absent(jinja2.ChainableUndefined):
    """A variable nobody passed: falsy, empty, and harmless where a template uses it anyway.
    Jinja's own Undefined already reads as "" and iterates as nothing; a template that adds it
    to a string, or reads an attribute of it, would fail the render over an option the user
    never gave (firefunction's `"…" + functions`). `is defined` still tells it apart."""

    __slots__ = ()

    def __add__(self, other: Any) -> Any:
        return other

    def __radd__(self, other: Any) -> Any:
        return other


class _Generation(Extension):
    """transformers' `{% generation %}…{% endgeneration %}`: marks the assistant's text for
    training (assistant-only loss masks); rendering a prompt, it is just its body."""

    tags = {"generation"}  # noqa: RUF012 (Jinja's own declaration style)

    def parse(self, parser: Parser) -> list[Node]:
        next(parser.stream)  # the tag's name
        body: list[Node] = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return [nodes.Scope(body)]


# ---------------------------------------------------------------------- size
# The current render's size limit and the size of a value: template_sizes.py, which also
# checks the calls that take a width or a count.


def _too_large(limit: int) -> ChatTemplateError:
    return _failed(f"it builds text larger than {limit:,} characters")


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse an operation whose result would be too large, before Python builds it."""
    limit = _limit.get()
    if operator == "+":
        sequences = isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES)
        if sequences and _weight(left, limit) + _weight(right, limit) > limit:
            raise _too_large(limit)
    elif operator == "*":
        if isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > _MAX_INT_BITS:
                raise _failed(f"it computes a number of more than {_MAX_INT_BITS:,} bits")
            return
        seq, times = (left, right) if isinstance(right, int) else (right, left)
        repeated = isinstance(seq, _SEQUENCES) and isinstance(times, int) and times > 0
        if repeated and _weight(seq, limit // times) * times > limit:
            raise _too_large(limit)
    elif operator == "%":
        check_mod(left, right)  # (printf-style: widths and precisions)
    elif operator == "**":
        huge = isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1
        if huge and abs(left).bit_length() * right > _MAX_INT_BITS:
            raise _failed(f"it computes a number of more than {_MAX_INT_BITS:,} bits")


def _bounded_str_join(seq: Iterable[Any]) -> str:
    """Jinja's `~` operator (its runtime's str_join), refusing a result over the limit before it
    is built: `{% set ns.s = ns.s ~ ns.s %}` in a loop doubles the text at each step."""
    parts = list(seq)
    limit = _limit.get()
    if _weight(parts, limit) > limit:
        raise _too_large(limit)
    return "".join(map(str, parts))


def _bounded_concat(parts: Iterable[str]) -> str:
    """Joins a macro's or a `{% set %}` block's output: a macro can repeat a large text many
    times by reference, and the join would build all of it at once."""
    chunks = parts if isinstance(parts, list) else list(parts)
    limit = _limit.get()
    if sum(map(len, chunks)) > limit:
        raise _too_large(limit)
    return "".join(chunks)


# ---------------------------------------------------------------------- time
# The current render's deadline (time.monotonic()), per thread like _limit, and its caller's
# cancel event (checked where the time is).
_deadline: ContextVar[float] = ContextVar("chat_template_deadline", default=float("inf"))
_cancel: ContextVar[threading.Event | None] = ContextVar("chat_template_cancel", default=None)


def _too_slow() -> ChatTemplateError:
    return _failed(f"it ran for more than {RENDER_SECONDS:g} s")


class _TickingCodeGenerator(CodeGenerator):
    """Compiles every block of a template (each loop iteration, each macro call, each branch
    taken) to start with `environment.tick()`, which stops a render past its deadline.

    Everything that can repeat in a template goes through a block (Jinja has no other loop or
    recursion), so nested loops that write nothing are stopped too. A check compiled into the
    template costs one short call per block, ~0.1 us; a sys.settrace line tracer (tried first)
    made rendering 8-10 times slower (SmolLM2's template, 100 messages: 0.26 -> 2.8 ms), since
    every frame in the thread then runs traced, and it would displace a debugger's tracer."""

    def blockvisit(self, nodes: Iterable[Node], frame: Frame) -> None:
        self.writeline("environment.tick()")
        super().blockvisit(nodes, frame)


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    # The operators that can build a large value from small ones. Intercepted operators are
    # also never folded at compile time, so a constant bomb is not built while compiling.
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _TickingCodeGenerator
    concat = staticmethod(_bounded_concat)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _check_binop(operator, left, right)
        return self.binop_table[operator](left, right)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        # (the sandbox's own names: a template's keyword arguments cannot collide with them)
        args = check_call(__obj, args, kwargs)  # (a string method's width or count)
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """str.format and format_map, each field checked (template_sizes.BoundedFormatter)."""
        if super().wrap_str_format(value) is None:
            return None
        text: str = value.__self__
        mapping = value.__name__ == "format_map"

        def bounded(*args: Any, **kwargs: Any) -> str:
            if mapping:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                kwargs = args[0]
                args = ()
            formatter = (
                BoundedEscapeFormatter(self, escape=text.escape)
                if isinstance(text, Markup)
                else BoundedFormatter(self)
            )
            return type(text)(formatter.vformat(text, args, kwargs))

        return bounded

    @staticmethod
    def tick() -> None:
        if time.monotonic() > _deadline.get():
            raise _too_slow()
        cancel = _cancel.get()
        if cancel is not None and cancel.is_set():
            raise PromptCancelled


# ---------------------------------------------------------------------- rendering
_env = _BoundedEnvironment(
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.loopcontrols", _Generation],
    undefined=_Absent,
)
_env.filters["tojson"] = _tojson
bounded_filters(_env.filters)
_env.globals["raise_exception"] = _raise
_env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
_compiled: dict[str, jinja2.Template] = {}


def _compile(template: str) -> jinja2.Template:
    compiled = _env.from_string(template)
    # `~` compiles to a call of the name str_join in the template's module namespace.
    namespace = getattr(compiled.root_render_func, "__globals__", None)
    if isinstance(namespace, dict) and namespace.get("str_join") is jinja2.runtime.str_join:
        namespace["str_join"] = _bounded_str_join
    return compiled


def _render_bounded(compiled: jinja2.Template, limit: int, variables: dict[str, Any]) -> str:
    """Template.render, checking the output's size and the time between its pieces."""
    deadline = time.monotonic() + RENDER_SECONDS
    token = _deadline.set(deadline)
    chunks: list[str] = []
    size = 0
    stream = compiled.generate(variables)
    try:
        for chunk in stream:
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            if time.monotonic() > deadline:
                raise _too_slow()
            cancel = _cancel.get()
            if cancel is not None and cancel.is_set():
                raise PromptCancelled
            chunks.append(chunk)
    finally:
        if isinstance(stream, Generator):  # stopped early: end the template's code now
            stream.close()
        _deadline.reset(token)
    # The same "".join as Template.render: the output is byte-identical.
    return "".join(chunks)


# The variables every render sets itself, and the functions templates call (a variable of the
# same name would hide raise_exception, so a template's refusal would not happen); a caller's
# extra variables cannot replace them.
RESERVED_VARIABLES = frozenset(
    {"messages", "bos_token", "eos_token", "add_generation_prompt", "raise_exception", "strftime_now"}
)


@dataclass(frozen=True)
class RenderedChat:
    text: str
    # The template refused a system message and its text went into the first user message.
    system_folded: bool = False


def _message(m: ChatMessage) -> dict[str, Any]:
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.reasoning:  # (only when there is some: "" would tell Qwen's template "none" even
        # where the content carries `<think>` itself)
        d["reasoning_content"] = m.reasoning
        d["thinking"] = m.reasoning
    return d


def _folded(messages: Sequence[ChatMessage]) -> list[ChatMessage] | None:
    """The conversation with a leading system message put into the next one (as llama.cpp
    does for templates without a system role); None when it has no leading system message."""
    if not messages or messages[0].role != "system":
        return None
    system, rest = messages[0], list(messages[1:])
    if rest:
        first = rest[0]
        rest[0] = ChatMessage(first.role, f"{system.content}\n{first.content}", first.reasoning)
    return rest


def render_chat(
    template: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
    variables: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
) -> str:
    """The conversation as the model's chat template writes it (see render_conversation)."""
    return render_conversation(
        template,
        messages,
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
        variables=variables,
        cancel=cancel,
    ).text


def render_conversation(
    template: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
    variables: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
) -> RenderedChat:
    """The conversation as the model's chat template writes it. `variables`: more for the
    template (thinking_variables, a request's chat_template_kwargs); the names the render sets
    itself (RESERVED_VARIABLES) are not replaced. Raises ChatTemplateError (one sentence,
    naming --raw) for any template that fails, is too slow or builds too much, and
    PromptCancelled once `cancel` is set. A template that refuses a system message is rendered
    again with it folded into the first user message."""
    try:
        text = _render(template, messages, bos_token, eos_token, add_generation_prompt, variables, cancel)
        return RenderedChat(text)
    except _Refused:
        folded = _folded(messages)
        if folded is None:
            raise
        try:
            text = _render(template, folded, bos_token, eos_token, add_generation_prompt, variables, cancel)
        except ChatTemplateError:
            raise ChatTemplateError(
                "the model's chat template refused the conversation, with the system prompt and "
                "without it (in the first message)"
            ) from None
        return RenderedChat(text, system_folded=True)


def _render(
    template: str,
    messages: Sequence[ChatMessage],
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool,
    variables: Mapping[str, Any] | None,
    cancel: threading.Event | None = None,
) -> str:
    given = sum(len(m.role) + len(m.content) + 2 * len(m.reasoning) for m in messages)
    given += len(bos_token) + len(eos_token) + len(json.dumps(dict(variables or {}), default=str))
    limit = MAX_OUTPUT_CHARS + 4 * given
    token = _limit.set(limit)
    cancel_token = _cancel.set(cancel)
    try:
        compiled = _compiled.get(template)
        if compiled is None:
            compiled = _compiled[template] = _compile(template)
        extra = {k: v for k, v in (variables or {}).items() if k not in RESERVED_VARIABLES}
        return _render_bounded(
            compiled,
            limit,
            {
                **extra,
                "messages": [_message(m) for m in messages],
                "bos_token": bos_token,
                "eos_token": eos_token,
                "add_generation_prompt": add_generation_prompt,
            },
        )
    except (ChatTemplateError, PromptCancelled):
        raise
    except TooLarge as exc:
        raise _too_large(exc.limit) from exc
    except jinja2.TemplateSyntaxError as exc:
        raise _failed(f"line {exc.lineno}: {_sentence(exc.message or 'syntax error')}") from exc
    except jinja2.TemplateError as exc:
        raise _failed(_sentence(str(exc))) from exc
    except RecursionError as exc:
        raise _failed("it nests or calls itself too deeply") from exc
    except MemoryError as exc:
        raise _failed("it ran out of memory") from exc
    except OverflowError as exc:
        raise _failed(f"a number or range in it is too large: {_sentence(str(exc))}") from exc
    except Exception as exc:  # anything a template can raise: a broken template is not our bug
        raise _failed(f"{type(exc).__name__}: {_sentence(str(exc))}") from exc
    finally:
        _cancel.reset(cancel_token)
        _limit.reset(token)


def content_spans(
    template: str,
    messages: Sequence[ChatMessage],
    rendered: str,
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool = True,
    variables: Mapping[str, Any] | None = None,
    cancel: threading.Event | None = None,
) -> list[tuple[int, int]] | None:
    """Where the messages' contents (and earlier answers' reasoning, which a client may send
    too) are in `rendered` (render_chat's text for the same arguments): [start, end) ranges, in
    order; None when that cannot be told.

    Each content is rendered again between two markers that no text can guess (a random nonce
    in private-use characters); when the markers, taken out, leave exactly `rendered`, what lay
    between them is content and everything else is the template's own text. A template that
    changes content (trims it, slices it, tests what it starts with) renders differently with
    markers: then None, and the caller decides what to do."""
    nonce = secrets.token_hex(8)
    opening, closing = f"\ue000{nonce}\ue001", f"\ue002{nonce}\ue003"
    marked = [
        ChatMessage(
            m.role,
            f"{opening}{m.content}{closing}",
            f"{opening}{m.reasoning}{closing}" if m.reasoning else "",
        )
        for m in messages
    ]
    try:
        # (a template that refuses the system role folds the marked messages as it folded
        # the real ones: the newline it joins them with is the template's own text)
        text = render_chat(
            template,
            marked,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=add_generation_prompt,
            variables=variables,
            cancel=cancel,
        )
    except ChatTemplateError:
        return None
    spans: list[tuple[int, int]] = []
    plain: list[str] = []
    size = 0
    start: int | None = None
    for piece in re.split(f"({re.escape(opening)}|{re.escape(closing)})", text):
        if piece == opening:
            if start is not None:
                return None
            start = size
        elif piece == closing:
            if start is None:
                return None
            if size > start:
                spans.append((start, size))
            start = None
        else:
            plain.append(piece)
            size += len(piece)
    if start is not None or "".join(plain) != rendered:
        return None
    return spans


# ---------------------------------------------------------------------- thinking
# Short conversations to find a template's thinking switch with: some templates read the switch
# only without a system message (Granite 3.3 writes its own system prompt for `thinking`).
_PROBES = (
    (ChatMessage("system", "You are a helpful assistant."), ChatMessage("user", "What is 2 + 2?")),
    (ChatMessage("user", "What is 2 + 2?"),),
)


def generation_prompt(
    template: str,
    rendered: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str,
    eos_token: str,
    variables: Mapping[str, Any] | None = None,
) -> str:
    """What the template adds for the answer to follow (`<|im_start|>assistant\n<think>\n`):
    `rendered` (with the generation prompt) less the same conversation rendered without it.
    When the two do not share that prefix, the last 200 characters stand in for it."""
    try:
        bare = render_conversation(
            template,
            messages,
            bos_token=bos_token,
            eos_token=eos_token,
            add_generation_prompt=False,
            variables=variables,
        ).text
    except ChatTemplateError:
        bare = ""
    return rendered[len(bare) :] if bare and rendered.startswith(bare) else rendered[-200:]


def reasoning_split(
    template: str,
    rendered: str,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str,
    eos_token: str,
    variables: Mapping[str, Any] | None = None,
) -> ReasoningSplit | None:
    """How the answer to this rendered prompt splits into reasoning and answer (None: the
    model does not think, all of it is the answer)."""
    fmt = detect_format(template)
    if fmt is None:
        return None
    suffix = generation_prompt(
        template, rendered, messages, bos_token=bos_token, eos_token=eos_token, variables=variables
    )
    return ReasoningSplit(fmt, opens_reasoning(fmt, suffix))


def thinking_of(template: str | None, *, bos_token: str, eos_token: str) -> Thinking:
    """What the template does about thinking: its reasoning format, and whether it has an on/off
    switch, found by rendering a short conversation with thinking on, off and unset (a switch
    that changes nothing in the prompt is no switch)."""
    fmt = detect_format(template)
    if template is None or fmt is None:
        return Thinking()

    def prompt(probe: Sequence[ChatMessage], think: bool | None) -> str | None:
        try:
            return render_chat(
                template, probe, bos_token=bos_token, eos_token=eos_token, variables=thinking_variables(think)
            )
        except ChatTemplateError:
            return None

    for probe in _PROBES:
        on = prompt(probe, True)
        if on is None:  # a template that fails (or is too slow) is not asked six times
            break
        off, default = prompt(probe, False), prompt(probe, None)
        if off is not None and on != off:
            return Thinking(fmt, switch=True, default_on=default == on if default is not None else None)
    return Thinking(fmt)
