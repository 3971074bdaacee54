"""What an engine's thread hands a front-end's loop (the app's screen, the server's event loop):
items appended on one side, taken all at once on the other, with one wakeup for all that arrive
before the loop takes them. The engine never waits for the front-end (an append is about a
microsecond), and the front-end is woken once per batch, not per item: each wakeup costs the
loop a syscall or a frame."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    """Engine thread -> front-end loop. `wake` (called from the engine's thread) must only ask
    the loop to drain soon; it is called again only after a drain."""

    def __init__(self, wake: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._items: list[T] = []
        self._wake_pending = False
        self._wake = wake

    def push(self, item: T) -> None:
        with self._lock:
            self._items.append(item)
            if self._wake_pending:
                return
            self._wake_pending = True
        self._wake()

    def drain(self) -> list[T]:
        with self._lock:
            items, self._items = self._items, []
            self._wake_pending = False
        return items
