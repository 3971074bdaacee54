"""The loaded pair and the work done on it, without any Textual: the screens build on this.

* `PairRef` names a target + draft on disk (and how to show them).
* `LoadedPair` is a loaded ModelPair plus the lock that keeps one engine job at a time
  (a generation, the speed calibration, a demo run): llama.cpp contexts are not shareable.
* `GenerationJob` runs one generation in a worker thread and hands its events to the UI
  through an `EventBuffer`: the engine thread only appends (about a microsecond per event)
  and pokes the UI when the buffer goes from empty to non-empty, so the engine never waits
  for the screen; the UI drains the buffer at most once per frame and draws a whole batch.
* `LiveStats` turns the events into the numbers on screen while tokens stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.engine import (
    ChatMessage,
    DoneEvent,
    Event,
    GenerationConfig,
    GenerationStats,
    ModelPair,
    Origin,
    PrefillEvent,
    RoundEvent,
    TandemError,
    TokenEvent,
)


@dataclass(frozen=True)
class PairRef:
    target: Path
    draft: Path
    name: str = ""  # the catalog name, when the pair came from the catalog

    @property
    def key(self) -> str:
        """Identifies the pair in the files the app keeps (measured speeds)."""
        return f"{self.target.resolve()}|{self.draft.resolve()}"

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        t, d = _stem(self.target), _stem(self.draft)
        # "SmolLM2-135M-Instruct.F16 + SmolLM2-135M-Instruct.Q4_1" -> "SmolLM2-135M-Instruct F16 + Q4_1"
        n = 0
        for i, (a, b) in enumerate(zip(t, d, strict=False)):
            if a != b:
                break
            if a in ".-_":
                n = i + 1
        if n >= 8 and n < len(t) and n < len(d):
            return f"{t[: n - 1]} {t[n:]} + {d[n:]}"
        return f"{t} + {d}"

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "draft": str(self.draft), "name": self.name}

    @classmethod
    def from_json(cls, d: Any) -> PairRef | None:
        if not isinstance(d, dict) or not d.get("target") or not d.get("draft"):
            return None
        return cls(Path(str(d["target"])), Path(str(d["draft"])), str(d.get("name") or ""))


def _stem(path: Path) -> str:
    return path.name.removesuffix(".gguf")


def chat_prompt_tokens(pair: ModelPair, messages: Sequence[ChatMessage]) -> list[int]:
    """The conversation with the model's own chat template; a plain transcript for a model
    that has none (base models), so the chat still works."""
    if pair.has_chat_template():
        return pair.chat_prompt(messages)
    return pair.raw_prompt(_transcript(messages))


def _transcript(messages: Sequence[ChatMessage]) -> str:
    lines = [f"{m.role.capitalize()}: {m.content}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


class FittingChatPrompt:
    """A conversation's prompt that fits the context with room for the answer: when it does
    not, the oldest turns are left out (the system prompt and the new message always stay) and
    `dropped` says how many, for the chat to show. Called in the worker thread."""

    def __init__(self, messages: Sequence[ChatMessage], answer_room: int) -> None:
        self.messages = list(messages)
        self.answer_room = answer_room
        self.dropped = 0

    def __call__(self, pair: ModelPair) -> list[int]:
        # Room for the answer, but never more than half the context: a long conversation in a
        # small context still gets an answer (it stops at the context's end if it must).
        reserve = min(self.answer_room, pair.context_size // 2)
        if pair.has_chat_template():
            tokens, self.dropped = pair.chat_prompt_fitting(self.messages, reserve)
            return tokens
        tokens = pair.raw_prompt(_transcript(self.messages))  # base models: no turns to drop
        return tokens


class LoadedPair:
    def __init__(self, ref: PairRef, pair: ModelPair) -> None:
        self.ref = ref
        self.pair = pair
        self.lock = threading.Lock()  # one engine job at a time
        self.closed = False

    def close(self) -> None:
        """Free the models once the running job (if any) has finished."""
        with self.lock:
            if not self.closed:
                self.closed = True
                self.pair.close()


# ---------------------------------------------------------------------- streaming to the UI
@dataclass(frozen=True)
class JobFailed:
    message: str  # a TandemError's one sentence


Item = tuple[float, Event | JobFailed]  # (perf_counter when the engine produced it, what)


class EventBuffer:
    """Engine thread -> UI thread hand-off: append from one side, drain from the other."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._items: list[Item] = []
        self._wake_pending = False
        self._wake = wake

    def push(self, item: Event | JobFailed) -> None:
        with self._lock:
            self._items.append((time.perf_counter(), item))
            if self._wake_pending:
                return
            self._wake_pending = True
        self._wake()  # once per drain at most: the UI coalesces everything that follows

    def drain(self) -> list[Item]:
        with self._lock:
            items, self._items = self._items, []
            self._wake_pending = False
        return items


