"""The generation loops: speculative (draft + target) and target-only, same events.

Invariants that keep the KV caches right (see docs/architecture.md):

* `history` is prompt + emitted tokens. At the start of every round the target's cache holds
  history[:-1]; the last token is fed in the next target batch.
* The draft's cache always holds a prefix of history; each round it first catches up on what
  it has not seen (usually just the last token; after a fully accepted round also the last
  draft token it never decoded) in one batch.

One speculative round:
  1. the draft proposes up to K tokens d1..dK (greedy, or sampled from q);
  2. the target decodes [last, d1..dK] in ONE batch, logits for all K+1 rows;
  3. accept the longest agreeing prefix (greedy: d_i == argmax p_i; sampling: rejection
     sampling), then take one target token: a correction, or the bonus after all K;
  4. drop the rejected positions from both caches (llama_memory_seq_rm).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .draft_policy import REPRODUCIBLE_K, AdaptivePolicy, CostModel, FixedPolicy
from .errors import ContextOverflowError, TandemError
from .events import (
    DoneEvent,
    Event,
    GenerationStats,
    Mode,
    Origin,
    PrefillEvent,
    RoundEvent,
    StopReason,
)
from .model import LoadedModel
from .sampling import Dist, SamplerSettings, accept_draft, distribution, residual
from .text_stream import TokenStream

# The largest verification batch; LoadOptions.max_outputs must be at least DRAFT_MAX_LIMIT + 1.
DRAFT_MAX_LIMIT = 32


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 256
    draft_max: int = 12  # K: most tokens the draft proposes per round
    # Choose K per round (0..draft_max) from measured acceptance and costs; off: always K.
    adaptive: bool = True
    # Stop a draft run early when the draft's own top probability falls below this: such
    # guesses are usually rejected, and each costs a draft step. Depends on the draft alone,
    # so it never changes the output.
    p_min: float = 0.0
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    stop: tuple[str, ...] = ()

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise TandemError("max tokens must be at least 1")
        if not 0 <= self.draft_max <= DRAFT_MAX_LIMIT:
            raise TandemError(f"draft max (K) must be between 0 and {DRAFT_MAX_LIMIT}")
        if not 0.0 <= self.p_min < 1.0:
            raise TandemError("p-min must be in [0, 1)")
        try:
            self.sampler.validate()
        except ValueError as exc:
            raise TandemError(str(exc)) from exc


@dataclass
class _Round:
    tokens: list[int]
    origins: list[Origin]
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    k: int = 0  # the draft length chosen for this round


StepFn = Callable[[list[int], int], _Round | None]


def generate(
    target: LoadedModel,
    draft: LoadedModel | None,
    prompt: Sequence[int],
    config: GenerationConfig,
    *,
    cancel: threading.Event | None = None,
    costs: CostModel | None = None,
) -> Iterator[Event]:
    """Run one generation. With `draft=None` the target decodes alone.

    `costs` carries the measured draft/verify costs of this pair from one generation to the
    next (adaptive drafting starts well informed); a fresh one is used if not given.
    """
    config.validate()
    if not prompt:
        raise TandemError("the prompt is empty")
    models = [target] if draft is None else [target, draft]
    n_ctx = min(m.n_ctx for m in models)
    if len(prompt) >= n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(prompt):,} tokens but the context holds {n_ctx:,}: shorten it "
            "or use a larger context (--ctx)"
        )
    rng = random.Random(config.sampler.seed)
    mode: Mode = "baseline" if draft is None else "speculative"
    step: StepFn
    if draft is None:
        step = _BaselineStep(target, config, rng)
    else:
        step = _SpeculativeStep(target, draft, config, rng, cancel, costs or CostModel())
    return _drive(models, prompt, config, mode, step, n_ctx, cancel)


def _drive(
    models: list[LoadedModel],
    prompt: Sequence[int],
    config: GenerationConfig,
    mode: Mode,
    step: StepFn,
    n_ctx: int,
    cancel: threading.Event | None,
) -> Iterator[Event]:
    target = models[0]
    stats = GenerationStats(
        mode=mode,
        draft_max=config.draft_max if mode == "speculative" else 0,
        adaptive=config.adaptive and mode == "speculative",
        prompt_tokens=len(prompt),
    )
    stream = TokenStream(target.piece, config.stop)
    cancelled = cancel.is_set if cancel is not None else (lambda: False)

    # Prefill: everything but the last prompt token, reusing whatever prefix is cached.
    t0 = time.perf_counter()
    head = list(prompt[:-1])
    prefilled = 0
    for i, m in enumerate(models):
        reused = m.keep_prefix_of(head)
        m.decode(head[reused:], "none", should_stop=cancelled)
        if i == 0:
            prefilled = len(head) - reused + 1  # the last token is decoded in round one
    prefill_s = time.perf_counter() - t0
    stats = replace(stats, prefill_tokens=prefilled, prefill_s=prefill_s)
    yield PrefillEvent(len(prompt), prefilled, prefill_s)

    history = list(prompt)
    generated = 0
    rounds = drafted = accepted = 0
    draft_s = verify_s = 0.0
    llama0 = sum(m.decode_seconds for m in models)
    t_start = time.perf_counter()
    reason: StopReason | None = None
    while reason is None:
        if cancelled() or any(len(m.cached) < len(head) for m in models):
            reason = "cancelled"  # (a cancelled prefill leaves a short cache)
            break
        remaining = config.max_tokens - generated
        room = n_ctx - len(history)  # positions left after the last token's
        if room < 0:
            reason = "context_full"
            break
        # K is clipped so a round never overshoots max tokens or the context.
        budget = max(0, min(remaining - 1, room))
        rnd = step(history, budget)
        if rnd is None:
            reason = "cancelled"
            break
        rounds += 1
        drafted += rnd.drafted
        accepted += rnd.accepted
        draft_s += rnd.draft_s
        verify_s += rnd.verify_s
        emitted = 0
        for tok, origin in zip(rnd.tokens, rnd.origins, strict=True):
            history.append(tok)
            if target.is_eog(tok):
                reason = "eog"
                break
            generated += 1
            emitted += 1
            yield from stream.add(tok, origin)
            if stream.stopped:
                reason = "stop_string"
                break
        yield RoundEvent(rnd.drafted, rnd.accepted, emitted, rnd.draft_s, rnd.verify_s, rnd.k)
        if reason is None and generated >= config.max_tokens:
            reason = "max_tokens"
    yield from stream.finish()
    stats = replace(
        stats,
        generated=generated,
        decode_s=time.perf_counter() - t_start,
        rounds=rounds,
        drafted=drafted,
        accepted=accepted,
        draft_s=draft_s,
        verify_s=verify_s,
        llama_s=sum(m.decode_seconds for m in models) - llama0,
        stop_reason=reason,
    )
    yield DoneEvent(stats, stream.text)


class _BaselineStep:
    """Target alone: one token per forward pass."""

    def __init__(self, target: LoadedModel, config: GenerationConfig, rng: random.Random) -> None:
        self.target = target
        self.sampler = config.sampler
        self.rng = rng

    def __call__(self, history: list[int], budget: int) -> _Round:
        t0 = time.perf_counter()
        logits = self.target.decode(history[-1:], "last")
        assert logits is not None
        tok = _pick(logits[0], self.sampler, self.rng)[0]
        return _Round([tok], [Origin.TARGET], 0, 0, 0.0, time.perf_counter() - t0)


class _SpeculativeStep:
    def __init__(
        self,
        target: LoadedModel,
        draft: LoadedModel,
        config: GenerationConfig,
        rng: random.Random,
        cancel: threading.Event | None,
        costs: CostModel,
    ) -> None:
        self.target = target
        self.draft = draft
        self.costs = costs
        self.rounds_done = 0
        self.policy: AdaptivePolicy | FixedPolicy
        seeded_sampling = config.sampler.seed is not None and not config.sampler.greedy
        if not config.adaptive:
            self.policy = FixedPolicy(config.draft_max)
        elif seeded_sampling:  # repeatable output needs a repeatable draft schedule
            self.policy = FixedPolicy(min(config.draft_max, REPRODUCIBLE_K))
        else:
            self.policy = AdaptivePolicy(config.draft_max, costs)
        self.p_min = config.p_min
        self.sampler = config.sampler
        self.rng = rng
        self.cancel = cancel

    def __call__(self, history: list[int], budget: int) -> _Round | None:
        k = self.policy.choose(budget)
        t0 = time.perf_counter()
        drafts, qs = self._propose(history, k)
        if self.cancel is not None and self.cancel.is_set():
            return None
        t1 = time.perf_counter()
        logits = self.target.decode([history[-1], *drafts], "all")
        assert logits is not None
        n_acc, nxt = self._verify(logits, drafts, qs)
        n = len(history)
        # Roll back: keep last + accepted drafts in the target; keep in the draft what it
        # decoded of them (it never decodes its own final proposal).
        self.target.truncate(n + n_acc)
        self.draft.truncate(min(len(self.draft.cached), n + n_acc))
        t2 = time.perf_counter()
        if self.rounds_done:  # a generation's first round runs cold (caches, graphs): skip it
            self.costs.observe_verify(len(drafts) + 1, t2 - t1)
        self.rounds_done += 1
        self.policy.observe(len(drafts), n_acc)
        tokens = [*drafts[:n_acc], nxt]
        origins = [Origin.DRAFT] * n_acc
        origins.append(Origin.BONUS if drafts and n_acc == len(drafts) else Origin.TARGET)
        return _Round(tokens, origins, len(drafts), n_acc, t1 - t0, t2 - t1, k)

    def _propose(self, history: list[int], k: int) -> tuple[list[int], list[Dist | None]]:
        drafts: list[int] = []
        qs: list[Dist | None] = []
        if k <= 0:
            return drafts, qs
        draft = self.draft
        # Catch up in one batch on everything the draft has not seen yet: normally the last
        # token, plus the final draft token after a fully accepted round.
        behind = len(history) - len(draft.cached)
        t0 = time.perf_counter()
        logits = draft.decode(history[len(draft.cached) :], "last")
        t_first = time.perf_counter() - t0
        steps = 0
        for j in range(k):
            assert logits is not None
            row = logits[0]
            if self.p_min > 0.0 and _top_prob(row, self.sampler) < self.p_min:
                break
            tok, q = _pick(row, self.sampler, self.rng)
            drafts.append(tok)
            qs.append(q)
            if j == k - 1 or draft.is_eog(tok):
                break
            if self.cancel is not None and self.cancel.is_set():
                break
            logits = draft.decode([tok], "last")
            steps += 1
        # A long catch-up (after rounds without drafting) or a cold first round is not a
        # typical cost.
        if behind <= 2 and self.rounds_done:
            self.costs.observe_draft(t_first, time.perf_counter() - t0 - t_first, steps)
        return drafts, qs

    def _verify(self, logits: np.ndarray, drafts: list[int], qs: list[Dist | None]) -> tuple[int, int]:
        """Return (number of accepted drafts, the target's next token)."""
        k = len(drafts)
        if self.sampler.greedy:
            best = logits.argmax(axis=1)
            mismatch = np.flatnonzero(best[:k] != np.asarray(drafts, dtype=best.dtype))
            n_acc = int(mismatch[0]) if mismatch.size else k
            return n_acc, int(best[n_acc])
        for j in range(k):
            p = distribution(logits[j], self.sampler)
            q = qs[j]
            assert q is not None
            if not accept_draft(p, q, drafts[j], self.rng):
                return j, residual(p, q).sample(self.rng)
        return k, distribution(logits[k], self.sampler).sample(self.rng)


def _top_prob(logits: np.ndarray, s: SamplerSettings) -> float:
    """The draft's confidence in its best token (plain softmax; after the sampler's
    truncation and temperature when sampling)."""
    if s.greedy:
        m = logits.max()
        return float(1.0 / np.exp(logits - m).sum())
    return distribution(logits, s).max_prob()


def _pick(logits: np.ndarray, s: SamplerSettings, rng: random.Random) -> tuple[int, Dist | None]:
    if s.greedy:
        return int(np.argmax(logits)), None
    q = distribution(logits, s)
    return q.sample(rng), q
