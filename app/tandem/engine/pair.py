"""A target model and (optionally) its draft, loaded together and used as one.

Loading checks everything it can before touching weights: both files are read as GGUF
(missing, not GGUF, truncated), and the tokenizers are compared: a draft of another tokenizer
drafts across tokenizers (drafters/cross.py), with a note, unless it cannot even do that.
Prompts are built with the target's chat template and tokenizer; message content is always
text, never control tokens (prompt_tokens.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .chat_template import ChatMessage, content_spans, reasoning_split, render_conversation, thinking_of
from .compat import PairTokenizers, check_pair
from .config import DRAFT_MAX_LIMIT, GenerationConfig, LoadOptions
from .draft_policy import CostModel
from .drafters import registry
from .errors import ContextOverflowError, TandemError
from .events import Event
from .generation import check_request, generate
from .gguf_file import GGUFInfo, read_gguf
from .model import LoadedModel
from .prompt_tokens import SpecialTokens, find_contents, tokenize_pieces
from .reasoning import ReasoningSplit, Thinking, thinking_variables
from .recurrence import rollback_note


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


class ModelPair:
    def __init__(self, target: LoadedModel, draft: LoadedModel | None) -> None:
        self.target = target
        self.draft = draft
        # The trained drafter (EAGLE-3, DFlash) given as the draft file, loaded beside the target
        # in place of a draft model (None: none).
        self.sidecar: Path | None = None
        # Measured draft/verify costs on this machine, kept across generations so adaptive
        # drafting starts informed (they describe the hardware, not the text).
        self.costs = CostModel()
        self._lock = threading.Lock()  # one generation at a time
        self._thinking: Thinking | None = None  # (found on first use: it renders the template)
        self._specials: SpecialTokens | None = None
        self._specials_lock = threading.Lock()  # prompts may be built in several threads

    @classmethod
    def load(
        cls,
        target_path: str | os.PathLike[str],
        draft_path: str | os.PathLike[str] | None,
        options: LoadOptions | None = None,
        *,
        companions: Sequence[str | os.PathLike[str]] = (),
    ) -> ModelPair:
        """Load the target and its draft (a draft model, or a trained drafter loaded beside it),
        both checked first; any failure is a TandemError with one line.

        `companions`: trained drafters found beside the target rather than named (draft_path is
        None), tried in order. The first that loads drafts; one that fails (its header, or
        llama.cpp refusing it) is skipped with a note (`notes`), and with none the target runs
        alone: a bad file beside a good target never stops the target from being used."""
        if companions and draft_path is not None:
            raise ValueError("companions are tried only when no draft is named")
        opts = options or LoadOptions()
        t_info = read_gguf(target_path)
        registry.refuse_as_target(t_info)
        d_info = read_gguf(draft_path) if draft_path is not None else None
        # A drafter in a file of its own (EAGLE-3, DFlash, MTP heads) given as the draft is no
        # draft model: it loads beside the target, once checked against it (registry.check_file).
        # A draft model may have another tokenizer (check_pair says which, or why it cannot
        # draft: compat.py).
        sidecar = d_info if d_info is not None and registry.classify(d_info) is not None else None
        tokenizers: PairTokenizers | None = None
        if sidecar is not None:
            registry.check_file(t_info, sidecar)
        elif d_info is not None:
            tokenizers = check_pair(t_info, d_info)
            d_info = d_info.without_vocab()
        t_full, t_info = t_info, t_info.without_vocab()  # (companions are checked against the vocabulary)
        # The target verifies up to K+1 tokens at once; the draft only ever needs its last row.
        # The draft also gets a smaller micro-batch: measured on CPU, its quantized prefill is no
        # faster at 256 than at 128 tokens, and 128 halves the compute buffer llama.cpp reserves.
        target = LoadedModel(
            target_path, replace(opts, max_outputs=DRAFT_MAX_LIMIT + 1), role="target", info=t_info
        )
        draft: LoadedModel | None = None
        try:
            registry.attach(target)  # what follows the target's decodes (its own draft heads)
            if sidecar is not None:
                registry.attach_file(target, Path(sidecar.path), sidecar)
            elif draft_path is not None:
                # A recurrent draft decodes one token at a time, which llama.cpp's snapshots
                # cannot roll back: it is checkpointed (drafters/model.py), snapshots would
                # only take memory.
                draft = LoadedModel(
                    draft_path,
                    replace(
                        opts, max_outputs=1, n_batch=min(opts.n_batch, 128), rs_snapshots=0, rpc_servers=()
                    ),
                    role="draft",
                    info=d_info,
                )
            found = _attach_companion(target, t_full, [Path(c) for c in companions])
        except BaseException:
            if draft is not None:
                draft.close()
            target.close()
            raise
        if found.used is not None:
            sidecar = found.used
        target.notes.extend(found.notes)
        if draft is not None and tokenizers is not None and not tokenizers.same:
            draft.foreign_tokenizer = True
            draft.notes.append("draft: " + tokenizers.note(target.path.name, draft.path.name))
        for m in (target, draft):
            if m is not None and m.recurrent:
                m.notes.append(rollback_note(m.role, m.info.architecture, m.snapshots))
        pair = cls(target, draft)
        pair.sidecar = Path(sidecar.path) if sidecar is not None else None
        return pair

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()

    def __enter__(self) -> ModelPair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def draft_file(self) -> Path | None:
        """The file given as the draft: a draft model's, or a trained drafter's (None: none)."""
        return self.draft.path if self.draft is not None else self.sidecar

    @property
    def notes(self) -> list[str]:
        """Things the user should know about how the models were loaded (CPU fallback...)."""
        return self.target.notes + (self.draft.notes if self.draft else [])

    # ------------------------------------------------------------------ prompts
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

    def _check_chars(self, text: str) -> None:
        """Refuse, before any tokenizing, a text that cannot fit the context."""
        if len(text) > self.max_prompt_chars:
            raise ContextOverflowError(
                f"the prompt has {len(text):,} characters, more than the context of "
                f"{self.context_size:,} tokens can hold (a token stands for at most "
                f"{self.special_tokens.longest} characters): shorten it or use a larger context (--ctx)"
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
            self._check_chars(text)
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
        whole = self._render(template, [*system, *turns], extra, split=False, cancel=cancel)
        if len(whole.tokens) <= limit:
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
            candidate = self._render(
                template, [*system, *turns[cuts[mid] :]], extra, split=False, cancel=cancel
            )
            if len(candidate.tokens) <= limit:
                best, hi = replace(candidate, dropped=cuts[mid]), mid - 1
            else:
                lo = mid + 1
        if best is None:
            need = len(self._render(template, [*system, turns[-1]], extra, split=False, cancel=cancel).tokens)
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

    @property
    def context_size(self) -> int:
        """Tokens that fit in both models' contexts."""
        return min(m.n_ctx for m in (self.target, self.draft) if m is not None)

    def raw_prompt(self, text: str, *, within_context: bool = False) -> list[int]:
        """`text` as tokens, special-token texts included as plain text. `within_context`: as
        for chat_prompt."""
        if within_context:
            self._check_chars(text)
        _check_unicode(self.target, text)
        pieces = self.special_tokens.split(text, [(0, len(text))])  # all of it content
        if within_context:
            self._check_pieces(pieces)
        return tokenize_pieces(self.target, pieces, add_special=True)

    # ------------------------------------------------------------------ generation
    def check_request(
        self, prompt: Sequence[int], config: GenerationConfig, *, speculative: bool = True
    ) -> None:
        """Raise what `generate` would refuse for this prompt and config (TandemError;
        ContextOverflowError when the prompt does not fit), without generating: for a caller
        that must answer before the pair is free (the server, while another answer runs)."""
        check_request(self.target, self.draft, prompt, self.exact_config(config), speculative=speculative)

    def exact_config(self, config: GenerationConfig) -> GenerationConfig:
        """`config` as it runs on this pair: `exact` resolved (None: wherever the target allows
        it), and K capped to the verify batch exactness allows (exact.py). Exact output asked
        for (True) where it is not possible is refused with the reason (TandemError)."""
        if config.exact is False:
            return config
        plan = self.target.exact_plan
        if not plan.possible:
            if config.exact:
                raise TandemError(f"exact output is not possible here: {plan.why_not}")
            return replace(config, exact=False)
        k = plan.k_max(config.k_max)
        return replace(config, exact=True, draft_max=k if k != config.k_max else config.draft_max)

    def generate(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        *,
        speculative: bool = True,
        cancel: threading.Event | None = None,
        costs: CostModel | None = None,
    ) -> Iterator[Event]:
        """Stream events for one answer. speculative=False runs the target alone; otherwise
        config.drafter says who drafts (the draft model, prompt lookup, or auto).

        `costs`: what adaptive drafting learns (timings, long-run acceptance) goes here instead
        of into the pair's own record; the benchmark keeps one per setting it compares.

        The pair runs one generation at a time: the returned generator takes the pair's lock
        when it starts and gives it back when it ends (or is closed)."""
        return generate(
            self.target,
            self.draft,
            prompt,
            self.exact_config(config),
            speculative=speculative,
            cancel=cancel,
            costs=self.costs if costs is None else costs,
            lock=self._lock,
        )


@dataclass
class _Companions:
    """What trying the companions gave: the header of the one attached (None: none), and a
    note for each one skipped."""

    used: GGUFInfo | None = None
    notes: list[str] = field(default_factory=list)


def _attach_companion(target: LoadedModel, t_info: GGUFInfo, paths: Sequence[Path]) -> _Companions:
    """Attach the first of `paths` (drafters found beside the target) that passes its checks
    and loads; a note for each one that does not."""
    out = _Companions()
    for i, path in enumerate(paths):
        try:
            info = read_gguf(path)
            registry.check_file(t_info, info)
            registry.attach_file(target, path, info)
        except TandemError as exc:
            rest = paths[i + 1 :]
            then = f"trying {rest[0].name}" if rest else f"{target.path.name} runs without it"
            out.notes.append(f"{path.name}, found beside {target.path.name}, is not used ({exc}): {then}")
            continue
        out.used = info
        break
    return out


def _check_unicode(model: LoadedModel, text: str) -> None:
    """Refuse text with a lone surrogate with the tokenizer's own message, which says where."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        model.tokenize(text)  # raises TandemError naming the character
        raise
