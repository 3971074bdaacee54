"""Engine work for the app, without any Textual: the screens run these in thread workers.

* `LoadedPair` is a loaded ModelPair plus the lock that keeps one engine job at a time
  (a generation, a demo run): llama.cpp contexts are not shareable.
* `GenerationJob` runs one generation in a worker thread and hands its events to the UI
  through an `EventBuffer` (session/handoff.py, as the server's events reach its loop): the
  engine thread only appends (about a microsecond per event) and pokes the UI when the buffer
  goes from empty to non-empty, so the engine never waits for the screen; the UI drains the
  buffer at most once per frame and draws a whole batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tandem.engine import ChatPrompt, Event, GenerationConfig, TandemError
from tandem.session.handoff import Handoff
from tandem.session.prompts import with_reasoning
from tandem.session.refs import PairRef

if TYPE_CHECKING:
    from tandem.engine import ModelPair


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


def failure_text(exc: BaseException) -> str:
    """What to show for a worker's failure: a TandemError's own sentence; anything else is a
    bug or a case a check missed, named as such (the app keeps running)."""
    if isinstance(exc, TandemError):
        return str(exc)
    return f"unexpected error ({type(exc).__name__}: {exc}); please report it"


# ---------------------------------------------------------------------- streaming to the UI
@dataclass(frozen=True)
class JobFailed:
    message: str  # a TandemError's one sentence


Item = tuple[float, Event | JobFailed]  # (perf_counter when the engine produced it, what)


class EventBuffer(Handoff[Item]):
    """Engine thread -> UI thread hand-off (session/handoff.py), each item stamped with when the
    engine produced it."""

    def push_event(self, item: Event | JobFailed) -> None:
        self.push((time.perf_counter(), item))


class GenerationJob:
    """One answer: `run()` in a worker thread, `cancel.set()` from the UI to stop it."""

    _next_id = 0

    def __init__(
        self,
        loaded: LoadedPair,
        prompt: Callable[[ModelPair], ChatPrompt],
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
        self.prompt: ChatPrompt | None = None  # once built: how the answer splits, notes
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
                push = self.buffer.push_event
                self.prompt = prompt = self.build_prompt(self.loaded.pair)
                self.prompt_tokens = list(prompt.tokens)
                # A thinking model's answer is split as its template frames the reasoning.
                config = with_reasoning(self.config, prompt)
                for ev in self.loaded.pair.generate(
                    self.prompt_tokens, config, speculative=self.speculative, cancel=self.cancel
                ):
                    push(ev)
        except Exception as exc:  # the chat must always learn that the answer ended
            self.buffer.push_event(JobFailed(failure_text(exc)))
        finally:
            self.finished.set()
