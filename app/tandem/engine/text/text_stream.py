"""From token ids to the text a user sees: UTF-8-safe, with stop strings.

Two problems live here:

* A character can be split across tokens (emoji, CJK, accented letters in byte-level BPE).
  Bytes are fed to an incremental UTF-8 decoder, so an incomplete character yields "" until
  the token that completes it arrives; nothing is printed as garbage.
* A stop string can span tokens ("</an" + "swer>"). Text that could still turn out to be the
  start of a stop string is held back; once a stop string appears, the text is cut right
  before it and the generation ends. Held tokens are released whole, so each released token
  keeps its own text and origin (the UI colours tokens by origin).
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

from ..events import Origin, TokenEvent


class TokenStream:
    def __init__(
        self,
        piece: Callable[[int], bytes],
        stop_strings: Sequence[str] = (),
        texts: dict[int, str] | None = None,
    ) -> None:
        """`piece`: a token's bytes. `texts` (optional, a fast path): a cache of token -> text
        for tokens whose bytes are complete UTF-8 on their own, filled in as they are met."""
        self._piece = piece
        self._texts = texts if texts is not None else {}
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = False  # the decoder holds the start of a character
        self._stops = [s for s in stop_strings if s]
        self._held: list[TokenEvent] = []
        self._released: list[str] = []
        self.stopped = False  # a stop string was found

    @property
    def text(self) -> str:
        return "".join(self._released)

    def add(self, token: int, origin: Origin) -> list[TokenEvent]:
        """Feed one token; return the events that can be shown now."""
        if self.stopped:
            return []
        text = None if self._pending else self._texts.get(token)
        if text is None:
            text = self._decode(token)
        event = TokenEvent(token, text, origin)
        if not self._stops:  # nothing to hold back (the path taken for every token, usually)
            self._released.append(text)
            return [event]
        self._held.append(event)
        return self._check_stops()

    def _decode(self, token: int) -> str:
        """The token's text through the incremental decoder, which joins characters split
        across tokens; complete tokens are remembered for the fast path."""
        data = self._piece(token)
        text = self._decoder.decode(data)
        self._pending = bool(self._decoder.getstate()[0])
        if not self._pending and text.encode("utf-8") == data:
            self._texts[token] = text  # its bytes were complete UTF-8 on their own
        return text

    def finish(self) -> list[TokenEvent]:
        """End of generation: release what was held. An incomplete trailing character (the
        generation was cut mid-character) is dropped rather than shown as U+FFFD."""
        if self.stopped:
            return []
        self._decoder.reset()
        return self._release(len(self._held))

    def _check_stops(self) -> list[TokenEvent]:
        held_text = "".join(e.text for e in self._held)
        hits = [i for i in (held_text.find(s) for s in self._stops) if i >= 0]
        if hits:
            return self._cut_at(min(hits))
        # Keep back the longest tail that is a proper prefix of some stop string.
        keep = 0
        for s in self._stops:
            for n in range(min(len(s) - 1, len(held_text)), keep, -1):
                if held_text.endswith(s[:n]):
                    keep = n
                    break
        boundary = len(held_text) - keep
        count, pos = 0, 0
        for e in self._held:
            if pos + len(e.text) > boundary:
                break
            pos += len(e.text)
            count += 1
        return self._release(count)

    def _cut_at(self, index: int) -> list[TokenEvent]:
        out: list[TokenEvent] = []
        pos = 0
        for e in self._held:
            if pos + len(e.text) <= index:
                out.append(e)
                pos += len(e.text)
                continue
            if index > pos:  # the stop string starts inside this token: keep its head
                out.append(TokenEvent(e.id, e.text[: index - pos], e.origin))
            break
        self._held.clear()
        self.stopped = True
        self._released.extend(e.text for e in out)
        return out

    def _release(self, count: int) -> list[TokenEvent]:
        out = self._held[:count]
        del self._held[:count]
        self._released.extend(e.text for e in out)
        return out
