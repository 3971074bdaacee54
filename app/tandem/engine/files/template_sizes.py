"""How much text a chat template's single calls would build, checked before they build it.

chat_template.py bounds a render's output and its intermediate text, and checks the operators
that repeat a value (`*`, `+`, `~`). A template can also ask Python for a lot of text in one
call, with a width or a count: `"%1500000000s" % "x"`, `"x"|center(1500000000)`,
`s.replace("a", s)`, `"{:>1500000000}".format(x)`. Each is one C-level allocation that no
deadline interrupts (11-20 s and gigabytes before a MemoryError, or the OOM killer), so the
size it would build is worked out from its arguments first, and the call is refused when it
is over the render's limit: the `%` operator, the string methods and the filters that take a
width or a count, and str.format's fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from functools import update_wrapper
from typing import Any

from jinja2.sandbox import SandboxedFormatter
from markupsafe import EscapeFormatter

# The current render's size limit (chat_template sets it; it depends on the conversation). A
# context variable, so renders in two threads each see their own.
limit: ContextVar[int] = ContextVar("chat_template_limit", default=8 * 1024 * 1024)


class TooLarge(Exception):
    """A call would build more text than the render's limit (chat_template words it)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"it builds text larger than {limit:,} characters")
        self.limit = limit


def weight(value: Any, budget: int) -> int:
    """About how many characters `value` becomes as text: the length of its strings plus one per
    item of a list, tuple or dict, counted through nested ones (`[big] * 1000` is 1000 bigs).
    Counting stops once past `budget`, so the check costs at most that many steps."""
    if isinstance(value, (str, bytes)):  # the common case, without the loop
        return len(value)
    total = 0
    pending = [value]
    while pending and total <= budget:
        item = pending.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, (list, tuple)):
            total += len(item)
            if total <= budget:
                pending.extend(item)
        elif isinstance(item, dict):
            total += len(item)
            if total <= budget:
                pending.extend(item.keys())
                pending.extend(item.values())
        else:
            total += 1
    return total


def refuse_over(size: int) -> None:
    """Raise TooLarge when `size` characters are over the current render's limit."""
    most = limit.get()
    if size > most:
        raise TooLarge(most)


def json_size(value: Any, indent: int, budget: int) -> int:
    """About how long json.dumps(value, indent=indent) is: every item on a line of its own,
    indented `indent` per level. Counting stops once past `budget`."""
    total = 0
    pending = [(value, 1)]
    while pending and total <= budget:
        item, depth = pending.pop()
        total += 2 + max(0, indent) * depth + (len(item) if isinstance(item, (str, bytes)) else 0)
        if isinstance(item, (list, tuple)):
            pending.extend((x, depth + 1) for x in item)
        elif isinstance(item, dict):
            pending.extend((x, depth + 1) for x in (*item.keys(), *item.values()))
    return total


def _count(text: str) -> int:
    """A width or precision written in a format: its value, or more than any limit when it has
    more digits than a limit does (int() of a long digit string is itself slow)."""
    return int(text) if len(text) <= 12 else 10**12


# ----------------------------------------------------------------------------- printf
# One conversion of printf-style formatting: %[(key)][flags][width][.precision][length]type.
_CONVERSION = re.compile(r"%(\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?[hlL]?(.)", re.DOTALL)


def check_mod(fmt: Any, values: Any) -> None:
    """`fmt % values` for a string `fmt`: the format's text, every width and precision (`*`
    ones taken from the values, as Python does), and the values themselves."""
    if not isinstance(fmt, str):
        return
    size = len(fmt) + weight(values, limit.get())
    queue = list(values) if isinstance(values, tuple) else [values]
    for m in _CONVERSION.finditer(fmt):
        key, width, precision, kind = m.groups()
        if kind == "%":
            continue
        for part in (width, precision):
            if part == "*":
                star = queue.pop(0) if queue else 0
                size += star if isinstance(star, int) and star > 0 else 0
            elif part:
                size += _count(part)
        if key is None and queue:
            queue.pop(0)
    refuse_over(size)


# ----------------------------------------------------------------------------- str methods
def _widths(s: str, width: Any, *_: Any) -> int:
    return max(len(s), width) if isinstance(width, int) else len(s)


def _expandtabs(s: str, tabsize: Any = 8, *_: Any) -> int:
    return len(s) + s.count("\t") * tabsize if isinstance(tabsize, int) and tabsize > 0 else len(s)


def _replace(s: str, old: Any, new: Any, count: Any = -1, *_: Any) -> int:
    if not isinstance(old, str) or not isinstance(new, str):
        return len(s)
    times = s.count(old) if old else len(s) + 1
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    return len(s) + times * max(0, len(new) - len(old))


def _join(sep: str, items: Any = (), *_: Any) -> int:
    if not hasattr(items, "__len__"):
        return 0  # (not a collection: the call itself refuses it)
    return weight(items, limit.get()) + (len(sep) + 1) * len(items)


