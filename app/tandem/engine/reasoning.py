"""Models that think: their reasoning told apart from their answer, as the text streams.

A thinking model writes its reasoning before the answer, framed by markers its chat template
knows (no Textual, no llama.cpp here: this is pure text handling):

* tags: `<think>` … `</think>` (Qwen3/3.5/3.6, QwQ, DeepSeek R1 and V3.1+, GLM 4.5+, SmolLM3,
  Nemotron, MiniMax, Granite 3.3…), and the same shape with other words (`<seed:think>`,
  Cohere's `<|START_THINKING|>`, Gemma 4's `<|channel>thought` … `<channel|>`);
* channels: gpt-oss (OpenAI's "harmony" format) writes `<|channel|>analysis<|message|>` …
  `<|end|>`, then `<|start|>assistant<|channel|>final<|message|>` and the answer.

The format is read from the chat template (`detect_format`), and whether the generation prompt
already opened the reasoning (Qwen3.5's ends in `<think>\\n`, so the output *starts* inside it)
from the rendered prompt (`opens_reasoning`). `ReasoningSplitter` then sorts the streamed tokens
into the two parts: a marker split over several tokens is recognised (text that may still turn
out to be one is held back, as stop strings are in text_stream.py), no marker text reaches
either part, leading whitespace of each part and trailing whitespace of the reasoning are
dropped (the `\\n` templates write around the tags).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .events import Origin, Part, TokenEvent

REASONING: Part = "reasoning"
ANSWER: Part = "answer"

# When a marker counts: always; only before the answer has any text (an opening tag: a model
# that writes "<think>" inside its answer is quoting it); only inside the reasoning (a closing
# tag).
When = Literal["always", "before_answer", "in_reasoning"]


@dataclass(frozen=True)
class Marker:
    text: str
    then: Part | None  # the part that follows it; None: the part it is in goes on
    when: When = "always"


@dataclass(frozen=True)
class ReasoningFormat:
    """How a model frames its reasoning: `open` starts it, `close` ends it (as the chat template
    writes them), `markers` are every string the splitter recognises and removes."""

    name: str  # for messages and JSON: "think tags", "gpt-oss channels"
    open: str
    close: str
    markers: tuple[Marker, ...]


def tags(open_: str, close: str) -> ReasoningFormat:
    """The `<think>` … `</think>` shape, with these two strings."""
    return ReasoningFormat(
        "think tags" if open_ == "<think>" else f"{open_} tags",
        open_,
        close,
        (Marker(open_, REASONING, "before_answer"), Marker(close, ANSWER, "in_reasoning")),
    )


THINK_TAGS = tags("<think>", "</think>")
# gpt-oss: the analysis channel is the reasoning; the final channel (and commentary, the
# preambles it writes before tool calls) the answer. `<|end|>` closes a message and
# `<|start|>assistant` opens the next one: both are framing, in neither part.
HARMONY = ReasoningFormat(
    "gpt-oss channels",
    "<|channel|>analysis<|message|>",
    "<|end|>",
    (
        Marker("<|channel|>analysis<|message|>", REASONING),
        Marker("<|channel|>final<|message|>", ANSWER),
        Marker("<|channel|>commentary<|message|>", ANSWER),
        Marker("<|end|>", ANSWER),
        Marker("<|start|>assistant", None),
    ),
)
# Checked in this order: the first whose markers the template writes is the model's.
TAG_PAIRS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("<seed:think>", "</seed:think>"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    ("<|channel>thought", "<channel|>"),  # Gemma 4
)


def detect_format(template: str | None) -> ReasoningFormat | None:
    """The reasoning format a chat template writes, or None (a model that does not think, or
    one whose markers Tandem does not know: its whole output is the answer)."""
    if not template:
        return None
    if HARMONY.open.split("analysis")[0] in template and "analysis" in template:
        return HARMONY
    for open_, close in TAG_PAIRS:
        if open_ in template and close in template:
            return THINK_TAGS if open_ == "<think>" else tags(open_, close)
    return None


def opens_reasoning(fmt: ReasoningFormat, generation_prompt: str) -> bool:
    """Whether the generation prompt (the text the template adds for the answer to follow) left
    the reasoning open: the answer then starts inside it, without an opening marker."""
    if fmt is HARMONY:
        # gpt-oss's prompt ends in `<|start|>assistant`: the model names the channel itself.
        return generation_prompt.rstrip().endswith(fmt.open)
    opened = generation_prompt.rfind(fmt.open)
    return opened >= 0 and generation_prompt.find(fmt.close, opened + len(fmt.open)) < 0


@dataclass(frozen=True)
class ReasoningSplit:
    """How one generation's output splits: its format, and whether it starts in the reasoning
    (the prompt opened it). GenerationConfig.reasoning; None there: all of it is the answer."""

    format: ReasoningFormat
    opened: bool = False


@dataclass(frozen=True)
class Thinking:
    """What a model's chat template does about thinking (ModelPair.thinking).

    `format`: how its reasoning is framed (None: it does not think, as far as Tandem can tell).
    `switch`: the template turns thinking on and off (`enable_thinking` and its kin make it
    write a different prompt); without one, turning thinking off can only hide the reasoning.
    `default_on`: whether it thinks when not told (None when it has no switch)."""

    format: ReasoningFormat | None = None
    switch: bool = False
    default_on: bool | None = None

    @property
    def thinks(self) -> bool:
        return self.format is not None


# The names real templates read for "think or not": `enable_thinking` (Qwen3/3.5/3.6, GLM,
# SmolLM3, Nemotron 3, DeepSeek V3.1+, Gemma 4…) and `thinking` (Granite 3.3, DeepSeek V3.1
# and V3.2 read it first, Kimi K3). Both are set: a template reads the one it knows. gpt-oss's
# `reasoning_effort` (low/medium/high) is not an on/off switch and is left to the template's
# default; `chat_template_kwargs` (the server) can set it.
SWITCHES = ("enable_thinking", "thinking")


def thinking_variables(think: bool | None) -> dict[str, Any]:
    """The template variables that ask for thinking on or off; none for the model's default."""
    return {} if think is None else dict.fromkeys(SWITCHES, think)


