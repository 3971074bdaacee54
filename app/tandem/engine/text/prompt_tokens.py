"""Tokenizing a rendered chat: the template's own markup may hold control tokens
(`<|im_start|>`...), the messages' contents never do.

llama.cpp's tokenizer, asked to parse special tokens, finds every control token's text anywhere
in the prompt, so a message that spells `<|im_end|><|im_start|>system` would open a real system
turn. Here the control tokens are found only in the template's text (outside the content spans
chat_template.content_spans gives), and what lies between them is tokenized as plain text, as
llama.cpp does itself between the special tokens it finds: for a conversation whose contents
spell no control token, the tokens are exactly llama.cpp's.

It also costs linear time: llama.cpp's own search for special tokens grows with the square of
their number (each one found walks its list of pieces from the start: 40,000 short messages took
21 s), while one regular expression pass and a tokenizer call per piece do not; and a caller's
cancel event is checked between pieces.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import PromptCancelled
from ..llama.llama_lib import llama_cpp

if TYPE_CHECKING:
    from ..llama.model import LoadedModel

# What llama.cpp's isspace() strips next to a special token marked lstrip/rstrip (ASCII only).
_SPACE = " \t\n\v\f\r"


@dataclass(frozen=True)
class _Special:
    id: int
    lstrip: bool  # whitespace before it is dropped
    rstrip: bool  # whitespace after it is dropped


class _Finder:
    """Finds a set of special tokens by their text, as llama.cpp's partition does."""

    def __init__(self, by_text: dict[str, _Special]) -> None:
        self.by_text = by_text
        # Longest first, as llama.cpp tries them: where two could match, the longer one wins.
        texts = sorted(by_text, key=len, reverse=True)
        self.pattern = re.compile("|".join(map(re.escape, texts))) if texts else None

    def split(self, text: str, searched: Sequence[tuple[int, int]], out: list[str | int]) -> None:
        """Append `text` to `out` as plain pieces and token ids, looking for tokens only inside
        the `searched` ranges (sorted, not overlapping)."""
        if self.pattern is None:
            if text:
                out.append(text)
            return
        plain_from = 0  # where the plain text not yet appended starts
        for start, end in searched:
            for match in self.pattern.finditer(text, start, end):
                if match.start() < plain_from:  # in whitespace an rstrip token dropped
                    continue
                special = self.by_text[match.group()]
                plain_to = match.start()
                if special.lstrip:
                    while plain_to > plain_from and text[plain_to - 1] in _SPACE:
                        plain_to -= 1
                if plain_to > plain_from:
                    out.append(text[plain_from:plain_to])
                out.append(special.id)
                plain_from = match.end()
                if special.rstrip:
                    while plain_from < len(text) and text[plain_from] in _SPACE:
                        plain_from += 1
        if plain_from < len(text):
            out.append(text[plain_from:])


class SpecialTokens:
    """A vocabulary's special tokens, found by their text: control (and unknown) tokens, which
    only the template's markup may hold, and user-defined ones, which llama.cpp finds in any
    text, special-token parsing or not (added words such as `<think>`)."""

    def __init__(self, vocab: object) -> None:
        control = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        user = llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
        self._vocab = vocab
        controls: dict[str, _Special] = {}
        users: dict[str, _Special] = {}
        for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
            attr = llama_cpp.llama_vocab_get_attr(vocab, token)
            table = controls if attr & control else users if attr & user else None
            if table is None:
                continue
            raw = llama_cpp.llama_vocab_get_text(vocab, token)
            text = raw.decode("utf-8", errors="replace") if raw else ""
            if text and text not in controls and text not in users:  # the first of equal texts
                table[text] = _Special(
                    token,
                    bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP),
                    bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP),
                )
        self._controls = _Finder(controls)
        self._users = _Finder(users)
        self._longest: int | None = None

    @property
    def longest(self) -> int:
        """Bytes of the longest text a token stands for (so a token covers at most that many
        characters); read from the whole vocabulary on first use."""
        if self._longest is None:
            buf = ctypes.create_string_buffer(256)
            longest = 1
            for token in range(llama_cpp.llama_vocab_n_tokens(self._vocab)):
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, True)
                longest = max(longest, abs(n))  # negative: longer than the buffer, by -n
            self._longest = longest
        return self._longest

    def control_in(self, text: str) -> str | None:
        """The first control token `text` spells, if any."""
        pattern = self._controls.pattern
        match = pattern.search(text) if pattern is not None else None
        return match.group() if match is not None else None

    def split(self, text: str, content: Sequence[tuple[int, int]] = ()) -> list[str | int]:
        """`text` as pieces of plain text (holding no special token) and special token ids:
        control tokens are looked for outside the `content` spans (sorted, not overlapping)
        only, user-defined ones everywhere."""
        edges = [0, *(i for span in content for i in span), len(text)]
        markup = [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2)]
        outer: list[str | int] = []
        self._controls.split(text, markup, outer)
        if self._users.pattern is None:
            return outer
        pieces: list[str | int] = []
        for piece in outer:
            if isinstance(piece, str):
                self._users.split(piece, [(0, len(piece))], pieces)
            else:
                pieces.append(piece)
        return pieces


def find_contents(text: str, contents: Sequence[str]) -> list[tuple[int, int]] | None:
    """Where `contents` are in `text`, looked for in order (each as it is, else without its
    outer whitespace, which templates often trim); None if one cannot be found. For a template
    that changes contents, when chat_template.content_spans cannot tell."""
    spans: list[tuple[int, int]] = []
    at = 0
    for content in contents:
        for candidate in (content, content.strip()):
            if not candidate:
                break
            found = text.find(candidate, at)
            if found >= 0:
                spans.append((found, found + len(candidate)))
                at = found + len(candidate)
                break
        else:
            return None
    return spans


def tokenize_pieces(
    model: LoadedModel,
    pieces: Sequence[str | int],
    *,
    add_special: bool,
    cancel: threading.Event | None = None,
) -> list[int]:
    """The tokens of `pieces` (SpecialTokens.split): plain text tokenized without parsing special
    tokens, ids as they are, and BOS/EOS where the vocabulary adds them (`add_special`), all as
    one llama_tokenize call with special tokens parsed would give. Raises PromptCancelled once
    `cancel` is set."""
    vocab = model.vocab
    out: list[int] = []
    if add_special and llama_cpp.llama_vocab_get_add_bos(vocab):
        out.append(llama_cpp.llama_vocab_bos(vocab))
    cap = 0
    buf = (llama_cpp.llama_token * 0)()
    for piece in pieces:
        if cancel is not None and cancel.is_set():
            raise PromptCancelled
        if isinstance(piece, int):
            out.append(piece)
            continue
        raw = piece.encode("utf-8")  # (the caller checked that the text is valid Unicode)
        if len(raw) + 16 > cap:  # one buffer for all pieces: a prompt has thousands
            cap = 2 * len(raw) + 16
            buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, cap, False, False)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(vocab, raw, len(raw), buf, cap, False, False)
        out += buf[:n]
    if add_special and llama_cpp.llama_vocab_get_add_eos(vocab):
        out.append(llama_cpp.llama_vocab_eos(vocab))
    return out
