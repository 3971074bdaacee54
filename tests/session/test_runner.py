"""The runner every front-end asks for answers (session/runner.py), on real llama.cpp: its engine
thread gives the answer a direct generation gives, a caller that stops reading cancels its
answer without stalling the next, a failure reaches the caller's thread, and closing cancels
what runs and ends the thread before the models can be freed."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from tandem.engine import (
    ContextOverflowError,
    DoneEvent,
    GenerationConfig,
    ModelPair,
    SamplerSettings,
    SeqRequest,
    TandemError,
    TokenEvent,
)
from tandem.session.collect import collect
from tandem.session.runner import Runner

GREEDY = GenerationConfig(max_tokens=24, sampler=SamplerSettings(temperature=0.0))


def test_an_answer_through_the_runner_is_the_one_a_direct_generation_gives(tiny_pair: ModelPair) -> None:
    prompt = tiny_pair.raw_prompt("The river runs")
    # A fixed K of the draft model drafts whatever the pair's costs learnt in earlier tests say
    # (adaptive K there may not draft at all: the full suite, 2026-12-07).
    drafting = replace(GREEDY, drafter="model", adaptive=False, draft_max=4)
    direct = collect(tiny_pair.generate(prompt, drafting))
    alone = collect(tiny_pair.generate(prompt, GREEDY, speculative=False))
    with Runner.open(tiny_pair) as runner:
        assert runner.n_seq == 1 and runner.ready.is_set()
        through = collect(runner.stream(prompt, drafting))
        baseline = collect(runner.stream(prompt, GREEDY, speculative=False))
    assert through.ids == direct.ids == alone.ids == baseline.ids
    assert through.stats.mode == "speculative" and through.stats.drafted > 0
    assert baseline.stats.mode == "baseline" and baseline.stats.drafted == 0
    assert not runner._thread.is_alive()  # closing joined the engine's thread


def test_leaving_a_stream_early_cancels_it_and_the_next_answer_runs(tiny_pair: ModelPair) -> None:
    prompt = tiny_pair.raw_prompt("Once upon a time")
    long = replace(GREEDY, max_tokens=400)
    cancel = threading.Event()
    with Runner.open(tiny_pair) as runner:
        stream = runner.stream(prompt, long, cancel=cancel)
        for ev in stream:
            if isinstance(ev, TokenEvent):
                break
        stream.close()  # the reader is gone
        assert cancel.is_set()
        # The engine is free again: the next answer is whole, as the pair gives it alone.
        after = collect(runner.stream(prompt, GREEDY))
    assert (
        after.stats.stop_reason == "max_tokens"
        and after.ids == collect(tiny_pair.generate(prompt, GREEDY)).ids
    )


def test_a_refused_request_fails_in_the_caller_s_thread_and_the_runner_goes_on(tiny_pair: ModelPair) -> None:
    too_long = [1] * (tiny_pair.context_size + 5)
    with Runner.open(tiny_pair) as runner:
        with pytest.raises(ContextOverflowError, match="--ctx"):
            runner.check(too_long, GREEDY, speculative=True)  # refused before it waits
        with pytest.raises(ContextOverflowError):
            collect(runner.stream(too_long, GREEDY))  # and by the engine, had it been asked
        prompt = tiny_pair.raw_prompt("Still here")
        assert collect(runner.stream(prompt, GREEDY)).stats.stop_reason == "max_tokens"


def test_closing_cancels_the_running_answer_and_tells_the_waiting_one(tiny_pair: ModelPair) -> None:
    prompt = tiny_pair.raw_prompt("A long story")
    started, ended = threading.Event(), threading.Event()
    reasons: list[str] = []
    failures: list[BaseException] = []

    def emit(events: list[object]) -> None:
        started.set()
        for ev in events:
            if isinstance(ev, DoneEvent):
                reasons.append(ev.stats.stop_reason)
                ended.set()

    runner = Runner.open(tiny_pair)
    long = replace(GREEDY, max_tokens=100_000)
    running = SeqRequest(prompt, long, True, emit, failures.append)
    waiting = SeqRequest(prompt, GREEDY, True, emit, failures.append)
    runner.submit(running)
    runner.submit(waiting)
    assert started.wait(60)
    runner.close()  # returns once the engine's thread has ended
    assert ended.is_set() and reasons == ["cancelled"]
    assert len(failures) == 1 and isinstance(failures[0], TandemError)
    with pytest.raises(TandemError, match="unloaded"), runner.using():
        pass
    with pytest.raises(TandemError, match="unloaded"):
        runner.submit(waiting)
    runner.close()  # (idempotent)