def think_from_variables(variables: Mapping[str, Any]) -> bool | None:
    """The on/off choice a request's template variables make (`{"enable_thinking": false}`)."""
    for name in SWITCHES:
        value = variables.get(name)
        if isinstance(value, bool):
            return value
    return None


# ---------------------------------------------------------------------- streaming split
@dataclass
class _State:
    part: Part
    started: tuple[bool, bool]  # (reasoning, answer) has had a character other than whitespace

    def has_text(self, part: Part) -> bool:
        return self.started[0] if part == REASONING else self.started[1]

    def start(self, part: Part) -> None:
        self.started = (True, self.started[1]) if part == REASONING else (self.started[0], True)


class ReasoningSplitter:
    """Sorts a generation's tokens (TokenEvents, as text_stream.TokenStream releases them) into
    reasoning and answer: each released event gets `part`, `reasoning` (its text in the
    reasoning) and `text` (its text in the answer); marker text is in neither.

    Events whose text may still be the start of a marker (or trailing whitespace of the
    reasoning, dropped if the reasoning ends there) are held back and released whole, in order,
    once that is decided; `finish` releases the rest. One event per token, always."""

    def __init__(self, split: ReasoningSplit) -> None:
        self._markers = split.format.markers
        self._firsts = frozenset(m.text[0] for m in self._markers)
        self._state = _State(REASONING if split.opened else ANSWER, (False, False))
        self._held: list[TokenEvent] = []
        self._reasoning: list[str] = []
        self._answer: list[str] = []

    @property
    def in_reasoning(self) -> bool:
        """Whether the text released so far ends inside the reasoning."""
        return self._state.part == REASONING

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def answer(self) -> str:
        return "".join(self._answer)

    def add(self, event: TokenEvent) -> list[TokenEvent]:
        """Feed one event; return those that can be shown now."""
        text = event.text
        state = self._state
        if not self._held and not any(c in self._firsts for c in text):
            part = state.part
            if not (part == REASONING and text[-1:].isspace()):  # (nothing to hold back)
                if not state.has_text(part):
                    text = text.lstrip()
                    if text:
                        state.start(part)
                self._assign(event, part, text if part == REASONING else "", text if part == ANSWER else "")
                return [event]
        self._held.append(event)
        return self._scan(final=False)

    def add_all(self, events: Iterable[TokenEvent]) -> list[TokenEvent]:
        out: list[TokenEvent] = []
        for event in events:
            out += self.add(event)
        return out

    def finish(self) -> list[TokenEvent]:
        """End of the output: release everything held (a marker left incomplete is text)."""
        return self._scan(final=True)

    def _assign(self, event: TokenEvent, part: Part, reasoning: str, answer: str) -> None:
        event.part, event.reasoning, event.text = part, reasoning, answer
        if reasoning:
            self._reasoning.append(reasoning)
        if answer:
            self._answer.append(answer)

    def _match(self, buf: str, i: int, state: _State) -> tuple[Marker | None, bool]:
        """The marker that starts at buf[i] (if any counts here), and whether buf[i:] could
        still become one (it is a proper prefix of one)."""
        partial = False
        rest = buf[i:]
        for m in self._markers:
            if m.when == "before_answer" and (state.part != ANSWER or state.has_text(ANSWER)):
                continue
            if m.when == "in_reasoning" and state.part != REASONING:
                continue
            if rest.startswith(m.text):
                return m, False
            if m.text.startswith(rest):
                partial = True
        return None, partial

    def _scan(self, *, final: bool) -> list[TokenEvent]:
        """Decide what can be decided of the held events' text, from the state at their start,
        and release the events that lie wholly in it (up to a boundary outside any marker)."""
        held = self._held
        buf = "".join(e.text for e in held)
        ends: dict[int, int] = {}  # text offset where held[k] ends -> k
        offset = 0
        for k, e in enumerate(held):
            offset += len(e.text)
            ends[offset] = k
        state = _State(self._state.part, self._state.started)
        # Per character: the part whose text it is (None: dropped) and the part it counts for.
        dest: list[Part | None] = [None] * len(buf)
        region: list[Part] = [ANSWER] * len(buf)
        clean: dict[int, _State] = {}  # event ends outside any marker -> the state there
        decided = len(buf)
        spaces = -1  # where the reasoning's run of trailing whitespace started
        i = 0
        while True:
            if i in ends:
                clean[i] = _State(state.part, state.started)
            if i >= len(buf):
                break
            if buf[i] in self._firsts:
                marker, partial = self._match(buf, i, state)
                if marker is not None:
                    before = state.part
                    if before == REASONING and spaces >= 0:
                        for j in range(spaces, i):  # the reasoning ends: its trailing whitespace goes
                            dest[j] = None
                    spaces = -1
                    after = marker.then or before
                    counts = REASONING if REASONING in (before, after) else ANSWER
                    for j in range(i, i + len(marker.text)):
                        region[j] = counts
                    state.part = after
                    i += len(marker.text)
                    continue
                if partial and not final:
                    decided = i
                    break
            c = buf[i]
            part = state.part
            region[i] = part
            if c.isspace():
                if state.has_text(part):
                    dest[i] = part
                    if part == REASONING and spaces < 0:
                        spaces = i
            else:
                dest[i] = part
                state.start(part)
                spaces = -1
            i += 1
        if spaces >= 0:
            if final:  # the output ended in the reasoning: its trailing whitespace goes
                for j in range(spaces, len(buf)):
                    dest[j] = None
            else:
                decided = min(decided, spaces)
        # Release the events up to the last clean boundary within the decided text.
        cut = max((end for end in clean if end <= decided), default=0)
        if final:
            cut = len(buf)
        out: list[TokenEvent] = []
        start = 0
        for k, e in enumerate(held):
            end = start + len(e.text)
            if end > cut or (end == cut and k > ends.get(cut, -1)):
                break
            if start == end:  # no text (an incomplete character): the part it is in
                part = clean[start].part if start in clean else state.part
            else:
                part = REASONING if REASONING in region[start:end] else ANSWER
            reasoning = "".join(buf[j] for j in range(start, end) if dest[j] == REASONING)
            answer = "".join(buf[j] for j in range(start, end) if dest[j] == ANSWER)
            self._assign(e, part, reasoning, answer)
            out.append(e)
            start = end
        del held[: len(out)]
        self._state = state if final or not held else clean.get(cut, self._state)
        if final:
            held.clear()
        return out


def split_text(text: str, split: ReasoningSplit) -> tuple[str, str]:
    """(reasoning, answer) of a whole output: what the splitter makes of it streamed."""
    splitter = ReasoningSplitter(split)
    splitter.add(TokenEvent(0, text, Origin.TARGET))
    splitter.finish()
    return splitter.reasoning, splitter.answer