def _listed(value: Any) -> Any:
    """What a join goes through, as something with a length: its separator repeats once per
    item, so a generator of items is listed first, as join itself would."""
    if hasattr(value, "__len__") or not hasattr(value, "__iter__"):
        return value
    return list(value)


def _translate(s: str, table: Any = None, *_: Any) -> int:
    if not isinstance(table, Mapping):
        return len(s)
    longest = max((len(v) for v in table.values() if isinstance(v, str)), default=1)
    return len(s) * max(1, longest)


_STR_METHODS: dict[str, Callable[..., int]] = {
    "center": _widths,
    "ljust": _widths,
    "rjust": _widths,
    "zfill": _widths,
    "expandtabs": _expandtabs,
    "replace": _replace,
    "join": _join,
    "translate": _translate,
}


def check_call(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Before a template calls `func`: when it is one of a string's methods that take a width
    or a count, refuse a result over the limit. The arguments to call it with (a join's
    items listed)."""
    owner = getattr(func, "__self__", None)
    name = getattr(func, "__name__", "")
    size_of = _STR_METHODS.get(name)
    if size_of is None or not isinstance(owner, str):
        return args
    if name == "join" and args:
        args = (_listed(args[0]), *args[1:])
    try:
        size = size_of(owner, *args, **kwargs)
    except TypeError:
        return args  # (wrong arguments: the call itself says so, building nothing)
    refuse_over(size)
    return args


class BoundedFormatter(SandboxedFormatter):
    """str.format in a template: each field's width and precision checked before it is
    formatted (after nested fields are filled in: `{:{w}}`), and the text built so far."""

    _FIELD = re.compile(r"(?:.?[<>=^])?[+\- ]?z?#?0?(\d*)[,_]?(?:\.(\d+))?[a-zA-Z%]?")

    def __init__(self, env: Any, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self.built = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        m = self._FIELD.fullmatch(format_spec)
        if m is not None:
            width, precision = m.groups()
            refuse_over(
                self.built + max(weight(value, limit.get()), _count(width or "0")) + _count(precision or "0")
            )
        text = super().format_field(value, format_spec)
        self.built += len(text)
        refuse_over(self.built)
        return text


class BoundedEscapeFormatter(BoundedFormatter, EscapeFormatter):
    """The same for a Markup string's format (its fields escaped, as Jinja's sandbox does)."""


# ----------------------------------------------------------------------------- filters
def _indent(s: Any, width: Any = 4, *_: Any, **__: Any) -> int:
    text = str(s)
    pad = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    return len(text) + (text.count("\n") + text.count("\r") + 2) * max(0, pad)


def _wordwrap(env: Any, s: Any, width: Any = 79, words: Any = True, wrapstring: Any = None, *_: Any) -> int:
    text = str(s)
    wrap = len(wrapstring) if isinstance(wrapstring, str) else 1
    return len(text) + (len(text) + 1) * wrap  # (at most a break after every character)


def _center(value: Any, width: Any = 80, *_: Any) -> int:
    return _widths(str(value), width)


def _format(value: Any, *args: Any, **kwargs: Any) -> int:
    check_mod(str(value), kwargs or args)
    return 0


def _replace_filter(eval_ctx: Any, s: Any, old: Any, new: Any, count: Any = None) -> int:
    return _replace(str(s), old, new, -1 if count is None else count)


def _join_filter(eval_ctx: Any, value: Any, d: Any = "", *_: Any, **__: Any) -> int:
    return _join(d if isinstance(d, str) else "", value)


def _batch(value: Any, linecount: Any, fill_with: Any = None) -> int:
    return linecount if isinstance(linecount, int) and fill_with is not None else 0


_FILTERS: dict[str, Callable[..., int]] = {
    "center": _center,
    "indent": _indent,
    "wordwrap": _wordwrap,
    "format": _format,
    "replace": _replace_filter,
    "join": _join_filter,
    "batch": _batch,
}


def bounded_filters(filters: dict[str, Any]) -> None:
    """Wrap, in place, the filters that take a width or a count with a check of what they
    would build (each keeps its Jinja attributes: which context it is passed)."""
    for name, size_of in _FILTERS.items():
        original = filters.get(name)
        if original is not None:
            filters[name] = _checked(original, size_of, listed=1 if name == "join" else None)


def _checked(
    original: Callable[..., Any], size_of: Callable[..., int], listed: int | None
) -> Callable[..., Any]:
    """`original`, refusing first a call whose `size_of` is over the limit; `listed`: the
    position of an argument that is listed first (a join's items)."""

    def call(*args: Any, **kwargs: Any) -> Any:
        if listed is not None and len(args) > listed:
            args = (*args[:listed], _listed(args[listed]), *args[listed + 1 :])
        try:
            size = size_of(*args, **kwargs)
        except TypeError:
            size = 0  # (wrong arguments: the filter itself says so)
        refuse_over(size)
        return original(*args, **kwargs)

    return update_wrapper(call, original)
