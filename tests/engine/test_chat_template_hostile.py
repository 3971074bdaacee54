"""A model's chat template is code from whoever made the GGUF: a hostile or broken one must end
in one ChatTemplateError (the chat stays usable, --raw still works), never an exception that
kills the worker, a prompt of gigabytes, or a render that never ends while the pair is locked.

Each hostile render runs in a daemon thread (as the app renders in a worker thread), so a
regression fails the test after a few seconds instead of hanging the suite.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tandem.engine.files.gguf_file import read_gguf
from tandem.engine.text.chat_template import (
    MAX_OUTPUT_CHARS,
    RENDER_SECONDS,
    ChatMessage,
    ChatTemplateError,
    render_chat,
)

pytestmark = pytest.mark.fast  # pure logic: the fast lane (pytest -m fast)

MESSAGES = [
    ChatMessage("system", "You are terse."),
    ChatMessage("user", "Hi there! ünïcödé ☃ and <|im_end|> in the text"),
    ChatMessage("assistant", "Hello."),
    ChatMessage("user", "Write a haiku about speculative decoding."),
]
# Generous: the renders stop after RENDER_SECONDS (2 s); this is what a busy 2-core CI runner
# needs on top (thread start, unwinding, the message).
WITHIN_S = RENDER_SECONDS + 1.5


def _render(template: str, messages: list[ChatMessage] | None = None) -> str:
    return render_chat(template, messages or MESSAGES, bos_token="<s>", eos_token="</s>")


def _outcome_within(template: str, seconds: float, messages: list[ChatMessage] | None = None) -> Any:
    """What render_chat returned or raised, run in a daemon thread; fails if it is still running
    after `seconds` (the thread is left spinning: the test has failed anyway)."""
    result: list[Any] = []

    def work() -> None:
        try:
            result.append(_render(template, messages))
        except BaseException as exc:  # the test looks at what escaped, whatever it is
            result.append(exc)

    t0 = time.monotonic()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the render was still running after {seconds} s"
    result.append(time.monotonic() - t0)
    return result


def _assert_refused(template: str, messages: list[ChatMessage] | None = None) -> str:
    outcome, elapsed = _outcome_within(template, WITHIN_S + 5, messages)
    assert isinstance(outcome, ChatTemplateError), f"expected ChatTemplateError, got {outcome!r}"[:500]
    assert elapsed < WITHIN_S, f"refused only after {elapsed:.1f} s"
    message = str(outcome)
    # One sentence, for a notification or one CLI line, naming the way around it.
    assert "--raw" in message and "\n" not in message and message.count(". ") == 0, message
    assert len(message) < 400, message
    return message


# ---------------------------------------------------------------------- hostile templates
def test_size_bomb_is_refused_before_it_is_built() -> None:
    message = _assert_refused("{{ 'a' * 10**14 }}")
    assert "larger than" in message


@pytest.mark.parametrize(
    "template",
    [
        # Doubling in a loop: each step is small, the 27th is 128 Mi characters.
        "{% set ns = namespace(s='x') %}{% for i in range(27) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
        "{{ ns.s|length }}",
        "{% set ns = namespace(s='x') %}{% for i in range(27) %}{% set ns.s = ns.s + ns.s %}{% endfor %}"
        "{{ ns.s|length }}",
        "{{ ([0] * 10**8)|length }}",
        "{{ 10**8 * 'ab' }}",
        # Output that is only large in total.
        "{% for i in range(100000) %}{{ messages[1].content * 20 }}{% endfor %}",
        # A macro's output is joined in one go.
        "{% macro m() %}{% for i in range(1000) %}{{ 'x' * 100000 }}{% endfor %}{% endmacro %}"
        "{{ m()|length }}",
        # A short list of references to one long text.
        "{% set big = 'x' * 1000000 %}{{ ([big] * 100)|length }}",
    ],
    ids=[
        "concat-doubling",
        "plus-doubling",
        "list-times",
        "int-times-str",
        "total-output",
        "macro-output",
        "list-of-references",
    ],
)
def test_output_and_intermediate_text_are_bounded(template: str) -> None:
    _assert_refused(template)


# One call asks Python for gigabytes with a width or a count (issue 38: 11-20 s and 4.6-6 GB
# before a MemoryError, each); the size is worked out from the arguments and refused first.
SINGLE_CALLS = {
    "percent": '{{ "%1500000000s" % "x" }}',
    "percent-star": '{{ "%*s" % (1500000000, "x") }}',
    "percent-precision": '{{ "%.1500000000f" % 1.0 }}',
    "percent-mapping": '{{ "%(a)1500000000s" % {"a": "x"} }}',
    "center": '{{ "x"|center(1500000000) }}',
    "indent": '{{ "x\ny"|indent(1500000000) }}',
    "format-filter": '{{ "%-1500000000s"|format("x") }}',
    "replace-method": '{% set s = "a" * 4000000 %}{{ s.replace("a", s)|length }}',
    "replace-empty": '{{ ("a" * 100000).replace("", "b" * 1000) }}',
    "replace-filter": '{{ ("a" * 100000)|replace("a", "b" * 1000) }}',
    "ljust": '{{ "x".ljust(1500000000) }}',
    "rjust": '{{ "x".rjust(1500000000) }}',
    "zfill": '{{ "1".zfill(1500000000) }}',
    "expandtabs": '{{ ("\t" * 10000).expandtabs(1000000) }}',
    "str-format": '{{ "{:>1500000000}".format("x") }}',
    "str-format-nested": '{{ "{:{w}}".format("x", w=1500000000) }}',
    "str-format-many": "{{ ('{0:1000000}' * 20).format('x') }}",
    "format-map": '{{ "{a:1500000000}".format_map({"a": "x"}) }}',
    "wordwrap": '{{ ("x" * 3000000)|wordwrap(1, wrapstring="yy") }}',
    "join-filter": '{{ range(100000)|join("x" * 1000) }}',
    "join-generator": '{{ range(100000)|map("string")|join("y" * 1000) }}',
    "join-method": '{{ ("y" * 1000).join(range(100000)|map("string")) }}',
    "translate": '{{ "ab".translate({97: "x" * 8000000}) }}',
    "tojson-indent": "{{ [1, 2]|tojson(indent=1500000000) }}",
    "batch": "{{ [1]|batch(1500000000, 0)|list|length }}",
}


@pytest.mark.parametrize("template", list(SINGLE_CALLS.values()), ids=list(SINGLE_CALLS))
def test_a_single_call_with_a_huge_width_or_count_is_refused_before_it_allocates(template: str) -> None:
    import tracemalloc

    tracemalloc.start()
    try:
        message = _assert_refused(template)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "larger than" in message
    # What the template built before the call (at most the 8 Mi-character limit), not the call.
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"


def test_huge_numbers_are_refused() -> None:
    _assert_refused("{{ 2 ** (10**8) }}")


def test_recursive_macro_is_refused() -> None:
    _assert_refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}")


def test_huge_range_is_refused() -> None:
    _assert_refused("{% for i in range(10**9) %}x{% endfor %}")


@pytest.mark.parametrize(
    "template",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% for a in messages[1].content %}{% for b in messages[1].content %}"
        "{% for c in messages[1].content %}{% endfor %}{% endfor %}{% endfor %}",
        # Output that arrives far too slowly to trip the size limit.
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}.{% endfor %}",
        # A macro that loops, called from a loop.
        "{% macro spin() %}{% for j in range(100000) %}{% endfor %}{% endmacro %}"
        "{% for i in range(100000) %}{{ spin() }}{% endfor %}",
        # No loop at all: a macro calling itself twice, 2**60 calls.
        "{% macro f(n) %}{% if n < 60 %}{{ f(n + 1) }}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(0) }}",
        # A recursive loop, each level iterating again.
        "{% for i in range(100000) recursive %}{% if loop.depth < 5 %}{{ loop(range(100000)) }}{% endif %}"
        "{% endfor %}",
    ],
    ids=[
        "nested-ranges",
        "nested-over-a-long-message",
        "slow-output",
        "macro",
        "macro-fan-out",
        "recursive-loop",
    ],
)
def test_a_render_that_would_run_for_hours_is_stopped(template: str) -> None:
    long = [ChatMessage("user", "x"), ChatMessage("user", "y" * 100_000)]
    message = _assert_refused(template, long)
    assert f"{RENDER_SECONDS:g} s" in message


@pytest.mark.parametrize(
    "template",
    ["{{ 1 / 0 }}", "{{ messages|tojson(indent=[]) }}", "{{ raise_exception('nope') }}", "{% for %}"],
    ids=["zero-division", "type-error", "raise-exception", "syntax"],
)
def test_any_other_failure_is_a_chat_template_error(template: str) -> None:
    outcome, _ = _outcome_within(template, WITHIN_S)
    assert isinstance(outcome, ChatTemplateError), repr(outcome)


def test_a_variable_cannot_hide_the_template_s_own_functions() -> None:
    """A caller's variables (a server request's chat_template_kwargs) named like the functions
    templates call would replace them: raise_exception would then refuse nothing."""
    template = "{% if messages|length > 1 %}{{ raise_exception('one message only') }}{% endif %}ok"
    two = [ChatMessage("user", "a"), ChatMessage("user", "b")]
    for name in ("raise_exception", "strftime_now"):
        with pytest.raises(ChatTemplateError, match="refused the conversation: one message only"):
            render_chat(template, two, bos_token="", eos_token="", variables={name: "x"})


def test_renders_leave_a_debuggers_tracer_alone() -> None:
    """The time limit is compiled into the template: a debugger's or coverage's tracer stays
    in place through renders, also failed ones."""

    def mine(frame: FrameType, event: str, arg: Any) -> None:
        return None

    before = sys.gettrace()
    sys.settrace(mine)
    try:
        assert _render("{{ messages|length }}") == "4"
        assert sys.gettrace() is mine
        with pytest.raises(ChatTemplateError):
            _render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
        assert sys.gettrace() is mine
        with pytest.raises(ChatTemplateError):
            _render("{{ 1 / 0 }}")
        assert sys.gettrace() is mine
    finally:
        sys.settrace(before)


# ---------------------------------------------------------------------- valid templates
def _reference_render(template: str, messages: list[ChatMessage], **extra: Any) -> str:
    """The template rendered the way transformers does it, with no limits."""
    from tandem.engine.text.chat_template import _raise, _tojson

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    return env.from_string(template).render(
        messages=[{"role": m.role, "content": m.content} for m in messages],
        bos_token="<s>",
        eos_token="</s>",
        add_generation_prompt=True,
        **extra,
    )


VALID = [
    # Arithmetic and concatenation the limits look at, in sizes real templates use.
    "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{{ '=' * 3 ~ m.role|upper ~ '=' * 3 + '\n' + m.content + '\n' }}{% endfor %}"
    "{{ ns.n * 2 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} {{ [1] + [2] }} {{ (1, 2) * 2 }} {{ -3 * 'x' }}|",
    "{% macro turn(m) %}[{{ m.role }}]{{ m.content|trim }}{% endmacro %}"
    "{% for m in messages %}{{ turn(m) }}{% if not loop.last %}\n{% endif %}{% endfor %}"
    "{{ messages|tojson }}{{ bos_token ~ eos_token }}",
    # The calls that take a width or a count, in the sizes real templates use.
    "{{ '%s: %5.2f|%-4d|%(x)s' % ('a', 1.5, 7) if false else '%s: %5.2f|%-4d' % ('a', 1.5, 7) }}"
    "{{ '%(x)s=%%' % {'x': 3} }}{{ '%*d' % (4, 2) }}{{ '%s, %s!'|format('Hi', 'you') }}"
    "{{ 'ab'|center(9) }}{{ 'x'.ljust(4) }}{{ 'x'.rjust(3, '.') }}{{ '7'.zfill(3) }}"
    "{{ 'a-b-c'.replace('-', '+', 1) }}{{ 'a-b'|replace('-', '::') }}{{ 'a\tb'.expandtabs(4) }}"
    "{{ '{:>4}|{}|{x:^5}'.format('a', 2, x='m') }}{{ '{k}'.format_map({'k': 'v'}) }}"
    "{{ 'l1\nl2\n\nl3'|indent(2) }}{{ 'l1\nl2'|indent('> ', first=true, blank=true) }}"
    "{{ 'a b c d e f'|wordwrap(3) }}{{ 'a b c d'|wordwrap(3, wrapstring='|') }}"
    "{{ ['a', 'b']|join(', ') }}{{ ', '.join(['a', 'b']) }}{{ messages|map(attribute='role')|join('/') }}"
    "{{ messages|tojson(indent=2) }}{{ [1, 2, 3]|batch(2, 0)|list }}{{ 'ab'.translate({97: 'xy'}) }}",
]


@pytest.mark.parametrize("template", VALID)
def test_valid_templates_render_exactly_as_before(template: str) -> None:
    assert _render(template) == _reference_render(template, MESSAGES)


def test_a_long_conversation_is_never_refused_for_its_size() -> None:
    """The whole saved chat is rendered before the oldest turns are dropped to fit the context:
    a chat longer than MAX_OUTPUT_CHARS must still render (the limit grows with the input)."""
    big = [ChatMessage("user" if i % 2 == 0 else "assistant", f"{i} " + "w" * 999_990) for i in range(12)]
    template = "{% for m in messages %}{{ '<' + m.role + '>' + m.content + '\n' }}{% endfor %}"
    out = _render(template, big)
    assert len(out) > MAX_OUTPUT_CHARS and out == _reference_render(template, big)


def test_the_real_smollm2_template_is_unchanged_and_cheap(smollm2_q4_1: Path) -> None:
    template = read_gguf(smollm2_q4_1).get("tokenizer.chat_template")
    assert isinstance(template, str)
    for messages in (MESSAGES, MESSAGES[1:], MESSAGES[:1]):
        assert _render(template, messages) == _reference_render(template, messages)
    env_template = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)
    plain = [{"role": m.role, "content": m.content} for m in MESSAGES]

    def best_of(fn: Any, n: int = 200) -> float:
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    guarded = best_of(lambda: _render(template))
    bare = best_of(lambda: env_template.render(messages=plain, add_generation_prompt=True))
    # The limits cost well under a millisecond a render (measured: +0.012 ms for these 4
    # messages, +0.25 ms for 100); 2 ms leaves room for a loaded CI machine.
    assert guarded - bare < 0.002, f"render {guarded * 1e3:.3f} ms vs {bare * 1e3:.3f} ms without the limits"


def test_a_template_error_keeps_its_jinja_message() -> None:
    with pytest.raises(ChatTemplateError, match="line 1: Unexpected end of template") as caught:
        _render("{% if true %}")
    assert isinstance(caught.value.__cause__, jinja2.TemplateSyntaxError)
