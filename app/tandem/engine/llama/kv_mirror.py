"""A model's KV-cache mirror: exactly which tokens its cache (or recurrent state) holds, and how
it goes back.

`cached` is the list of tokens in sequence 0's cache: every decode appends to it, every
`truncate(n)` cuts it, so any run can start by keeping the longest common prefix with its prompt
(multi-turn chat, regenerate, or a run cancelled half-way all leave the cache in a known state).

A recurrent or hybrid model (recurrence.py) cannot drop a suffix of its state at will: its
`truncate` uses llama.cpp's own snapshots where they cover the rollback, else restores a
checkpoint taken with `checkpoint()` and re-decodes what is kept, else starts over; `cached`
describes what the state really is in every case.

`KvMirror` is a part of `LoadedModel` (model.py), which decodes.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from .llama_lib import llama_cpp
from .prefix import common_prefix

# Copy only the recurrent part of a hybrid's state (its attention KV cache is truncated as
# usual); a purely recurrent model's state is that part anyway.
STATE_FLAGS = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


class KvMirror:
    """What one model's cache holds (a part of LoadedModel, over its context and memory)."""

    _ctx: Any
    _mem: Any
    cached: list[int]
    recurrent: bool  # a recurrent state (recurrence.py)
    snapshots: int  # positions llama.cpp itself can roll back (0: Tandem checkpoints instead)
    n_batch: int
    _rollback_room: int  # positions a snapshot rollback may undo right now
    _checkpoints: dict[str, Checkpoint]
    # Seconds spent copying states out (checkpoint) and back in plus re-decoding (restore).
    checkpoint_seconds: float
    restore_seconds: float

    def _init_mirror(self, recurrent: bool) -> None:
        self.recurrent = recurrent
        self.snapshots = int(llama_cpp.llama_n_rs_seq(self._ctx)) if recurrent else 0
        self._rollback_room = 0
        self._checkpoints = {}
        self.checkpoint_seconds = 0.0
        self.restore_seconds = 0.0
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self.cached = []

    def _decode(
        self,
        tokens: Sequence[int],
        outputs: Literal["none", "last", "all"],
        should_stop: Callable[[], bool] | None,
    ) -> bool:
        raise NotImplementedError  # (LoadedModel's: a rollback re-decodes what it keeps)

    def truncate(self, n: int, *, replay: bool = True) -> None:
        """Keep the first n cached tokens, drop the rest from the KV cache.

        A recurrent state is rolled back by llama.cpp's snapshots where they reach, else by the
        latest checkpoint at or before n, re-decoding up to n (`replay`; without it the cache
        may be left holding fewer than n tokens: `cached` says how many), else from scratch."""
        if n >= len(self.cached):
            return
        if self.recurrent:
            self._rewind(n, replay)
            return
        ok = llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1)
        if not ok:
            # Some caches (recurrent state, pruned sliding windows) cannot drop a suffix:
            # start over rather than keep a state we cannot describe.
            llama_cpp.llama_memory_clear(self._mem, True)
            self.cached = []
            return
        del self.cached[n:]

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self._mem, True)
        self.cached = []
        self._rollback_room = 0
        self._checkpoints.clear()

    def can_roll_back(self, k: int) -> bool:
        """Whether the next batch of k + 1 tokens can afterwards be cut back by up to k with
        llama.cpp's own snapshots (always, for an attention model): no checkpoint needed."""
        return not self.recurrent or (k <= self.snapshots and k < self.n_batch)

    def checkpoint(self, slot: str = "round") -> None:
        """Keep a copy of the recurrent state as it is now, for `truncate` to come back to.

        Slots: "round" (before a batch that may be rejected) and "prompt" (after a prefill, so
        that regenerating an answer or a cancelled run does not re-read the prompt). A copy is
        bytes of the recurrent state only: a hybrid's attention cache is truncated as usual."""
        if not self.recurrent:
            return
        t0 = time.perf_counter()
        old = self._checkpoints.get(slot)
        point = Checkpoint(len(self.cached), old.data if old is not None else None)
        if self.cached and not save_state(self._ctx, 0, point):
            self._checkpoints.pop(slot, None)  # (truncate then starts over: slow, never wrong)
            return
        self._checkpoints[slot] = point
        self.checkpoint_seconds += time.perf_counter() - t0

    def _rewind(self, n: int, replay: bool) -> None:
        """truncate(n) for a recurrent state."""
        t0 = time.perf_counter()
        back = len(self.cached) - n
        # llama.cpp's snapshots hold the states after each of the last batch's tokens but its
        # first (and seq_rm cannot tell a written snapshot from a stale one), once: a second
        # rollback before the next decode is refused.
        if n > 0 and back <= self._rollback_room and llama_cpp.llama_memory_seq_rm(self._mem, 0, n, -1):
            del self.cached[n:]
            self._rollback_room = 0
            self._forget_checkpoints_beyond(n)
            return
        tokens = self.cached[:n]
        usable = [c for c in self._checkpoints.values() if c.length <= n]
        point = max(usable, key=lambda c: c.length, default=None)
        if point is None or point.length == 0 or not load_state(self._ctx, self._mem, 0, point):
            self.reset()
        else:
            del self.cached[point.length :]
            self._rollback_room = 0
            self._forget_checkpoints_beyond(point.length)
        if replay and len(self.cached) < n:
            self._decode(tokens[len(self.cached) :], "none", None)
        self.restore_seconds += time.perf_counter() - t0

    def _forget_checkpoints_beyond(self, n: int) -> None:
        for slot in [s for s, c in self._checkpoints.items() if c.length > n]:
            del self._checkpoints[slot]

    def keep_prefix_of(self, tokens: Sequence[int]) -> int:
        """Drop cached tokens after the longest common prefix with `tokens`; return its length."""
        self.truncate(common_prefix(self.cached, tokens), replay=False)  # the caller decodes the rest
        return len(self.cached)

    def kv_pos_max(self) -> int:
        return int(llama_cpp.llama_memory_seq_pos_max(self._mem, 0))

    def _resync_after_failure(self) -> None:
        """After a failed decode, make `cached` describe what the KV cache really holds."""
        if self.recurrent:
            self.reset()  # what a failed batch did to a recurrent state cannot be told
            return
        pos_max = self.kv_pos_max()
        if pos_max + 1 < len(self.cached):
            del self.cached[pos_max + 1 :]
        elif pos_max + 1 > len(self.cached) and not llama_cpp.llama_memory_seq_rm(
            self._mem, 0, len(self.cached), -1
        ):
            # Part of the failed batch stayed in the cache and cannot be dropped: start over.
            self.reset()


