"""The part of a screen that streams an engine job: wake on new events, draw once per frame.

The engine thread appends events to the job's buffer and posts a `StreamWake` when the buffer
goes from empty to non-empty; the screen drains the buffer at most once a frame, so a fast
engine causes one screen update per frame however many tokens it made. The chat and the demo
both stream this way; each says what draining means for it.
"""

from __future__ import annotations

import time

from textual.screen import Screen

from tandem.engine import DoneEvent, PrefillEvent, RoundEvent, StartEvent, TokenEvent
from tandem.ui.jobs import GenerationJob, JobFailed
from tandem.ui.live_stats import LiveStats
from tandem.ui.messages import StreamWake
from tandem.ui.widgets.token_text import Piece

# Far below what the eye needs (the engine emits a burst of tokens per round anyway), and each
# frame is CPU the UI takes from the engine's threads on a small machine.
FRAME_S = 1 / 10


class StreamingScreen(Screen[None]):
    def __init__(self, *, id: str) -> None:
        super().__init__(id=id)
        self.job: GenerationJob | None = None
        self._last_drain = 0.0
        self._drain_scheduled = False

    def _wake(self, job_id: int) -> None:
        """Called from the engine thread: post_message is thread-safe."""
        self.post_message(StreamWake(job_id))

    def on_stream_wake(self, message: StreamWake) -> None:
        if self.job is None or message.job_id != self.job.id or self._drain_scheduled:
            return
        wait = self._last_drain + FRAME_S - time.monotonic()
        if wait > 0:
            self._drain_scheduled = True
            self.set_timer(wait, self._drain)
        else:
            self._drain()

    def _drain(self) -> None:
        """Take everything the job has produced so far and show it (at most once a frame)."""
        self._drain_scheduled = False
        if self.job is not None:
            self._last_drain = time.monotonic()
            self.show_events(self.job)

    def show_events(self, job: GenerationJob) -> None:
        raise NotImplementedError


def take_events(
    job: GenerationJob, live: LiveStats, ids: list[int] | None = None, reasoning: list[Piece] | None = None
) -> tuple[list[Piece], DoneEvent | None, JobFailed | None]:
    """Empty the job's buffer: the new answer pieces, the end (if reached) or the failure. The
    numbers go to `live` as they are met, token ids to `ids` and a thinking model's reasoning
    pieces to `reasoning` when given (without it, reasoning is not shown)."""
    pieces: list[Piece] = []
    done: DoneEvent | None = None
    failed: JobFailed | None = None
    for t, ev in job.buffer.drain():
        if isinstance(ev, TokenEvent):
            live.feed(t, ev)
            if ids is not None:
                ids.append(ev.id)
            if ev.reasoning and reasoning is not None:
                reasoning.append((ev.reasoning, ev.origin))
            if ev.text:
                pieces.append((ev.text, ev.origin))
        elif isinstance(ev, (RoundEvent, PrefillEvent, StartEvent)):
            live.feed(t, ev)
        elif isinstance(ev, DoneEvent):
            live.feed(t, ev)
            done = ev
        elif isinstance(ev, JobFailed):
            failed = ev
    return pieces, done, failed
