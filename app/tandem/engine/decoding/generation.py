"""One generation: prefill, then rounds (round.py) until a stop, as a stream of events.

The same loop runs the target alone and speculative decoding: without a scheduler every round
is a plain target step, so both modes share prefill, stopping, text handling and statistics.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Protocol

from ..config import GenerationConfig
from ..drafters import registry
from ..drafters.policy import CostModel
from ..errors import ContextOverflowError, TandemError
from ..events import Event, PrefillEvent, StartEvent, StopReason
from ..llama.model import GOVERNOR, LoadedModel
from ..llama.threads import release_team
from .answer import AnswerTracker
from .round import PLAIN, run_round
from .scheduler import Scheduler
from .speedup import SpeedupMeter, with_speedup


class _Clock(Protocol):
    decode_seconds: float


def generate(
    target: LoadedModel,
    draft: LoadedModel | None,
    prompt: Sequence[int],
    config: GenerationConfig,
    *,
    speculative: bool = True,
    cancel: threading.Event | None = None,
    costs: CostModel | None = None,
    lock: threading.Lock | None = None,
) -> Iterator[Event]:
    """Run one generation: speculative, or the target alone (speculative=False).

    config.drafter names one drafter kind (drafters/registry.py), or auto: every kind this pair
    offers (a draft model when one is given, the target's own heads when it has them, prompt
    lookup always), and the scheduler ranks them each round.
    `costs` carries the measured draft/verify costs of this pair from one generation to the
    next (adaptive drafting starts well informed); a fresh one is used if not given. `lock`:
    held while the generation runs; taken when it starts, refused if another one holds it.
    """
    draft, n_ctx = check_request(target, draft, prompt, config, speculative=speculative)
    rng = random.Random(config.sampler.seed)
    if not speculative:
        start = StartEvent("baseline", "", 0, False)
        return _drive(target, [target], prompt, config, start, None, n_ctx, rng, cancel, lock)
    # As run: auto with a single kind to draft with (prompt lookup, without a draft model or
    # heads) is that kind.
    offered = registry.available(target, draft, config.drafter)
    as_run = offered[0].name if config.drafter == registry.AUTO and len(offered) == 1 else config.drafter
    start = StartEvent("speculative", as_run, config.k_max, config.drafts_adaptively)
    scheduler = Scheduler(target, draft, config, rng, cancel, costs or CostModel())
    models = [target] if draft is None else [target, draft]
    return _drive(target, models, prompt, config, start, scheduler, n_ctx, rng, cancel, lock)


def check_request(
    target: LoadedModel,
    draft: LoadedModel | None,
    prompt: Sequence[int],
    config: GenerationConfig,
    *,
    speculative: bool,
) -> tuple[LoadedModel | None, int]:
    """What `generate` refuses, checked without touching either model: raises TandemError
    (ContextOverflowError for a prompt that does not fit). Returns the draft model the
    generation uses (None: none) and the context both share."""
    config.validate()
    registry.check_choice(config.drafter)
    if not prompt:
        raise TandemError("the prompt is empty")
    why = registry.missing(target, draft, config.drafter) if speculative else None
    if why is not None:
        raise TandemError(why)
    if not (speculative and registry.uses_draft_model(config.drafter)):
        draft = None
    n_ctx = min(m.n_ctx for m in (target, draft) if m is not None)
    if len(prompt) >= n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(prompt):,} tokens but the context holds {n_ctx:,}: shorten it "
            "or use a larger context (--ctx)"
        )
    return draft, n_ctx


def _drive(
    target: LoadedModel,
    models: list[LoadedModel],
    prompt: Sequence[int],
    config: GenerationConfig,
    start: StartEvent,
    scheduler: Scheduler | None,  # None: the target alone
    n_ctx: int,
    rng: random.Random,
    cancel: threading.Event | None,
    lock: threading.Lock | None,
) -> Iterator[Event]:
    # (The lock is taken here, not by a wrapping generator: every event would pass through
    # one more generator frame, and this loop runs once a token.)
    if lock is not None and not lock.acquire(blocking=False):
        raise TandemError("a generation is already running on this model pair")
    # Exact output (exact.py): the target's decodes that are read use the reference kernels.
    # Set under the lock: it is the target's state for this generation only.
    target.exact = config.exact is True
    try:
        yield start
        base = start.stats(len(prompt), target.device_label, target.exact)
        cancelled = cancel.is_set if cancel is not None else _never

        # Prefill: everything but the last prompt token, reusing whatever prefix is cached.
        t0 = time.perf_counter()
        head = list(prompt[:-1])
        reused = target.keep_prefix_of(head)
        # What follows the target's decodes (its MTP heads) takes their extra outputs only when
        # a drafter of this generation uses it (a plain run does not pay for them); it can go
        # on only from tokens it saw decoded, so the target re-reads whatever it decoded unseen.
        used = scheduler.listeners if scheduler is not None else []
        for listener in target.listeners:
            following = listener in used
            covered = listener.set_following(following)
            if following and covered < reused:
                target.truncate(covered, replay=False)
                reused = len(target.cached)
        target.decode(head[reused:], "none", should_stop=cancelled)
        if len(target.cached) == len(head):
            target.checkpoint("prompt")  # (a recurrent state: regenerating starts from here)
        ready = len(target.cached) >= len(head) and (scheduler is None or scheduler.begin(head, cancelled))
        prefilled = len(head) - reused + 1  # the last token is decoded in round one
        prefill_s = time.perf_counter() - t0
        base = replace(base, prefill_tokens=prefilled, prefill_s=prefill_s)
        yield PrefillEvent(len(prompt), prefilled, prefill_s)

        history = list(prompt)
        answer = AnswerTracker(target, config, history)
        tally = answer.tally
        sampler, max_tokens = config.sampler, config.max_tokens
        # Time inside llama.cpp: the models' decodes, and the listeners' (heads') when they draft.
        clocks: list[_Clock] = [*models, *used]
        llama0 = sum(c.decode_seconds for c in clocks)
        # The speedup against the target alone, timed during this generation (speedup.py), and
        # the thread count following the machine (threads.py): told of every target step.
        meter = SpeedupMeter()
        # Probes (plain rounds the meter asks for) only where K is the policy's to choose: a
        # fixed K drafts exactly K (`--no-adaptive`, a seeded run), its speedup only from the
        # plain rounds it has.
        probing = config.drafts_adaptively
        governor = GOVERNOR
        changes = changes0 = governor.changes
        t_start = t_mark = time.perf_counter()
        reason: StopReason | None = None if ready else "cancelled"  # (a cancelled prefill)
        while reason is None:
            if cancelled():
                reason = "cancelled"
                break
            room = n_ctx - len(history)  # positions left after the last token's
            if room < 0:
                reason = "context_full"
                break
            # K is clipped so a round never overshoots max tokens or the context.
            budget = min(max_tokens - answer.generated - 1, room)
            in_reasoning = answer.in_reasoning
            t_round = time.perf_counter() if in_reasoning else 0.0
            if scheduler is None:
                plan = PLAIN
            else:
                plan = scheduler.plan(history, budget, probe=probing and meter.probe_due())
            rnd = run_round(target, plan, history, sampler, rng, cancel)
            if rnd is None:
                reason = "cancelled"
                break
            if scheduler is not None:
                scheduler.observe(rnd)
            governor.observe(("target", rnd.drafted + 1), rnd.target_s)
            yield from answer.take(rnd, time.perf_counter() - t_round if in_reasoning else None)
            reason = answer.reason
            now = time.perf_counter()
            rnd.wall_s, t_mark = now - t_mark, now
            if scheduler is not None:
                if governor.changes != changes:
                    changes = governor.changes
                    meter.speed_changed()
                meter.add(rnd.drafted, rnd.emitted, rnd.wall_s, timed=tally.rounds > 1)
            yield rnd
        if answer.reason is None:
            answer.reason = reason
        yield from answer.finish()
        stats = answer.record(
            base,
            time.perf_counter() - t_start,
            llama_s=sum(c.decode_seconds for c in clocks) - llama0,
            threads=governor.level,
            threads_changed=governor.changes - changes0,
        )
        if scheduler is not None:
            stats = with_speedup(stats, meter)
        yield answer.done(stats)
    finally:
        target.exact = False
        if lock is not None:
            lock.release()
        # After the release: freeing the team waits for its workers to exit, and the next
        # request must not find the engine still taken (this thread's team: threads.release_team).
        release_team()


def _never() -> bool:
    return False