class GenerationJob:
    """One answer: `run()` in a worker thread, `cancel.set()` from the UI to stop it."""

    _next_id = 0

    def __init__(
        self,
        loaded: LoadedPair,
        prompt: Callable[[ModelPair], Sequence[int]],
        config: GenerationConfig,
        *,
        speculative: bool,
        wake: Callable[[], None],
    ) -> None:
        GenerationJob._next_id += 1
        self.id = GenerationJob._next_id
        self.loaded = loaded
        self.build_prompt = prompt  # called in the worker, under the lock (tokenizing is work too)
        self.prompt_tokens: list[int] = []
        self.config = config
        self.speculative = speculative
        self.cancel = threading.Event()
        self.buffer = EventBuffer(wake)
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            with self.loaded.lock:
                if self.loaded.closed:
                    raise TandemError("the model pair was unloaded; load a pair to continue")
                push = self.buffer.push
                self.prompt_tokens = list(self.build_prompt(self.loaded.pair))
                for ev in self.loaded.pair.generate(
                    self.prompt_tokens, self.config, speculative=self.speculative, cancel=self.cancel
                ):
                    push(ev)
        except TandemError as exc:
            self.buffer.push(JobFailed(str(exc)))
        finally:
            self.finished.set()


# ---------------------------------------------------------------------- live numbers
@dataclass
class LiveStats:
    """Decode speed, acceptance, tokens per target pass and K, updated event by event.

    The speed counts from the end of prefill (the engine's own definition), using the times
    the engine thread produced the events, so a busy screen cannot make it look slower.
    """

    speculative: bool = True
    prefill: PrefillEvent | None = None
    t_start: float = 0.0
    t_last: float = 0.0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    k: int = 0
    drafter: str = ""  # who drafted the last round: "model", "lookup" or "" (no draft)
    lookup_rounds: int = 0
    per_round: list[float] = field(default_factory=list)  # tokens per target pass, per round
    final: GenerationStats | None = None

    def feed(self, t: float, ev: Event) -> None:
        if isinstance(ev, RoundEvent):
            self.rounds += 1
            self.drafted += ev.drafted
            self.accepted += ev.accepted
            self.generated += ev.emitted
            self.k = ev.k
            self.drafter = ev.drafter
            self.lookup_rounds += ev.drafter == "lookup"
            self.t_last = t
            self.per_round.append(float(ev.emitted))
        elif isinstance(ev, PrefillEvent):
            self.prefill = ev
            self.t_start = self.t_last = t
        elif isinstance(ev, DoneEvent):
            self.final = ev.stats

    @property
    def tokens_per_s(self) -> float:
        if self.final is not None:
            return self.final.decode_tokens_per_s
        dt = self.t_last - self.t_start
        return self.generated / dt if dt > 0 else 0.0

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.generated / self.rounds if self.rounds else 0.0


def stats_summary(s: GenerationStats) -> dict[str, Any]:
    """What a saved answer remembers about how it was produced."""
    return {
        "mode": s.mode,
        "tokens_per_s": round(s.decode_tokens_per_s, 2),
        "generated": s.generated,
        "acceptance": round(s.acceptance_rate, 4),
        "tokens_per_round": round(s.tokens_per_round, 3),
        "prefill_tokens": s.prefill_tokens,
        "stop_reason": s.stop_reason,
    }


def token_pieces(events: Sequence[Event]) -> list[tuple[str, Origin]]:
    return [(e.text, e.origin) for e in events if isinstance(e, TokenEvent) and e.text]
