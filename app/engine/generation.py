"""The generation loops: speculative (draft + target) and target-only, same events.

Invariants that keep the KV caches right (see docs/architecture.md):

* `history` is prompt + emitted tokens. At the start of every round the target's cache holds
  history[:-1]; the last token is fed in the next target batch.
* The draft's cache always holds a prefix of history; each round it first catches up on what
  it has not seen (usually just the last token; after a fully accepted round also the last
  draft token it never decoded) in one batch.

One speculative round:
  1. a drafter (the draft model, or prompt lookup: see drafters.py) proposes up to K tokens
     d1..dK (greedy, or sampled from q);
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
from typing import Literal

import numpy as np

from .draft_policy import REPRODUCIBLE_K, AdaptivePolicy, CostModel, FixedPolicy, model_pays
from .drafters import LookupDrafter, ModelDrafter, Proposal, pick
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

# Per round, how much the recent share of lookup-supplied tokens forgets (about 10 rounds).
_SHARE_DECAY = 0.9

Drafter = Literal["model", "lookup", "auto"]
DRAFTERS: tuple[Drafter, ...] = ("model", "lookup", "auto")


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
    # Who drafts: the draft model, prompt lookup (continue an n-gram found earlier in the
    # context; no model needed), or auto (each round, whichever promises more tokens per second).
    drafter: Drafter = "auto"
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    stop: tuple[str, ...] = ()

    def validate(self) -> None:
        if self.max_tokens < 1:
            raise TandemError("max tokens must be at least 1")
        if not 0 <= self.draft_max <= DRAFT_MAX_LIMIT:
            raise TandemError(f"draft max (K) must be between 0 and {DRAFT_MAX_LIMIT}")
        if not 0.0 <= self.p_min < 1.0:
            raise TandemError("p-min must be in [0, 1)")
        if self.drafter not in DRAFTERS:
            raise TandemError(f"drafter must be one of {', '.join(DRAFTERS)}")
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
    drafter: str = ""  # "model", "lookup", or "" for a plain target step
    caught_up: int = 0  # draft-model tokens decoded in the round's first batch
    looked_up: int = 0  # of the drafts, how many came from prompt lookup


StepFn = Callable[[list[int], int], _Round | None]


def generate(
    target: LoadedModel,
    draft: LoadedModel | None,
    prompt: Sequence[int],
    config: GenerationConfig,
    *,
    speculative: bool = True,
    cancel: threading.Event | None = None,
    costs: CostModel | None = None,
) -> Iterator[Event]:
    """Run one generation: speculative, or the target alone (speculative=False).

    The draft model is used when config.drafter is "model" or "auto" and one is given;
    "lookup" (and "auto" without a draft model) drafts from the context instead.
    `costs` carries the measured draft/verify costs of this pair from one generation to the
    next (adaptive drafting starts well informed); a fresh one is used if not given.
    """
    config.validate()
    if not prompt:
        raise TandemError("the prompt is empty")
    use_draft_model = speculative and config.drafter in ("model", "auto") and draft is not None
    if speculative and config.drafter == "model" and draft is None:
        raise TandemError("the model drafter needs a draft model: load one, or use prompt lookup")
    models = [target, draft] if use_draft_model and draft is not None else [target]
    n_ctx = min(m.n_ctx for m in models)
    if len(prompt) >= n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(prompt):,} tokens but the context holds {n_ctx:,}: shorten it "
            "or use a larger context (--ctx)"
        )
    rng = random.Random(config.sampler.seed)
    mode: Mode = "speculative" if speculative else "baseline"
    step: StepFn
    if not speculative:
        step = _BaselineStep(target, config, rng)
    else:
        step = _SpeculativeStep(
            target, draft if use_draft_model else None, config, rng, cancel, costs or CostModel()
        )
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
        drafter=config.drafter if mode == "speculative" else "",
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
    rounds = drafted = accepted = lookup_rounds = 0
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
        yield RoundEvent(
            rnd.drafted,
            rnd.accepted,
            emitted,
            rnd.draft_s,
            rnd.verify_s,
            rnd.k,
            rnd.drafter,
            rnd.caught_up,
            rnd.looked_up,
        )
        if rnd.drafter == "lookup":
            lookup_rounds += 1
        if reason is None and generated >= config.max_tokens:
            reason = "max_tokens"
    yield from stream.finish()
    stats = replace(
        stats,
        generated=generated,
        decode_s=time.perf_counter() - t_start,
        rounds=rounds,
        lookup_rounds=lookup_rounds,
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
        tok = pick(logits[0], self.sampler, self.rng)[0]
        return _Round([tok], [Origin.TARGET], 0, 0, 0.0, time.perf_counter() - t0)


class _SpeculativeStep:
    """One speculative round: choose a drafter and K, draft, verify in one batch, roll back."""

    def __init__(
        self,
        target: LoadedModel,
        draft: LoadedModel | None,
        config: GenerationConfig,
        rng: random.Random,
        cancel: threading.Event | None,
        costs: CostModel,
    ) -> None:
        self.target = target
        self.costs = costs
        self.sampler = config.sampler
        self.rng = rng
        self.cancel = cancel
        self.rounds_done = 0
        self.draft_max = config.draft_max
        # Recent share of the answer that prompt lookup supplied (decayed token counts): it
        # decides whether the draft model is worth keeping in step (see _model_pays).
        self.lookup_tokens = 0.0
        self.all_tokens = 0.0
        self.model = (
            ModelDrafter(draft, config.sampler, rng, config.p_min, costs, cancel)
            if draft is not None
            else None
        )
        self.lookup = LookupDrafter(target.n_vocab) if config.drafter in ("lookup", "auto") else None
        seeded_sampling = config.sampler.seed is not None and not config.sampler.greedy
        self.policies: dict[str, AdaptivePolicy | FixedPolicy] = {}
        for kind in ("model", "lookup"):
            if not config.adaptive:
                self.policies[kind] = FixedPolicy(config.draft_max)
            elif seeded_sampling:  # repeatable output needs a repeatable draft schedule
                self.policies[kind] = FixedPolicy(min(config.draft_max, REPRODUCIBLE_K))
            else:
                self.policies[kind] = AdaptivePolicy(config.draft_max, costs, kind)

    def _choose(self, history: list[int], budget: int) -> tuple[str, int, list[int], int]:
        """(drafter kind, K, lookup candidates, most lookup tokens to append) for this round."""
        candidates: list[int] = []
        if self.lookup is not None:
            t0 = time.perf_counter()
            candidates = self.lookup.candidates(history, min(budget, DRAFT_MAX_LIMIT))
            if self.rounds_done:
                self.costs.observe_lookup(time.perf_counter() - t0)
        options: list[tuple[float, str, int]] = []
        use_model = False
        if self.model is not None:
            # After plain or lookup rounds the model's next draft first catches up on them.
            behind = self.model.behind(history)
            owed = self.costs.catchup_time(behind - 2) if behind > 2 else 0.0
            k, rate = self.policies["model"].plan(budget, owed_s=owed)
            use_model = self._model_pays(rate)
            if use_model:
                options.append((rate, "model", k))
        lookup_k = 0
        if self.lookup is not None:
            # Tokens drafted by lookup must later be caught up on by the draft model.
            debt = self.costs.catchup_time(1.0) if use_model else 0.0
            if candidates:
                lookup_k, rate = self.policies["lookup"].plan(min(budget, len(candidates)), debt)
                options.append((rate, "lookup", lookup_k))
            elif use_model:  # the most a hybrid round's lookup tail may add
                lookup_k = self.policies["lookup"].plan(budget, debt)[0]
        if not options:
            return "lookup", 0, candidates, 0
        if all(rate == 0.0 for rate, _, _ in options):
            # Fixed K, or costs not measured yet: lookup when it has a match, else the model.
            kind = "lookup" if candidates else "model"
            k = next(k_ for _, kind_, k_ in options if kind_ == kind)
            return kind, k, candidates, lookup_k
        _, kind, k = max(options)
        return kind, k, candidates, lookup_k

    def _model_pays(self, model_rate: float) -> bool:
        """Whether to keep drafting with the model, given lookup's recent share of the answer
        (see draft_policy.model_pays). Without measured costs: yes."""
        plain = self.costs.verify_time(1)
        if self.lookup is None or model_rate <= 0.0 or self.all_tokens == 0.0 or plain is None:
            return True
        return model_pays(
            self.lookup_tokens / self.all_tokens, plain, 1.0 / model_rate, self.costs.catchup_time(1.0)
        )

    def __call__(self, history: list[int], budget: int) -> _Round | None:
        kind, k, candidates, lookup_k = self._choose(history, budget)
        t0 = time.perf_counter()
        if kind == "model" and self.model is not None:
            extend = None
            if self.lookup is not None and lookup_k:
                # Hybrid round (auto): the model drafts until prompt lookup can continue its
                # draft, then lookup's tokens finish it at no draft cost.
                lookup, draft_max = self.lookup, self.draft_max

                def extend(drafts: Sequence[int]) -> Proposal:
                    room = min(lookup_k, min(draft_max, budget) - len(drafts))
                    return lookup.proposal_from(lookup.continuation(history, drafts, room))

            proposal = self.model.propose(history, k, extend)
        else:
            assert self.lookup is not None
            proposal = self.lookup.proposal_from(candidates[:k])
        if self.cancel is not None and self.cancel.is_set():
            return None
        drafts = proposal.tokens
        t1 = time.perf_counter()
        logits = self.target.decode([history[-1], *drafts], "all")
        assert logits is not None
        n_acc, nxt = self._verify(logits, drafts, proposal.qs)
        n = len(history)
        # Roll back: keep last + accepted drafts in the target; the draft model keeps what it
        # decoded of them (it never decodes its own final proposal).
        self.target.truncate(n + n_acc)
        if kind == "model" and self.model is not None:
            self.model.rollback(n + n_acc)
        t2 = time.perf_counter()
        if self.rounds_done:  # a generation's first round runs cold (caches, graphs): skip it
            self.costs.observe_verify(len(drafts) + 1, t2 - t1)
        elif self.model is not None:
            self.model.learn_costs = True
        self.rounds_done += 1
        own = len(drafts) - proposal.looked_up  # the draft model's tokens (a lookup round: 0)
        if k:
            if kind == "model":
                self.policies["model"].observe(own, min(n_acc, own))
            if proposal.looked_up and n_acc >= own:
                self.policies["lookup"].observe(proposal.looked_up, n_acc - own)
        else:  # no evidence this round: let α relax, for the drafters this run has
            if self.model is not None:
                self.policies["model"].observe(0, 0)
            if self.lookup is not None:
                self.policies["lookup"].observe(0, 0)
        tokens = [*drafts[:n_acc], nxt]
        self.lookup_tokens = self.lookup_tokens * _SHARE_DECAY + max(0, n_acc - own)
        self.all_tokens = self.all_tokens * _SHARE_DECAY + len(tokens)
        origins = [Origin.DRAFT] * n_acc
        origins.append(Origin.BONUS if drafts and n_acc == len(drafts) else Origin.TARGET)
        return _Round(
            tokens,
            origins,
            len(drafts),
            n_acc,
            t1 - t0,
            t2 - t1,
            k,
            kind if drafts else "",
            proposal.caught_up,
            proposal.looked_up,
        )

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
