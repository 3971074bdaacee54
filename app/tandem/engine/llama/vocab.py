"""A loaded model's vocabulary: text to tokens and back, and which tokens end a generation.

`Vocabulary` is a part of `LoadedModel` (model.py): the calls on llama.cpp's vocabulary, with
what is asked once a token remembered per token (its bytes, whether it ends a generation).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from ..errors import TandemError
from .llama_lib import llama_cpp


class Vocabulary:
    """Text and tokens of one model (a part of LoadedModel, over its `vocab` and weights)."""

    vocab: Any  # llama.cpp's llama_vocab
    _model: Any
    _piece_cache: dict[int, bytes]
    eog: dict[int, bool]  # token -> ends a generation, as met (see is_eog)
    texts: dict[int, str]  # token -> its text, where complete (see TokenStream)

    def _init_vocabulary(self) -> None:
        self.vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        self._piece_cache = {}
        self.eog = {}
        self.texts = {}

    def is_eog(self, token: int) -> bool:
        """Whether `token` ends a generation (asked for every token: remembered per token, and
        the generation loop reads `eog` itself first)."""
        eog = self.eog.get(token)
        if eog is None:
            eog = self.eog[token] = bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))
        return eog

    @property
    def bos_id(self) -> int:
        return int(llama_cpp.llama_vocab_bos(self.vocab))

    @property
    def eos_id(self) -> int:
        return int(llama_cpp.llama_vocab_eos(self.vocab))

    @property
    def eot_id(self) -> int:
        """The end-of-turn token (-1: the vocabulary has none)."""
        return int(llama_cpp.llama_vocab_eot(self.vocab))

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: an undecodable byte of argv or a file
            raise TandemError(
                f"the text is not valid Unicode (an undecodable byte at character {exc.start}): "
                "check its encoding (UTF-8 is expected)"
            ) from None
        cap = len(raw) + 16
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The token's bytes (may be part of a UTF-8 character); special tokens render empty."""
        cached = self._piece_cache.get(token)
        if cached is None:
            cached = self._piece_cache[token] = self._token_bytes(token, special=False)
        return cached

    def token_text(self, token: int) -> str:
        """The vocabulary entry's text, special tokens included (for building prompts)."""
        return self._token_bytes(token, special=True).decode("utf-8", errors="replace")

    def detokenize(self, tokens: Sequence[int]) -> str:
        """Text of a token sequence, special tokens included (for showing prompts)."""
        return b"".join(self._token_bytes(t, special=True) for t in tokens).decode("utf-8", errors="replace")

    def _token_bytes(self, token: int, *, special: bool) -> bytes:
        """llama_token_to_piece into a 64-byte buffer, or one as large as it says it needs."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def chat_template(self) -> str | None:
        ptr = llama_cpp.llama_model_chat_template(self._model, None)
        return ptr.decode("utf-8", errors="replace") if ptr else None
