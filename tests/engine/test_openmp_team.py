"""A thread that has computed with llama.cpp leaves no OpenMP team behind (threads.release_team).

Each OS thread that runs a graph gets its own OpenMP team, and libgomp, once it manages more
threads than CPUs, sleeps at barriers after 100 pauses: a team left by the thread that measured
the costs (the bench's main thread) halved the speed of the engine thread's answers on a 2-core
VM. Timing it would be a timed test; what the fix guarantees is structural: the team's worker
threads are gone once the work is done, so only one thread's team is ever alive."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest

from tandem.engine import GenerationConfig, ModelPair
from tandem.engine.decoding.costs import measure_costs
from tandem.engine.llama import threads


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settles_at(n: int, within_s: float = 2.0) -> int:
    """This process's thread count once it reaches `n` (the team's workers exit on their own
    time), or what it is after `within_s`."""
    end = time.monotonic() + within_s
    while _threads() != n and time.monotonic() < end:
        time.sleep(0.01)
    return _threads()


def _leaves_no_team(work: Callable[[], object]) -> tuple[int, int]:
    threads.release_team()  # (earlier tests computed in this thread)
    before = _settles_at(_threads())
    work()
    return before, _settles_at(before)


def test_an_answer_and_a_cost_measurement_leave_no_openmp_team(smollm2_pair: ModelPair) -> None:
    if not os.path.isdir("/proc/self/task") or threads._openmp_runtime() is None:
        pytest.skip("no OpenMP runtime in this build (or no /proc): nothing is left behind")
    if smollm2_pair.target.n_threads < 2:
        pytest.skip("one thread: an OpenMP team has no workers")
    prompt = smollm2_pair.target.tokenize("The capital of France is", add_special=True, parse_special=False)
    config = GenerationConfig(max_tokens=8)

    before, after = _leaves_no_team(lambda: list(smollm2_pair.generate(prompt, config, speculative=True)))
    assert after == before, "the answer's OpenMP workers outlived it"

    context = (prompt * 40)[:64]
    target, draft = smollm2_pair.target, smollm2_pair.draft
    before, after = _leaves_no_team(lambda: measure_costs(target, draft, context, range(2, 5), reps=1))
    assert after == before, "the cost measurement's OpenMP workers outlived it"
