"""What one answer's rounds add up to: its text and token events, where it stops, its counts.

The generation loop (generation.py) and the batched loop of parallel sequences (batch.py) both
hand each round here: the tokens become events (coloured by origin, a thinking model's
reasoning sorted from the answer), an end-of-generation token, a stop string or the token
limit ends the answer, and the counts accumulate for its statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..config import GenerationConfig
from ..drafters import registry
from ..events import DoneEvent, Event, GenerationStats, Origin, RoundEvent, StopReason
from ..llama.model import LoadedModel
from ..reasoning import REASONING, ReasoningFormat, ReasoningSplitter
from ..stats import Tally
from ..text.text_stream import TokenStream


class AnswerTracker:
    """One answer, a round at a time. `history` is the prompt and the answer so far (the rounds'
    tokens are appended to it, up to an end-of-generation token included)."""

    def __init__(self, target: LoadedModel, config: GenerationConfig, history: list[int]) -> None:
        if config.reasoning is None:
            self.stream = TokenStream(target.piece, config.stop, target.texts)
        else:  # (its own text cache: a marker's control token has text here, none elsewhere)
            self.stream = TokenStream(marker_pieces(target, config.reasoning.format), config.stop)
        # A thinking model's output: each token is sorted into reasoning or answer as it is
        # released (None: all of it is the answer).
        self.splitter = ReasoningSplitter(config.reasoning) if config.reasoning is not None else None
        # The counts (stats.py; the app's live panel counts with the same): the reasoning's share
        # too, its tokens and accepted drafts as released, and the drafts and time of the rounds
        # that started inside it.
        self.tally = Tally(registry.names())
        self.history = history
        self.generated = 0
        self.reason: StopReason | None = None
        self._max_tokens = config.max_tokens
        self._eog = target.eog
        self._is_eog = target.is_eog

    @property
    def in_reasoning(self) -> bool:
        return self.splitter is not None and self.splitter.in_reasoning

    def take(self, rnd: RoundEvent, reasoning_s: float | None) -> Sequence[Event]:
        """The events of a round's tokens (not the round itself); sets `reason` when the answer
        ends in it. `reasoning_s`: the round's seconds when it started inside the reasoning."""
        history, eog, stream, splitter = self.history, self._eog, self.stream, self.splitter
        own = rnd.origin(rnd.accepted)
        tokens = rnd.tokens
        if len(tokens) == 1 and splitter is None:  # (the target alone's every round: kept lean)
            tok = tokens[0]
            history.append(tok)
            if eog.get(tok) or (tok not in eog and self._is_eog(tok)):
                self.reason = "eog"
                return self._counted(rnd, 0, reasoning_s, [])
            out = stream.add(tok, own)
            if stream.stopped:
                self.reason = "stop_string"
            return self._counted(rnd, 1, reasoning_s, out)
        events: list[Event] = []
        emitted = 0
        for i, tok in enumerate(tokens):
            history.append(tok)
            if eog.get(tok) or (tok not in eog and self._is_eog(tok)):
                self.reason = "eog"
                break
            emitted += 1
            released = stream.add(tok, Origin.DRAFT if i < rnd.accepted else own)
            if splitter is None:
                events.extend(released)
            else:
                for ev in splitter.add_all(released):
                    if ev.part == REASONING:
                        self.tally.add_reasoning_token(ev.origin is Origin.DRAFT)
                    events.append(ev)
            if stream.stopped:
                self.reason = "stop_string"
                break
        return self._counted(rnd, emitted, reasoning_s, events)

    def _counted(
        self, rnd: RoundEvent, emitted: int, reasoning_s: float | None, events: Sequence[Event]
    ) -> Sequence[Event]:
        self.generated += emitted
        if reasoning_s is not None:
            self.tally.add_reasoning_round(rnd.drafted, reasoning_s)
        if emitted != rnd.emitted:
            rnd.emitted = emitted  # the answer ended inside this round
        self.tally.add_round(rnd.drafter, rnd.drafted, rnd.accepted, emitted, rnd.draft_s, rnd.verify_s)
        if self.reason is None and self.generated >= self._max_tokens:
            self.reason = "max_tokens"
        return events

    def finish(self) -> list[Event]:
        """The events held back until the end (text that could have begun a stop string)."""
        if self.splitter is None:
            return list(self.stream.finish())
        events: list[Event] = []
        for ev in [*self.splitter.add_all(self.stream.finish()), *self.splitter.finish()]:
            if ev.part == REASONING:
                self.tally.add_reasoning_token(ev.origin is Origin.DRAFT)
            events.append(ev)
        return events

    def record(self, base: GenerationStats, decode_s: float, **more: Any) -> GenerationStats:
        return self.tally.record(base, decode_s, stop_reason=self.reason, **more)

    def done(self, stats: GenerationStats) -> DoneEvent:
        if self.splitter is None:
            return DoneEvent(stats, self.stream.text)
        return DoneEvent(stats, self.splitter.answer, self.splitter.reasoning)


def marker_pieces(model: LoadedModel, fmt: ReasoningFormat) -> Callable[[int], bytes]:
    """`model.piece`, except that a control token whose text is part of one of the format's
    markers keeps its text: the output's text leaves control tokens out, but a thinking model's
    markers may be control tokens (gpt-oss's `<|channel|>`, `<|message|>`, `<|end|>`), and the
    splitter must see them to tell reasoning from answer. It removes them from both parts."""
    found: dict[int, bytes] = {}

    def piece(token: int) -> bytes:
        data = model.piece(token)
        if data:
            return data
        known = found.get(token)
        if known is None:
            text = model.token_text(token)
            known = found[token] = (
                text.encode("utf-8") if text and any(text in m.text for m in fmt.markers) else b""
            )
        return known

    return piece