class Checkpoint:
    """A copy of a sequence's recurrent state, taken when the cache held `length` tokens."""

    __slots__ = ("data", "length", "size")

    def __init__(self, length: int, data: ctypes.Array[ctypes.c_uint8] | None) -> None:
        self.length = length
        self.data = data
        self.size = 0


def save_state(ctx: Any, seq: int, point: Checkpoint) -> bool:
    """Copy sequence `seq`'s recurrent state into `point` (its buffer reused when big enough);
    False when llama.cpp copied nothing."""
    llama_cpp.llama_synchronize(ctx)
    size = int(llama_cpp.llama_state_seq_get_size_ext(ctx, seq, STATE_FLAGS))
    if point.data is None or len(point.data) < size:
        point.data = (ctypes.c_uint8 * size)()
    point.size = int(llama_cpp.llama_state_seq_get_data_ext(ctx, point.data, size, seq, STATE_FLAGS))
    return point.size > 0


def load_state(ctx: Any, mem: Any, seq: int, point: Checkpoint) -> bool:
    """Bring sequence `seq` back to `point`; False when llama.cpp could not."""
    if point.data is None:
        return False
    llama_cpp.llama_synchronize(ctx)
    if not llama_cpp.llama_state_seq_set_data_ext(ctx, point.data, point.size, seq, STATE_FLAGS):
        return False
    # The recurrent part now ends at the checkpoint; a hybrid's attention part still holds the
    # later positions: drop them.
    return bool(llama_cpp.llama_memory_seq_rm(mem, seq, point.length, -1))
