"""Engine work for the app, without any Textual.

* `LoadedPair` is a loaded ModelPair plus its runner (session/runner.py): the engine's thread
  and the queue that answers one request at a time (a chat's answer, a demo's run), as the CLI
  and `tandem serve --parallel 1` are answered.
* `GenerationJob` is one answer: its prompt built in a thread worker (rendering and tokenizing
  a long chat takes time), then asked of the runner, whose engine thread hands the events to
  the UI through an `EventBuffer` (session/handoff.py, as the server's events reach its loop):
  the engine thread only appends (about a microsecond per event) and pokes the UI when the
  buffer goes from empty to non-empty, so the engine never waits for the screen; the UI drains
  the buffer at most once per frame and draws a whole batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tandem.engine import ChatPrompt, DoneEvent, Event, GenerationConfig, SeqRequest, TandemError
from tandem.session import learnt
from tandem.session.handoff import Handoff
from tandem.session.prompts import with_reasoning
from tandem.session.refs import PairRef
from tandem.session.runner import Runner, out_of_memory

if TYPE_CHECKING:
    from tandem.engine import ModelPair


class LoadedPair:
    """Made in the loading worker: the runner's engine thread is created there, at the normal
    priority the UI thread gave up (priority.py)."""

    def __init__(self, ref: PairRef, pair: ModelPair) -> None:
        self.ref = ref
        self.pair = pair
        self.runner = Runner.open(pair)

    @property
    def closed(self) -> bool:
        return self.runner.closed

    def close(self) -> None:
        """Cancel the running answer (it ends within a round), then free the models."""
        if not self.runner.closed:
            self.runner.close()
            try:
                learnt.keep(self.pair)  # (for the next start: session/learnt.py)
            finally:
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
        """Build the prompt (in the calling worker) and ask the runner; returns once asked."""
        runner = self.loaded.runner
        try:
            with runner.using() as pair:
                self.prompt = prompt = self.build_prompt(pair)
            self.prompt_tokens = list(prompt.tokens)
            # A thinking model's answer is split as its template frames the reasoning.
            config = with_reasoning(self.config, prompt)
            runner.submit(
                SeqRequest(self.prompt_tokens, config, self.speculative, self._emit, self._fail, self.cancel)
            )
        except Exception as exc:  # the chat must always learn that the answer ended
            self._fail(exc)

    def _emit(self, events: list[Event]) -> None:  # (the engine's thread, a round at a time)
        push = self.buffer.push_event
        for ev in events:
            push(ev)
        if events and isinstance(events[-1], DoneEvent):
            self.finished.set()

    def _fail(self, exc: BaseException) -> None:
        self.buffer.push_event(JobFailed(failure_text(out_of_memory(exc))))
        self.finished.set()
