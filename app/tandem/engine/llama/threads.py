"""CPU threads on a machine that is also doing other things.

llama.cpp's CPU backend runs each graph on an OpenMP team; a thread that reaches one of the
graph's barriers (hundreds a token) first spins, by libgomp's default up to 300,000 pauses,
before it sleeps. Tandem keeps that wait as llama.cpp has it: on an idle machine a barrier is
then never a sleep, and a sleep costs a VM's vCPU a slow wake on some hosts (a spin of 300
pauses, Tandem's until 2026-11-28, cost an Intel Xeon VM 43% of its speed). What a busy machine
needs is fewer threads, not a shorter spin: with more runnable threads than cores the thread a
barrier waits for is often off its core (two Tandems at once fell to 0.3 tok/s from 112), and
one thread has no barriers. So the thread count follows the machine, and fast:

* before a step (and before a prompt is read, one large graph), other processes' tasks
  runnable right now (`RunQueue`): a neighbour already computing takes its cores first;
* after a step, how long our computing threads waited for a CPU during it (`WaitMeter`,
  Linux's schedstat `run_delay`): a neighbour that arrived mid-step shows in that step;
* the CPU time other processes took lately (`CpuMeter`, /proc/stat) and steps much slower than
  their steady state for their batch size (where the others cannot be read).

`ThreadPolicy` decides from these, `ThreadGovernor` applies its count to every llama.cpp context
of the process between rounds (`llama_set_n_threads`; the target and the draft never compute at
the same time, so they share one count). A lower count is tried back when cores come free, by a
probe that is kept only if steps run at their steady speed again. Measured in
docs/benchmarks.md, "A busy machine".
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

# (Defined beside LoadOptions, whose --threads it bounds; the thread policy counts with it.)
from ..config import usable_cpus as usable_cpus


# ----------------------------------------------------------------------------- one OpenMP team
def _openmp_runtime() -> ctypes.CDLL | None:
    """The OpenMP runtime llama.cpp's CPU backend loaded (GNU's libgomp, or LLVM's libomp),
    found without loading one; None where the build has none."""
    for name in ("libgomp.so.1", "libomp.so", "libomp.so.5", "libomp.dylib", "libgomp.1.dylib"):
        with contextlib.suppress(OSError, AttributeError):
            return ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    return None


_OPENMP: list[ctypes.CDLL] = []  # (once found: looked for again until then, a dlopen each)


def release_team() -> None:
    """Free the calling thread's OpenMP team (its worker threads end; the next graph it
    computes starts a new one, in about 0.1 ms).

    Each OS thread that computes a graph gets a team of its own, and libgomp, once it manages
    more threads than there are CPUs, spins 100 pauses at a barrier instead of 300,000, then
    sleeps: one team left behind by another thread halves the speed of every later step on a
    2-core VM (AMD EPYC, SmolLM2 F16: 20.3 against 10.3 ms; `tandem bench` measured its costs
    in its main thread and answered in the engine's, and ran the target alone at 0.6x
    llama-bench). So a thread frees its team when its work is done: the engine after an
    answer, the cost measurement after measuring."""
    runtime = _OPENMP[0] if _OPENMP else _openmp_runtime()
    if runtime is not None:
        _OPENMP[:] = [runtime]
        with contextlib.suppress(AttributeError, OSError):
            runtime.omp_pause_resource_all(1)  # omp_pause_soft (OpenMP 5.0): the threads go


# ----------------------------------------------------------------------------- CPU left by others
class CpuMeter:
    """How many cores other processes kept busy lately, from /proc/stat (the CPUs this process
    may run on) less this process's own CPU time. None where that cannot be read (not Linux):
    the policy then relies on step times alone."""

    MIN_INTERVAL_S = 0.2  # /proc/stat counts in ticks (10 ms): shorter windows are noise

    def __init__(self, path: str = "/proc/stat") -> None:
        self._path = path
        try:
            self._cpus: set[int] | None = set(os.sched_getaffinity(0))
        except AttributeError:
            self._cpus = None
        self._tick = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
        self._last = self._sample()
        self.others: float | None = None  # cores, over the last interval

    def _sample(self) -> tuple[float, float, float] | None:
        """(wall, busy seconds of our CPUs, our process's CPU seconds), or None."""
        try:
            with open(self._path, "rb") as fh:
                text = fh.read(1 << 16).decode("ascii", "replace")
        except OSError:
            return None
        busy = 0
        for line in text.splitlines():
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *values = line.split()
            try:
                cpu = int(name[3:])
                fields = [int(v) for v in values[:8]]
            except ValueError:
                continue
            if (self._cpus is None or cpu in self._cpus) and len(fields) >= 4:
                # user nice system idle iowait irq softirq steal: all but idle and iowait
                # (steal is a hypervisor's other guests: taken from us all the same).
                busy += sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
        if busy == 0:
            return None
        return time.monotonic(), busy * self._tick, time.process_time()

    def update(self) -> float | None:
        """The cores others used since the last update at least MIN_INTERVAL_S ago (else the
        last figure)."""
        last = self._last
        if last is None:
            return None
        now = time.monotonic()
        if now - last[0] < self.MIN_INTERVAL_S:
            return self.others
        sample = self._sample()
        if sample is None:
            self._last = None
            return None
        wall = sample[0] - last[0]
        self.others = max(0.0, (sample[1] - last[1]) - (sample[2] - last[2])) / wall
        self._last = sample
        return self.others


# ----------------------------------------------------------------------------- waiting for a CPU
class WaitMeter:
    """How long the thread that drives llama.cpp waited for a CPU: Linux's schedstat
    `run_delay` (nanoseconds a runnable thread spent queued). Unlike /proc/stat's 10 ms ticks it
    is exact for a single step, so a neighbour shows in the step it arrives: with more runnable
    threads than cores every thread of a team waits its turn, the driver as much as OpenMP's
    workers (measured: within 10% of each other). One read a step; Python's other threads (the
    app's UI, the server's loop) are not counted. None where schedstat cannot be read."""

    def __init__(self, root: str = "/proc/self/task") -> None:
        self._root = root
        self._fd: int | None = None
        self._driver = 0  # the thread whose schedstat is open (the engine's)
        self.ok = os.path.isdir(root)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def read(self) -> int | None:
        """Nanoseconds the calling thread waited in all, or None (not Linux, or no schedstat)."""
        if not self.ok:
            return None
        if self._fd is None or self._driver != threading.get_native_id():
            self.close()
            self._driver = threading.get_native_id()
            try:
                self._fd = os.open(f"{self._root}/{self._driver}/schedstat", os.O_RDONLY)
            except OSError:
                self.ok = False
                return None
        try:
            return int(os.pread(self._fd, 64, 0).split()[1])
        except (OSError, ValueError, IndexError):
            self.close()
            return None


class RunQueue:
    """How many tasks of other processes are runnable right now: /proc/loadavg's count of
    runnable tasks (the whole machine's) less this process's own threads in state R. A
    neighbour already computing shows before a step starts, so the step can be split over the
    cores left instead of waiting at every barrier for a thread that is not running. Our own
    threads are counted (a scan of /proc/self/task) only when the machine's count exceeds what
    ours could explain: the usual read is one pread. None where it cannot be read, or where this
    process may not use every CPU (a container's cpuset: the count is the host's)."""

    def __init__(self, loadavg: str = "/proc/loadavg", tasks: str = "/proc/self/task") -> None:
        self._tasks = tasks
        self._fd: int | None = None
        try:
            whole = os.cpu_count() or 0
            if len(os.sched_getaffinity(0)) >= whole > 0:
                self._fd = os.open(loadavg, os.O_RDONLY)
        except (AttributeError, OSError):
            self._fd = None

    def others(self, ours: int) -> int | None:
        """Other processes' runnable tasks; `ours`: how many of this process's threads may be
        running now (the one asking, OpenMP's spinning workers, one more of Python's)."""
        running = self._running()
        if running is None:
            return None
        if running <= ours:
            return 0
        # More than ours could explain: count ours, then read the machine's count again and
        # count ours once more. Our threads change state between two reads (an OpenMP worker
        # ending its spin, a Python thread woken by an event): one of ours runnable at the
        # second read is so at the scan before it or the one after, unless it came and went
        # in between. (The remaining transients, under 5 ms on an AMD EPYC VM, are why a
        # neighbour must be seen more than once: ThreadPolicy.before, before_prompt.)
        first = self._mine()
        running = self._running()
        last = self._mine()
        if running is None or first is None or last is None:
            return None
        return max(0, running - max(first, last, 1))

    def _running(self) -> int | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            self._fd = None
            return None

    def _mine(self) -> int | None:
        """This process's threads in state R."""
        mine = 0
        try:
            for tid in os.listdir(self._tasks):
                with contextlib.suppress(OSError, IndexError), open(f"{self._tasks}/{tid}/stat", "rb") as fh:
                    mine += fh.read(512).rsplit(b")", 1)[1].split()[0] == b"R"
        except OSError:
            return None
        return mine


# ----------------------------------------------------------------------------- the decisions
@dataclass
class ThreadPolicy:
    """How many threads to compute with, from what the steps and the machine show. Pure: the
    clock and the observations are given (tests drive it with fake step times).

    * Down at once: our computing threads waited for a CPU `waiting` or more of the time
      since the last step (a neighbour took a core: every barrier now waits for a thread that
      is not running) while others used half a core or more (or twice that wait two steps in
      a row whatever /proc/stat says or if it says nothing), to the cores left.
    * Down: a window of steps whose median takes SLOW times its steady state (the fastest
      recently seen for that batch size at that count), or others busy on so many cores that
      ours would share theirs, sets the count to the cores left (at least 1); not where our
      threads never waited for a CPU and others used under half a core (no neighbour's).
    * Up: after `hold_s` at a lower count, if the cores others leave allow more (or nothing
      says: no /proc/stat), a probe runs one window at the full count; steps near their
      steady state keep it, else the count goes back and the next probe waits twice as long
      (a probe whose first step waits for a CPU goes back at once).
    """

    n_max: int
    n_cpus: int
    level: int = 0
    slow: float = 1.5  # median step / steady state that counts as contended
    fine: float = 1.3  # a probe at most this slow is kept
    # Share of the time our threads may wait for a CPU (idle: under 1%; a neighbour on one of
    # two cores: 25-50% from its first step, measured on a 2-core VM).
    waiting: float = 0.15
    window_steps: int = 3
    window_s: float = 0.05
    hold_s: float = 0.5  # at a lower count before the first probe
    max_hold_s: float = 16.0
    changes: int = 0  # every change of level (front-ends say the machine's speed changed)
    _window: list[float] = field(default_factory=list)
    _window_t0: float = 0.0
    _waited_before: bool = False  # the last step waited `waiting` or more
    _window_quiet: int = 0  # steps of the window with a known wait under `waiting` (-1: not all)
    _baseline: dict[tuple[int, object], float] = field(default_factory=dict)
    _probe_from: int = 0  # the level a probe came from (0: no probe running)
    _next_probe: float = 0.0
    _backoff: float = 0.0
    _runnable: int = 0  # other processes' runnable tasks at the last look

    def __post_init__(self) -> None:
        self.level = self.level or self.n_max
        self._backoff = self.hold_s

    def steady(self, key: object) -> float | None:
        return self._baseline.get((self.level, key))

    def observe(
        self,
        now: float,
        key: object,
        seconds: float,
        others: float | None,
        waited: float | None = None,
        runnable: int | None = None,
    ) -> int | None:
        """A step of kind `key` (comparable with other steps of the same key: a batch size)
        took `seconds`; `others`: cores other processes used lately (None: unknown); `waited`:
        the share of the time since the last step our computing threads spent waiting for a
        CPU (None: unknown). Returns the new thread count when it changes."""
        if self.n_max <= 1 or not (seconds > 0 and math.isfinite(seconds)):
            return None
        level = self.before(now, runnable)
        if level is not None:
            return level
        # Our own Python threads (a server's loop sending a round's chunks, a front-end reading
        # the events) make the computing threads wait too, in bursts of a step: that is no
        # neighbour unless /proc/stat agrees, or the wait is twice as long and the step before
        # waited too (a neighbour's wait is in every step). /proc/stat saying nothing (a
        # process's first 0.2 s) is no agreement: one step that waited 43% then dropped an idle
        # AMD EPYC VM's `tandem run --baseline` to one thread for 0.5 s, 1 answer in 4.
        waited_before, self._waited_before = (
            self._waited_before,
            waited is not None and waited >= self.waiting,
        )
        if (
            waited is not None
            and self._waited_before
            and self.level > 1
            and (
                (others is not None and others >= 0.5)
                or (waited >= 2 * self.waiting and waited_before)
                or self._probe_from  # (a probe is only a try: one such step ends it)
            )
        ):
            return self._crowded(now, waited, others)
        b = (self.level, key)
        base = self._baseline.get(b)
        # The steady state: the fastest step seen, let drift up slowly (0.5% a step) so a
        # machine that got slower for good (heat, a longer context) is followed.
        if base is None or seconds < base:
            self._baseline[b] = seconds
            ratio = 1.0
        else:
            self._baseline[b] = base * 1.005
            ratio = seconds / base
        if not self._window:
            self._window_t0 = now
            self._window_quiet = 0
        self._window.append(ratio)
        if waited is not None and self._window_quiet >= 0:
            self._window_quiet = self._window_quiet + 1 if waited < self.waiting else -1
        if len(self._window) < self.window_steps or now - self._window_t0 < self.window_s:
            return None
        median = sorted(self._window)[len(self._window) // 2]
        self._window = []
        # Slow steps are no neighbour's when our threads never waited for a CPU and others
        # used under half a core (hypervisor steal included): the caches the draft model's
        # steps share with the target's, the host's noise. Dropping a thread there only halves
        # the speed (seen on an idle AMD EPYC VM: a drop every few answers, each held 0.5 s).
        quiet = self._window_quiet > 0 and others is not None and others < 0.5
        return self._decide(now, 1.0 if quiet else median, others)

    def _decide(self, now: float, ratio: float, others: float | None) -> int | None:
        free = None if others is None else self.n_cpus - others
        if self._probe_from:  # a probe's window: keep it, or go back and wait longer
            back, self._probe_from = self._probe_from, 0
            if ratio <= self.fine and (free is None or free >= self.level - 0.5):
                self._backoff = self.hold_s
                return None
            self._backoff = min(self.max_hold_s, self._backoff * 2)
            self._next_probe = now + self._backoff
            return self._set(back)
        crowded = free is not None and free < self.level - 0.5
        if self.level > 1 and (ratio >= self.slow or crowded):
            fits = self.level - 1 if free is None else math.floor(free + 0.25)
            self._next_probe = now + self._backoff
            return self._set(max(1, min(self.level - 1, fits)))
        if self.level < self.n_max and now >= self._next_probe:
            if (free is not None and free < self.level + 0.75) or self._runnable:
                return None  # no core free: nothing to try yet (asked again next window)
            self._probe_from = self.level
            return self._set(self.n_max)
        return None

    def before(self, now: float, runnable: int | None) -> int | None:
        """Before a step: other processes' tasks runnable now (RunQueue). Seen twice in a row
        (a kernel thread's instant is not a neighbour), so many that ours would share cores
        with them: down to the cores left at once."""
        seen, self._runnable = self._runnable, runnable or 0
        if not runnable or not seen or self.level <= 1 or self.level + runnable <= self.n_cpus:
            return None
        if self._probe_from:
            self._probe_from = 0
            self._backoff = min(self.max_hold_s, self._backoff * 2)
        self._next_probe = now + self._backoff
        return self._set(max(1, self.n_cpus - runnable))

    def _crowded(self, now: float, waited: float, others: float | None) -> int | None:
        """Threads waited for a CPU: as many fewer as the cores they lacked (at least one),
        or the cores /proc/stat says are left; a probe goes back at once."""
        if self._probe_from:
            back, self._probe_from = self._probe_from, 0
            self._backoff = min(self.max_hold_s, self._backoff * 2)
            self._next_probe = now + self._backoff
            return self._set(min(back, self.level - 1))
        lacked = max(1, round(waited * self.level))
        fits = self.level - lacked
        if others is not None:
            fits = min(fits, math.floor(self.n_cpus - others + 0.25))
        self._next_probe = now + self._backoff
        return self._set(max(1, fits))

    def _set(self, level: int) -> int | None:
        if level == self.level:
            return None
        self.level = level
        self.changes += 1
        self._window = []
        return level


# ----------------------------------------------------------------------------- applying them
SetThreads = Callable[[int, int], None]  # (context, threads)


class ThreadGovernor:
    """One per process: the contexts that compute on the CPU, each with its most threads, and
    the policy's count applied to all of them between steps."""

    def __init__(
        self,
        set_threads: SetThreads,
        meter: CpuMeter | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._set_threads = set_threads
        self._clock = clock
        self._lock = threading.Lock()
        self._contexts: dict[int, int] = {}  # context -> its most threads
        self._meter = meter
        self._waits = WaitMeter()
        self._queue = RunQueue()
        self._waited: tuple[float, int] | None = None  # (when, ns) at the last step
        self._last_step = 0.0  # when the last step was observed (monotonic)
        self.policy: ThreadPolicy | None = None
        self.adaptive = os.environ.get("TANDEM_ADAPTIVE_THREADS", "on").strip().lower() not in ("off", "0")

    def attach(self, ctx: int, n_threads: int) -> None:
        if self._meter is None and self.adaptive:
            # Counting from the load on, so /proc/stat already says what others use at the
            # first steps (a meter made at the first step says nothing for 0.2 s).
            self._meter = CpuMeter()
        with self._lock:
            self._last_step = time.monotonic()  # (a new context: its set-up may have computed)
            self._contexts[ctx] = n_threads
            self._reset_policy()
            if self.policy is not None and self.policy.level < n_threads:
                self._set_threads(ctx, self.policy.level)

    def detach(self, ctx: int) -> None:
        with self._lock:
            if self._contexts.pop(ctx, None) is not None:
                self._reset_policy()

    def _reset_policy(self) -> None:
        n_max = max(self._contexts.values(), default=1)
        if self.policy is not None and self.policy.n_max == n_max:
            return
        level = min(self.policy.level, n_max) if self.policy is not None else n_max
        changes = self.policy.changes if self.policy is not None else 0
        self.policy = ThreadPolicy(n_max, usable_cpus(), level=level, changes=changes)

    @property
    def level(self) -> int:
        return self.policy.level if self.policy is not None else 0

    @property
    def changes(self) -> int:
        """How many times the count changed in this process (a generation compares it)."""
        return self.policy.changes if self.policy is not None else 0

    def observe(self, key: object, seconds: float) -> None:
        """A step of the target (a batch of some size, `key`) took `seconds`; between steps."""
        policy = self.policy
        if policy is None or not self.adaptive or policy.n_max <= 1:
            return
        self._last_step = time.monotonic()
        if self._meter is None:
            self._meter = CpuMeter()
        others = self._meter.update()
        waited = self._waited_share(policy.level)
        runnable = self._queue.others(policy.level + 1) if policy.level > 1 else None
        with self._lock:
            level = policy.observe(self._clock(), key, seconds, others, waited, runnable)
            if level is not None:
                for ctx, most in self._contexts.items():
                    self._set_threads(ctx, min(most, level))
                self._waited = None

    def before_prompt(self) -> None:
        """Before a prompt is read (one large graph, at the start of an answer): a neighbour
        already computing takes its cores now, not after the graph (RunQueue, looked at three
        times over 10-35 ms where the first look shows one: a transient is not a neighbour)."""
        policy = self.policy
        if policy is None or not self.adaptive or policy.level <= 1:
            return
        first = self._queue.others(1)  # (after a pause OpenMP's workers sleep: ours is this one)
        if not first:
            return
        # Right after a step (the next answer, a server's next request) OpenMP's workers may
        # still spin, then stay in the machine's count a few milliseconds more (an AMD EPYC VM:
        # 2-5 ms), and our other Python threads (a front-end woken by the last events) can be
        # runnable for a moment: two more looks, the first once the workers have settled. A
        # neighbour computing is in all three.
        time.sleep(max(self._LOOK_GAP_S, self._SETTLE_S - (time.monotonic() - self._last_step)))
        second = self._queue.others(1)
        if not second:
            return
        time.sleep(self._LOOK_GAP_S)
        if self._meter is None:
            self._meter = CpuMeter()
        self._meter.update()
        with self._lock:
            policy.before(self._clock(), second)
            level = policy.before(self._clock(), self._queue.others(1))
            if level is not None:
                for ctx, most in self._contexts.items():
                    self._set_threads(ctx, min(most, level))
                self._waited = None

    # libgomp's spin after a graph (up to ~15 ms on the VMs measured) and the count's lag.
    _SETTLE_S = 0.03
    _LOOK_GAP_S = 0.005  # a transient runnable task (measured: under 5 ms) is gone by then
    # Longer than this since the last step (a pause between answers), the share is not a step's.
    _WAIT_SPAN_S = 1.0

    def _waited_share(self, level: int) -> float | None:
        """The share of the time since the last step that the driving thread waited for a CPU,
        or None (the first step, after a pause, one thread, or no schedstat)."""
        if level <= 1:
            self._waited = None
            return None
        ns = self._waits.read()
        if ns is None:
            return None
        now = time.monotonic()
        last, self._waited = self._waited, (now, ns)
        if last is None or not 0 < now - last[0] <= self._WAIT_SPAN_S:
            return None
        return (ns - last[1]) / 1e9 / (now - last[0])
