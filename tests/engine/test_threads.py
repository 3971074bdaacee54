"""The thread policy's decisions on fake step times and fake neighbours (threads.py), the CPU
meter on a fake /proc/stat, and the governor applying a count to every context."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest

from tandem.engine.llama.threads import CpuMeter, RunQueue, ThreadGovernor, ThreadPolicy, WaitMeter

pytestmark = pytest.mark.fast

STEP = 0.010  # a steady step, seconds


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def steps(self, policy: ThreadPolicy, n: int, seconds: float, others: float | None = None) -> list[int]:
        """n steps of `seconds` each; the thread counts the policy changed to."""
        changes = []
        for _ in range(n):
            self.t += seconds
            level = policy.observe(self.t, 1, seconds, others)
            if level is not None:
                changes.append(level)
        return changes


def test_an_idle_machine_keeps_every_thread() -> None:
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    jitter = [STEP * f for f in (1.0, 1.1, 0.95, 1.2, 1.05, 1.15) * 50]
    for s in jitter:
        clock.t += s
        assert policy.observe(clock.t, 1, s, 0.05) is None
    assert policy.level == 2 and policy.changes == 0


def test_steps_much_slower_than_the_steady_state_drop_a_thread() -> None:
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    clock.steps(policy, 20, STEP)  # the steady state
    assert clock.steps(policy, 10, 3 * STEP) == [1]  # a neighbour took a core (no /proc/stat)
    assert policy.level == 1


def test_slow_steps_without_a_wait_for_a_cpu_keep_every_thread() -> None:
    """Slow steps while our threads never waited for a CPU and others used under half a core
    (an idle AMD EPYC VM, the target's steps after the draft model's) are no neighbour's; the
    same steps with no wait known, or with others busy, still drop a thread."""
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    for seconds in [STEP] * 20 + [3 * STEP] * 30:
        clock.t += seconds
        assert policy.observe(clock.t, 1, seconds, 0.1, waited=0.01) is None
    assert policy.level == 2 and policy.changes == 0
    for others, waited in ((0.1, None), (0.8, 0.01)):  # (4 cores: 0.8 leaves room for 2)
        policy, clock = ThreadPolicy(n_max=2, n_cpus=4), Clock()
        for _ in range(20):
            clock.t += STEP
            policy.observe(clock.t, 1, STEP, others, waited=waited)
        changes = []
        for _ in range(10):
            clock.t += 3 * STEP
            changes.append(policy.observe(clock.t, 1, 3 * STEP, others, waited=waited))
        assert 1 in changes, (others, waited)


def test_one_slow_step_is_not_a_neighbour() -> None:
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    clock.steps(policy, 20, STEP)
    assert clock.steps(policy, 1, 10 * STEP) == []
    assert clock.steps(policy, 20, STEP) == []


def test_others_busy_on_a_core_drop_to_the_cores_left() -> None:
    """Two processes started together never saw an idle step: the CPU others use says it."""
    policy, clock = ThreadPolicy(n_max=8, n_cpus=8), Clock()
    assert clock.steps(policy, 10, STEP, others=5.0) == [3]  # 8 - 5 cores left
    assert clock.steps(policy, 50, STEP, others=5.0) == []  # no free core: no probe


def test_a_probe_goes_back_up_when_the_neighbour_leaves() -> None:
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    clock.steps(policy, 10, STEP, others=0.0)
    assert clock.steps(policy, 10, STEP, others=1.0) == [1]
    clock.steps(policy, 100, 1.2 * STEP, others=1.0)  # 1.2 s at one thread, still busy
    assert policy.level == 1
    assert clock.steps(policy, 10, STEP, others=0.0) == [2]  # it left: tried, and kept
    assert clock.steps(policy, 100, STEP, others=0.0) == []
    assert policy.level == 2


def test_a_failed_probe_goes_back_and_waits_longer() -> None:
    """Without /proc/stat (others unknown) a lower count is tried back up now and then; a
    probe whose steps are still slow is undone, and the next waits twice as long."""
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    clock.steps(policy, 20, STEP)
    clock.steps(policy, 5, 3 * STEP)  # neighbour: down to 1
    assert policy.level == 1
    probes = []
    t0 = clock.t
    for _ in range(2000):
        # Still contended: at 2 threads a step takes 3x its steady state, at 1 thread 1.5x.
        s = 3 * STEP if policy.level == 2 else 1.5 * STEP
        clock.t += s
        level = policy.observe(clock.t, 1, s, None)
        if level == 2:
            probes.append(clock.t - t0)
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert len(probes) >= 4
    assert all(later > 1.5 * earlier for earlier, later in itertools.pairwise(gaps[:4]))
    # What the probes cost: a small share of the time spent at 2 threads.
    assert policy.level == 1


def test_threads_waiting_for_a_cpu_drop_at_once() -> None:
    """A neighbour shows in the very step it arrives as time our threads spent queued for a
    CPU: the count drops at its second step (one step's wait can be our own Python's burst,
    see below), without waiting for a window of slow steps."""
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    for _ in range(20):  # idle: under 1% of the time waiting (measured on a 2-core VM)
        clock.t += STEP
        assert policy.observe(clock.t, 1, STEP, 0.0, waited=0.005) is None
    clock.t += 2 * STEP
    assert policy.observe(clock.t, 1, 2 * STEP, 0.0, waited=0.3) is None
    clock.t += 2 * STEP
    assert policy.observe(clock.t, 1, 2 * STEP, 0.0, waited=0.3) == 1
    assert policy.level == 1
    # /proc/stat already saying so (a neighbour there for a while): at once
    policy = ThreadPolicy(n_max=2, n_cpus=2)
    assert policy.observe(clock.t, 1, 2 * STEP, 1.0, waited=0.3) == 1


def test_our_own_threads_waiting_in_bursts_are_no_neighbour() -> None:
    """A server's loop thread sending a round's chunks makes the computing threads wait a
    little (16% measured at 8 clients): with /proc/stat saying nobody else is busy, no drop."""
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    clock.steps(policy, 10, STEP)
    clock.t += STEP
    assert policy.observe(clock.t, 1, STEP, 0.0, waited=0.16) is None
    assert policy.observe(clock.t, 1, STEP, 0.0, waited=0.35) == 1  # twice the share: a neighbour
    policy = ThreadPolicy(n_max=2, n_cpus=2)  # one step's burst of twice the share, then none
    clock.steps(policy, 10, STEP)
    assert policy.observe(clock.t, 1, STEP, 0.0, waited=0.32) is None  # (a front-end's events)
    assert policy.observe(clock.t, 1, STEP, 0.0, waited=0.01) is None
    assert policy.level == 2


def test_one_waiting_step_before_proc_stat_speaks_is_no_neighbour() -> None:
    """A process's first 0.2 s have no /proc/stat figure: one step that waited (our own
    Python's burst; seen on an idle AMD EPYC VM, 43% of a step) does not halve the threads.
    The governor starts its meter at the load, so the first steps mostly have one."""
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    for _ in range(3):
        clock.t += STEP
        assert policy.observe(clock.t, 1, STEP, None, waited=0.0) is None
    clock.t += 2 * STEP
    assert policy.observe(clock.t, 1, 2 * STEP, None, waited=0.43) is None
    clock.t += STEP
    assert policy.observe(clock.t, 1, STEP, None, waited=0.0) is None
    assert policy.level == 2 and policy.changes == 0
    gov = ThreadGovernor(lambda ctx, n: None)
    gov.attach(1, 2)
    assert gov._meter is not None


def test_waiting_drops_to_the_cores_left() -> None:
    policy, clock = ThreadPolicy(n_max=8, n_cpus=8), Clock()
    clock.steps(policy, 10, STEP)
    clock.t += STEP
    # Half the time queued at 8 threads: 4 cores' worth was missing (/proc/stat not read yet:
    # two such steps).
    assert policy.observe(clock.t, 1, STEP, None, waited=0.5) is None
    clock.t += STEP
    assert policy.observe(clock.t, 1, STEP, None, waited=0.5) == 4
    clock.t += STEP
    # /proc/stat says 5 are busy: at 4, 2 lacked, 3 left: 2
    assert policy.observe(clock.t, 1, STEP, 5.0, waited=0.5) == 2


def test_a_probe_that_waits_for_a_cpu_goes_back_at_once() -> None:
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    clock.steps(policy, 10, STEP)
    clock.t += STEP
    assert policy.observe(clock.t, 1, STEP, None, waited=0.4) is None
    clock.t += STEP
    assert policy.observe(clock.t, 1, STEP, None, waited=0.4) == 1
    for _ in range(200):  # at one thread until a probe starts (others unknown: it is tried)
        clock.t += STEP
        if policy.observe(clock.t, 1, STEP, None) == 2:
            break
    assert policy.level == 2
    hold = policy._backoff
    clock.t += STEP
    assert policy.observe(clock.t, 1, STEP, None, waited=0.4) == 1  # the neighbour is still there
    assert policy._backoff == 2 * hold


def test_the_wait_meter_reads_run_delay_of_the_driving_thread(tmp_path: Path) -> None:
    """schedstat's second field, of the thread that asks (the engine's, driving llama.cpp);
    another thread asking reads its own."""
    import threading

    me = threading.get_native_id()
    (tmp_path / str(me)).mkdir()
    (tmp_path / str(me) / "schedstat").write_text("123 1000 7\n")
    meter = WaitMeter(str(tmp_path))
    assert meter.read() == 1000
    (tmp_path / str(me) / "schedstat").write_text("123 3500 8\n")
    assert meter.read() == 3500
    seen: list[int | None] = []
    other = threading.Thread(target=lambda: seen.append(meter.read()))
    other.start()
    other.join()
    assert seen == [None]  # (its file is not in the fake folder: unreadable, not another's)
    meter.close()
    assert WaitMeter(str(tmp_path / "missing")).read() is None


@pytest.mark.skipif(not Path("/proc/thread-self/schedstat").exists(), reason="needs Linux schedstat")
def test_the_wait_meter_reads_this_machine() -> None:
    meter = WaitMeter()
    first = meter.read()
    assert first is not None and first >= 0
    second = meter.read()
    assert second is not None and second >= first
    meter.close()


def test_steady_states_are_per_count_and_batch_size() -> None:
    """A verify batch of 9 takes longer than a single step: that is not a neighbour."""
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    for _ in range(30):
        for key, s in ((1, STEP), (9, 2.5 * STEP)):
            clock.t += s
            assert policy.observe(clock.t, key, s, None) is None


def test_one_thread_is_never_changed() -> None:
    policy, clock = ThreadPolicy(n_max=1, n_cpus=2), Clock()
    clock.steps(policy, 5, STEP)
    assert clock.steps(policy, 20, 10 * STEP, others=2.0) == []


def test_the_cpu_meter_reads_what_others_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stat = tmp_path / "stat"
    cpus = sorted(os.sched_getaffinity(0))
    # The meter's clocks, fixed: on a loaded machine (a CI run) the real ones move between two
    # lines of this test by more than the tolerance.
    clock = {"wall": 100.0, "cpu": 5.0}
    monkeypatch.setattr(time, "monotonic", lambda: clock["wall"])
    monkeypatch.setattr(time, "process_time", lambda: clock["cpu"])

    def write(busy_ticks: int, idle_ticks: int) -> None:
        lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
        # each CPU: user nice system idle iowait irq softirq steal
        lines += [f"cpu{c} {busy_ticks} 0 0 {idle_ticks} 0 0 0 0 0 0" for c in cpus]
        stat.write_text("\n".join(lines) + "\n")

    write(0, 0)
    stat.write_text(stat.read_text().replace("cpu0 0", "cpu0 1"))  # (a non-zero first sample)
    meter = CpuMeter(str(stat))
    tick = 1.0 / os.sysconf("SC_CLK_TCK")
    # One second later, every CPU busy for the whole second, this process idle: all of them
    # were others'.
    clock["wall"] += 1.0
    write(1 + round(1.0 / tick), 0)
    others = meter.update()
    assert others is not None
    assert others == pytest.approx(len(cpus), abs=0.05)
    # The next second, this process used one core's worth: that one is not others'.
    clock["wall"] += 1.0
    clock["cpu"] += 1.0
    write(1 + 2 * round(1.0 / tick), 0)
    others = meter.update()
    assert others == pytest.approx(len(cpus) - 1, abs=0.05)


def test_the_cpu_meter_says_nothing_without_proc_stat(tmp_path: Path) -> None:
    meter = CpuMeter(str(tmp_path / "missing"))
    assert meter.update() is None


def test_the_governor_applies_one_count_to_every_context() -> None:
    applied: dict[int, int] = {}
    now = [0.0]
    gov = ThreadGovernor(
        lambda ctx, n: applied.__setitem__(ctx, n), meter=CpuMeter("/nonexistent"), clock=lambda: now[0]
    )
    gov.adaptive = True
    gov.attach(101, 2)  # the target
    gov.attach(202, 2)  # the draft
    gov.attach(303, 1)  # a context asked for one thread keeps one
    for _ in range(20):
        now[0] += STEP
        gov.observe(1, STEP)
    for _ in range(10):
        now[0] += 5 * STEP
        gov.observe(1, 5 * STEP)
        if gov.level == 1:
            break
    assert gov.level == 1 and applied == {101: 1, 202: 1, 303: 1}
    gov.detach(101)
    gov.detach(202)
    gov.detach(303)
    assert gov.policy is not None and gov.policy.n_max == 1


class _SettlingQueue:
    """A machine whose count of runnable tasks shows one more than ours for `lag_s` after our
    last step (OpenMP's worker settling), and `neighbours` always."""

    def __init__(self, gov: ThreadGovernor, lag_s: float, neighbours: int) -> None:
        self.gov, self.lag_s, self.neighbours = gov, lag_s, neighbours

    def others(self, ours: int) -> int:
        settling = time.monotonic() - self.gov._last_step < self.lag_s
        return self.neighbours + settling


def test_a_prompt_right_after_a_step_waits_for_our_workers_to_settle() -> None:
    """Before a prompt that follows a step at once (the next answer), our own OpenMP worker
    can still count as runnable for milliseconds: seen twice, it used to put the prompt on one
    thread of two (an AMD EPYC VM). The governor looks again once it has settled; a real
    neighbour still takes its core."""
    for neighbours, level in ((0, 2), (1, 1)):
        gov = ThreadGovernor(lambda ctx, n: None, meter=CpuMeter("/nonexistent"))
        gov.adaptive = True
        gov.attach(101, 2)
        gov._queue = _SettlingQueue(gov, 0.01, neighbours)  # type: ignore[assignment]
        gov.observe(1, STEP)
        gov.before_prompt()
        assert gov.level == level, neighbours


def test_a_neighbour_already_computing_takes_its_cores_before_the_step() -> None:
    """Other processes' runnable tasks seen twice in a row (before a prompt, or at two steps):
    down to the cores left at once; a single look (a kernel thread's instant) changes nothing,
    and no probe starts while they are there."""
    policy, clock = ThreadPolicy(n_max=2, n_cpus=2), Clock()
    clock.steps(policy, 10, STEP)
    assert policy.before(clock.t, 1) is None  # once
    assert policy.before(clock.t, 0) is None
    assert policy.before(clock.t, 1) is None
    assert policy.before(clock.t, 2) == 1  # twice: two tasks of another Tandem's
    for _ in range(300):  # 3 s: a probe would be due, but the neighbour is still runnable
        clock.t += STEP
        assert policy.observe(clock.t, 1, STEP, None, runnable=1) is None
    assert policy.level == 1
    policy8 = ThreadPolicy(n_max=8, n_cpus=8)
    policy8.before(0.0, 3)
    assert policy8.before(0.0, 3) == 5  # 8 cores, 3 taken
    assert policy8.before(0.0, 1) is None  # 5 + 1 fit


def test_the_run_queue_counts_other_processes_runnable_tasks(tmp_path: Path) -> None:
    tasks = tmp_path / "task"
    for tid, state in ((10, "R"), (11, "R"), (12, "S")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(f"{tid} (py (thread) x) {state} 1 2 3\n")
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.50 0.40 0.30 5/321 4242\n")
    queue = RunQueue(str(loadavg), str(tasks))
    if queue.others(3) is None:
        pytest.skip("this process may not use every CPU: the run queue is not read")
    assert queue.others(3) == 3  # 5 runnable, 2 of them ours
    assert queue.others(5) == 0  # no more than ours could be: not even scanned
    loadavg.write_text("garbage\n")
    assert queue.others(1) is None


def test_the_run_queue_does_not_count_our_worker_that_slept_between_two_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The machine's count came while an OpenMP worker of ours still spun; it slept before our
    threads were counted (seen on an AMD EPYC VM between two answers: every prompt then began
    on one thread of two). Counted again, the machine is idle; a real neighbour still shows."""
    tasks = tmp_path / "task"
    for tid, state in ((10, "R"), (11, "S")):  # the driver; the worker, asleep by the scan
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(f"{tid} (python) {state} 1 2 3\n")
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.50 0.40 0.30 2/321 4242\n")  # the driver and the spinning worker
    queue = RunQueue(str(loadavg), str(tasks))
    counted = RunQueue._mine

    def then_settled(self: RunQueue, now: str) -> int | None:
        loadavg.write_text(f"0.50 0.40 0.30 {now}/321 4242\n")  # what the machine shows after
        return counted(self)

    monkeypatch.setattr(RunQueue, "_mine", lambda self: then_settled(self, "1"))
    if queue.others(1) is None:
        pytest.skip("this process may not use every CPU: the run queue is not read")
    loadavg.write_text("0.50 0.40 0.30 2/321 4242\n")
    assert queue.others(1) == 0
    loadavg.write_text("0.50 0.40 0.30 2/321 4242\n")
    monkeypatch.setattr(RunQueue, "_mine", lambda self: then_settled(self, "2"))  # a neighbour
    assert queue.others(1) == 1
