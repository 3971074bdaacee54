"""A conversation, or a text, made into the target's prompt tokens: the part of a ModelPair
(pair.py) that builds prompts.

The target's own chat template renders the conversation (chat_template.py); the template's own
text may hold control tokens, the messages' contents are tokenized as plain text
(prompt_tokens.py), so a message cannot open a turn of its own by spelling `<|im_start|>`. What
cannot fit the context is refused before it is tokenized; a conversation that does not fit
loses its oldest turns (`reserve`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ContextOverflowError, TandemError
from ..reasoning import ReasoningSplit, Thinking, thinking_variables
from .chat_template import ChatMessage, content_spans, reasoning_split, render_conversation, thinking_of
from .prompt_tokens import SpecialTokens, find_contents, tokenize_pieces

if TYPE_CHECKING:
    from ..llama.model import LoadedModel


@dataclass(frozen=True)
class ChatPrompt:
    """A conversation made into a prompt by the target's chat template (ModelPair.chat).

    `reasoning`: how the answer to it splits into reasoning and answer, for
    GenerationConfig.reasoning (None: the model does not think, all of it is the answer).
    `system_folded`: the template refused a system message, and its text went at the start of
    the first user message (a front-end says so once). `dropped`: the oldest messages left out
    to fit the context (chat with `reserve`)."""

    tokens: list[int]
    reasoning: ReasoningSplit | None = None
    system_folded: bool = False
    dropped: int = 0
    text: str = field(default="", repr=False)  # the rendered prompt


class Prompting:
    """Building prompts for a pair's target (a part of ModelPair): thread-safe, so prompts may
    be built in several threads while one generation runs."""

    target: LoadedModel
    _thinking: Thinking | None
    _specials: SpecialTokens | None
    _specials_lock: threading.Lock

    def _init_prompting(self) -> None:
        self._thinking = None  # (found on first use: it renders the template)
        self._specials = None
        self._specials_lock = threading.Lock()

    @property
    def context_size(self) -> int:
        raise NotImplementedError  # (ModelPair's: the tokens both models' contexts hold)

    def has_chat_template(self) -> bool:
        return self.target.chat_template() is not None

    def _special_texts(self) -> tuple[str, str]:
        t = self.target
        bos = t.token_text(t.bos_id) if t.bos_id >= 0 else ""
        eos = t.token_text(t.eos_id) if t.eos_id >= 0 else ""
        return bos, eos

    @property
    def thinking(self) -> Thinking:
        """What the target's chat template does about thinking: how its reasoning is framed
        (None: it does not think), whether it has an on/off switch, and its default."""
        if self._thinking is None:
            bos, eos = self._special_texts()
            self._thinking = thinking_of(self.target.chat_template(), bos_token=bos, eos_token=eos)
        return self._thinking

    @property
    def special_tokens(self) -> SpecialTokens:
        """The target's special tokens (read from its vocabulary on first use)."""
        with self._specials_lock:
            if self._specials is None:
                self._specials = SpecialTokens(self.target.vocab)
            return self._specials

    @property
    def max_prompt_chars(self) -> int:
        """The most characters a prompt that fits the context can have: the context times the
        longest text one token stands for. More cannot fit, whatever the text."""
        return self.context_size * self.special_tokens.longest

    def _check_chars(self, chars: int, what: str = "the prompt", option: str = " (--ctx)") -> None:
        """Refuse, before any tokenizing, a text of `chars` characters that cannot fit the context."""
        if chars > self.max_prompt_chars:
            raise ContextOverflowError(
                f"{what} has {chars:,} characters, more than the context of "
                f"{self.context_size:,} tokens can hold (a token stands for at most "
                f"{self.special_tokens.longest} characters): shorten it or use a larger context{option}"
            )

    def _check_pieces(self, pieces: Sequence[str | int]) -> None:
        """Refuse, before tokenizing, a prompt with more pieces (special tokens, and the plain
        texts between them, a token or more each) than the context holds tokens."""
        if len(pieces) >= self.context_size:
            raise ContextOverflowError(
                f"the prompt has at least {len(pieces):,} tokens but the context holds "
                f"{self.context_size:,}: shorten it or use a larger context (--ctx)"
            )

    def chat_prompt(
        self,
        messages: Sequence[ChatMessage],
        *,
        think: bool | None = None,
        variables: Mapping[str, Any] | None = None,
        cancel: threading.Event | None = None,
        within_context: bool = False,
    ) -> list[int]:
        return self.chat(
            messages, think=think, variables=variables, cancel=cancel, within_context=within_context
        ).tokens

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        think: bool | None = None,
        variables: Mapping[str, Any] | None = None,
        reserve: int | None = None,
        cancel: threading.Event | None = None,
        within_context: bool = False,
    ) -> ChatPrompt:
        """The conversation as a prompt, through the target's chat template. The template's own
        text may hold control tokens; the messages' contents are tokenized as plain text, so a
        message cannot open a turn of its own by spelling `<|im_start|>`.

        `think`: thinking on or off for templates with a switch (None: the model's default);
        `variables`: more for the template (a request's chat_template_kwargs; `think` wins over
        a switch named there). `reserve`: leave that many tokens of context for the answer,
        dropping the oldest turns if needed (see chat_prompt_fitting). `cancel`: set, it stops
        the work (PromptCancelled). `within_context`: refuse (ContextOverflowError) a
        conversation whose text cannot fit the context, before tokenizing it."""
        template = self.target.chat_template()
        if template is None:
            raise TandemError(
                f"{Path(self.target.path).name} has no chat template; send plain text with --raw"
            )
        extra = {**(variables or {}), **thinking_variables(think)}
        if reserve is not None:
            return self._fitting(template, messages, reserve, extra, cancel)
        return self._render(template, messages, extra, cancel=cancel, within_context=within_context)

    def _render(
        self,
        template: str,
        messages: Sequence[ChatMessage],
        extra: dict[str, Any],
        *,
        split: bool = True,
        cancel: threading.Event | None = None,
        within_context: bool = False,
    ) -> ChatPrompt:
        """`split`: also find how the answer splits (one more render, without the generation
        prompt: left out while looking for the turns that fit)."""
        bos, eos = self._special_texts()
        rendered = render_conversation(
            template, messages, bos_token=bos, eos_token=eos, variables=extra, cancel=cancel
        )
        text = rendered.text
        if within_context:
            self._check_chars(len(text))
        _check_unicode(self.target, text)
        specials = self.special_tokens
        spans: list[tuple[int, int]] = []
        spelled = [t for m in messages for t in (m.content, m.reasoning) if t and specials.control_in(t)]
        if spelled:  # (rare: the usual conversation is tokenized without rendering it twice)
            found = content_spans(
                template, messages, text, bos_token=bos, eos_token=eos, variables=extra, cancel=cancel
            )
            if found is None:  # the template changes contents: look for the ones that matter
                found = find_contents(text, spelled)
            if found is None:
                raise TandemError(
                    "a message spells one of the model's control tokens ("
                    f"{specials.control_in(spelled[0])}) and the chat template changes its text, so "
                    "it cannot be kept as plain text: remove the control token from the message"
                )
            spans = found
        pieces = specials.split(text, spans)
        if within_context:
            self._check_pieces(pieces)
        # Templates usually write the BOS text themselves; do not add a second one.
        add_special = not (bos and text.startswith(bos))
        tokens = tokenize_pieces(self.target, pieces, add_special=add_special, cancel=cancel)
        prompt = ChatPrompt(tokens, None, rendered.system_folded, text=text)
        return self._split(template, prompt, messages, extra) if split else prompt

    def chat_prompt_fitting(self, messages: Sequence[ChatMessage], reserve: int) -> tuple[list[int], int]:
        """The conversation's prompt, leaving `reserve` tokens of context for the answer.

        When it does not fit, the oldest turns are dropped (a leading system prompt and the
        latest message always stay) until it does. Returns (tokens, messages dropped): the
        caller tells the user what was dropped. Raises ContextOverflowError when even the system
        prompt and the latest message alone do not fit.
        """
        prompt = self.chat(messages, reserve=reserve)
        return prompt.tokens, prompt.dropped

    def _fitting(
        self,
        template: str,
        messages: Sequence[ChatMessage],
        reserve: int,
        extra: dict[str, Any],
        cancel: threading.Event | None = None,
    ) -> ChatPrompt:
        limit = self.context_size - max(0, reserve)
        msgs = list(messages)
        system = msgs[:1] if msgs and msgs[0].role == "system" else []
        turns = msgs[len(system) :]

        def render(kept: list[ChatMessage]) -> ChatPrompt | None:
            # (A text too long for the context by its characters alone is not tokenized: a
            # pasted book would take minutes, once per cut tried.)
            try:
                return self._render(template, kept, extra, split=False, cancel=cancel, within_context=True)
            except ContextOverflowError:
                return None

        whole = render([*system, *turns])
        if whole is not None and len(whole.tokens) <= limit:
            return self._split(template, whole, [*system, *turns], extra)
        # Cut points: where a user turn starts (so a reply never loses its question), and the
        # last message. Dropping more only shortens the prompt: binary-search the smallest cut.
        cuts = [i for i in range(1, len(turns)) if turns[i].role == "user"] or [len(turns) - 1]
        if cuts[-1] != len(turns) - 1:
            cuts.append(len(turns) - 1)
        lo, hi = 0, len(cuts) - 1
        best: ChatPrompt | None = None
        while lo <= hi:
            mid = (lo + hi) // 2
            candidate = render([*system, *turns[cuts[mid] :]])
            if candidate is not None and len(candidate.tokens) <= limit:
                best, hi = replace(candidate, dropped=cuts[mid]), mid - 1
            else:
                lo = mid + 1
        if best is None:
            last = [*system, turns[-1]]
            self._check_chars(sum(len(m.content) for m in last), "the message", "")
            need = len(self._render(template, last, extra, split=False, cancel=cancel).tokens)
            raise ContextOverflowError(
                f"the message needs {need:,} tokens but the context holds {self.context_size:,} "
                f"(with {reserve:,} kept for the answer): shorten it, or use a larger context"
            )
        return self._split(template, best, [*system, *turns[best.dropped :]], extra)

    def _split(
        self, template: str, prompt: ChatPrompt, messages: Sequence[ChatMessage], extra: dict[str, Any]
    ) -> ChatPrompt:
        bos, eos = self._special_texts()
        how = reasoning_split(template, prompt.text, messages, bos_token=bos, eos_token=eos, variables=extra)
        return replace(prompt, reasoning=how)

    def raw_prompt(self, text: str, *, within_context: bool = False) -> list[int]:
        """`text` as tokens, special-token texts included as plain text. `within_context`: as
        for chat_prompt."""
        if within_context:
            self._check_chars(len(text))
        _check_unicode(self.target, text)
        pieces = self.special_tokens.split(text, [(0, len(text))])  # all of it content
        if within_context:
            self._check_pieces(pieces)
        return tokenize_pieces(self.target, pieces, add_special=True)


def _check_unicode(model: LoadedModel, text: str) -> None:
    """Refuse text with a lone surrogate with the tokenizer's own message, which says where."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        model.tokenize(text)  # raises TandemError naming the character
        raise
