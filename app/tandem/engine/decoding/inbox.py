"""What an engine is asked (`SeqRequest`, whichever engine answers it: the batched one or the
serial one) and where requests wait for its thread (`Inbox`): put and withdrawn from any
thread, taken by the engine's loop, which waits on `wake` (put and stop notify it)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from ..config import GenerationConfig
    from ..drafters.policy import CostModel
    from ..events import Event

T = TypeVar("T")


@dataclass
class SeqRequest:
    """One answer asked of an engine. `emit` receives its events a round at a time (it must not
    block); `unread` says how many of the batches emitted its reader has not taken yet."""

    prompt: Sequence[int]
    config: GenerationConfig
    speculative: bool
    emit: Callable[[list[Event]], None]
    fail: Callable[[BaseException], None]
    cancel: threading.Event = field(default_factory=threading.Event)
    unread: Callable[[], int] = lambda: 0
    # Who may reuse what this request leaves in a cache: a request reuses a cached prefix only
    # from one of the same group (what it reuses shows in its time and `cached_tokens`, so a
    # shared cache tells one client the beginnings of another's prompts and answers); None:
    # it reuses nothing and leaves nothing reusable.
    cache_group: str | None = ""
    # Where adaptive drafting's learning goes instead of the pair's own record (the benchmark
    # keeps one per setting it compares); the serial engine's (the batched one learns per
    # engine, over its sequences).
    costs: CostModel | None = None


class Inbox(Generic[T]):
    """First come, first served. `items` and `stopped` are read under `wake` (a Condition)."""

    def __init__(self) -> None:
        self.wake = threading.Condition()
        self.items: deque[T] = deque()
        self.stopped = False

    def put(self, item: T) -> None:
        with self.wake:
            self.items.append(item)
            self.wake.notify()

    def withdraw(self, item: T) -> bool:
        """Take an item the engine has not taken out of the inbox; False once it has."""
        with self.wake:
            try:
                self.items.remove(item)
            except ValueError:
                return False
            return True

    def stop(self) -> None:
        with self.wake:
            self.stopped = True
            self.wake.notify()

    def next(self) -> T | None:
        """The next item, waiting for one; None once stopped (what still waits stays: `drain`)."""
        with self.wake:
            while not self.stopped and not self.items:
                self.wake.wait()
            return None if self.stopped else self.items.popleft()

    def drain(self) -> list[T]:
        """Everything still waiting, taken at once (under the lock: a client leaving may withdraw
        one meanwhile)."""
        with self.wake:
            items, self.items = list(self.items), deque()
        return items
