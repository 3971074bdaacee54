"""Requests waiting for an engine's thread: put and withdrawn from any thread, taken by the
engine's loop, which waits on `wake` (put and stop notify it)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


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
