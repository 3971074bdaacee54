"""How many tokens to draft this round, and from which drafter.

Speculative decoding pays K draft steps plus one verification of K+1 tokens per round and
gets E(α, K) = (1 - α^(K+1)) / (1 - α) tokens on average (α: the chance the target accepts a
draft token). The best K therefore depends on α, which changes with the text (boilerplate code
is easy to guess, a translation is not), and on the costs, which depend on the machine: on a
GPU verifying 9 tokens costs about as much as 1, on a 2-core CPU nearly twice as much.

`AdaptivePolicy` measures all three as it goes and plans, each round,

    K* = argmax over K in 0..K_max of  E(α, K) / (T_draft(K) + T_verify(K + 1) + catch-up
                                                   + rollback(α, K))

where K = 0 means one plain target step. The rollback term is what undoing a rejection costs
beyond a truncate: on a recurrent target llama.cpp cannot roll back, a copy of its state before
every drafted batch, and after a rejection (probability 1 - α^K) its restore and the replay of
the kept tokens (a recurrent draft's restore too). On such targets short drafts may win, or
plain steps. The catch-up term: a draft model that sat out rounds
(plain steps, or prompt lookup) must first decode what it missed. Prompt lookup is charged for
the tokens it makes the model miss; the model's first draft after a pause is charged what the
pause owes, spread over the tokens the answer has left. α is an exponentially forgetting
estimate for the current generation; the costs live in a `CostModel` that the pair keeps
across generations (they describe the machine, not the text). Nothing here can change the
output: only how much is drafted per round, and by whom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class _Ema:
    """Exponential moving average that is exact for the first samples."""

    decay: float = 0.9
    value: float = 0.0
    weight: float = 0.0

    def add(self, x: float) -> None:
        self.weight = self.weight * self.decay + 1.0
        self.value += (x - self.value) / self.weight

    @property
    def known(self) -> bool:
        return self.weight > 0.0


# Relative cost of each extra verified token when only one batch size has been seen yet
# (typical of a CPU; a GPU's is far smaller and is learnt as soon as a second size is seen).
_PRIOR_VERIFY_SLOPE = 0.12
# Catching up on n tokens in one batch costs about this many extra draft steps per token on
# a CPU, until measured.
_PRIOR_CATCHUP_PER_TOKEN = 0.5


# Long-run acceptance before anything is measured: 4 of 5 draft tokens.
_PRIOR_ACCEPTED, _PRIOR_TRIALS = 4.0, 5.0
# Draft tokens after which a pair's long-run acceptance counts as known (DraftCosts.familiarity).
_FAMILIAR_TRIALS = 50.0


@dataclass
class DraftCosts:
    """Measured costs and long-run acceptance of one drafter."""

    first: _Ema = field(default_factory=_Ema)  # a round's first draft step (incl. catch-up)
    step: _Ema = field(default_factory=_Ema)  # each further step
    catchup_per_token: _Ema = field(default_factory=_Ema)  # extra seconds per token caught up
    accepted: float = _PRIOR_ACCEPTED  # long-run acceptance, starting from the prior
    trials: float = _PRIOR_TRIALS
    idle_rounds: int = 0  # rounds since this drafter last drafted
    # Its cost is one search whatever K (prompt lookup: observe_search), not a step per token.
    flat: bool = False
    # A drafter that guesses a whole block in one pass (DFlash: observe_block): seconds per
    # pass by the tokens it was asked for; its cost is a line through them (flat while one
    # size is known: on a GPU a block costs about the same whatever its length).
    blocks: dict[int, _Ema] = field(default_factory=dict)

    @property
    def alpha(self) -> float:
        return self.accepted / self.trials

    @property
    def familiarity(self) -> float:
        """0 while nothing is known of this pair (the prior alone, as in a process's first
        answer), rising to 1 once its long-run α rests on _FAMILIAR_TRIALS draft tokens."""
        return min(1.0, max(0.0, self.trials - _PRIOR_TRIALS) / _FAMILIAR_TRIALS)

    def idle(self) -> None:
        """A round in which this drafter could have drafted and did not: no evidence."""
        self.idle_rounds += 1


@dataclass
class CostModel:
    """Measured seconds per operation for one model pair on this machine."""

    verify: dict[int, _Ema] = field(default_factory=dict)  # target batch size -> seconds
    drafters: dict[str, DraftCosts] = field(default_factory=dict)
    # Undoing rejections (recurrent models; see rollback_time): the state copy a drafted round
    # takes before verifying, and the restore + replay a round with a rejection pays.
    checkpoint: _Ema = field(default_factory=_Ema)
    restore: _Ema = field(default_factory=_Ema)
    _fit: tuple[float, float, float] | None = field(default=None, repr=False)  # (x0, y0, slope)

    def of(self, kind: str) -> DraftCosts:
        return self.drafters.setdefault(kind, DraftCosts())

    # --- observations -------------------------------------------------------------------
    def observe_model_draft(
        self, behind: int, first_s: float, rest_s: float, rest_steps: int, kind: str
    ) -> None:
        """A round drafted by a model (a draft model, or the target's MTP heads): its first
        step, which caught up on `behind` tokens, and the steps after it."""
        d = self.of(kind)
        if rest_steps:
            d.step.add(rest_s / rest_steps)
        if behind <= 2:  # the usual round; a long catch-up is not a typical first step
            d.first.add(first_s)
        if behind >= 2 and d.step.known:
            d.catchup_per_token.add(max(0.0, first_s - d.step.value) / (behind - 1))

    def observe_search(self, kind: str, seconds: float) -> None:
        """A drafter whose cost is one search whatever K (prompt lookup) searched."""
        d = self.of(kind)
        d.flat = True
        d.first.add(seconds)

    def observe_block(self, kind: str, k: int, seconds: float) -> None:
        """A block drafter's pass for k tokens took `seconds` (its catch-up included)."""
        self.of(kind).blocks.setdefault(k, _Ema()).add(seconds)

    def observe_verify(self, n_tokens: int, seconds: float) -> None:
        self.verify.setdefault(n_tokens, _Ema()).add(seconds)
        self._fit = None

    def observe_rollback(self, checkpoint_s: float, restore_s: float, rejected: bool) -> None:
        """A drafted round's rollback costs (RoundEvent.checkpoint_s, restore_s)."""
        self.checkpoint.add(checkpoint_s)
        if rejected:
            self.restore.add(restore_s)

    def observe_acceptance(self, kind: str, accepted: int, trials: int) -> None:
        d = self.of(kind)
        d.accepted = d.accepted * 0.99 + accepted
        d.trials = d.trials * 0.99 + trials
        d.idle_rounds = 0

    # --- estimates ----------------------------------------------------------------------
    def draft_time(self, kind: str, k: int) -> float | None:
        if k == 0:
            return 0.0
        d = self.of(kind)
        if d.blocks:
            return _block_time(d.blocks, k)
        if not d.first.known:
            return None
        if d.flat:
            return d.first.value  # one search, whatever K
        step = d.step.value if d.step.known else d.first.value
        return d.first.value + (k - 1) * step

    def rollback_time(self, alpha: float, k: int) -> float:
        """Expected seconds a round drafting k tokens spends undoing rejections beyond a
        truncate: its checkpoint, and with probability 1 - α^k a restore and replay (0 until
        measured, and next to nothing for attention models)."""
        if k == 0:
            return 0.0
        checkpoint, restore = self.rollback_parts()
        return checkpoint + (1.0 - alpha**k) * restore

    def rollback_parts(self) -> tuple[float, float]:
        """(checkpoint, restore) seconds as measured (0 until then)."""
        return (
            self.checkpoint.value if self.checkpoint.known else 0.0,
            self.restore.value if self.restore.known else 0.0,
        )

    def catchup_time(self, tokens: float, kind: str) -> float:
        """Extra time a drafter that keeps in step (a draft model) takes to catch up on
        `tokens` it did not draft itself."""
        d = self.of(kind)
        if d.catchup_per_token.known:
            return tokens * d.catchup_per_token.value
        step = d.step.value if d.step.known else (d.first.value if d.first.known else 0.0)
        return tokens * step * _PRIOR_CATCHUP_PER_TOKEN

    def verify_time(self, n: int) -> float | None:
        """Seconds to verify n tokens.

        One token is its own case: a one-row decode runs llama.cpp's matrix-vector kernels, and
        a batch of two already costs 1.3-1.7 times as much (docs/results/history.md), so a line
        through the batch sizes puts a plain step 15-55% too high and makes drafting look that
        much better than it is. n = 1 is the measured plain step (see `plain_step_known`);
        larger batches come from a weighted least-squares line through every batch size of 2 or
        more. A line, not the per-size averages: one noisy sample must not make a size look so
        bad that it is never tried again, and a batch never gets cheaper with size."""
        if n <= 1 and self.plain_step_known:
            return self.verify[1].value
        if self._fit is None:
            self._fit = self._fit_verify()
            if self._fit is None:
                return None
        x0, y0, slope = self._fit
        return max(y0 + slope * (n - x0), 1e-6)

    @property
    def plain_step_known(self) -> bool:
        """Whether a plain target step (a batch of one) has been measured: what every draft
        length is compared with."""
        one = self.verify.get(1)
        return one is not None and one.known

    def _fit_verify(self) -> tuple[float, float, float] | None:
        seen = [(size, e.value, e.weight) for size, e in self.verify.items() if e.known and size >= 2]
        if not seen and self.plain_step_known:  # only plain steps so far: the prior slope from them
            one = self.verify[1]
            seen = [(1, one.value, one.weight)]
        if not seen:
            return None
        if len({size for size, _, _ in seen}) == 1:
            size, value, _ = seen[0]
            per_token = value * _PRIOR_VERIFY_SLOPE / (1 + _PRIOR_VERIFY_SLOPE * (size - 1))
            return float(size), value, per_token
        total = sum(w for _, _, w in seen)
        mx = sum(x * w for x, _, w in seen) / total
        my = sum(y * w for _, y, w in seen) / total
        sxx = sum(w * (x - mx) ** 2 for x, _, w in seen)
        sxy = sum(w * (x - mx) * (y - my) for x, y, w in seen)
        return mx, my, max(0.0, sxy / sxx)


# ------------------------------------------------------------------ kept between processes
# What a CostModel is written as (session/learnt.py keeps it per pair and machine): plain JSON
# values only, and read back only if every field is what this module writes.
def _ema_json(e: _Ema) -> list[float]:
    return [e.decay, e.value, e.weight]


def _ema_from(x: object) -> _Ema:
    if not isinstance(x, list) or len(x) != 3:
        raise ValueError(x)
    decay, value, weight = (_finite(v) for v in x)
    if not 0.0 < decay < 1.0:
        raise ValueError(x)
    return _Ema(decay, value, weight)


def _finite(x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
        raise ValueError(x)
    return float(x)


def _sizes(x: object) -> dict[int, _Ema]:
    if not isinstance(x, dict):
        raise ValueError(x)
    out = {int(k): _ema_from(v) for k, v in x.items()}
    if any(k < 1 or k > 4096 for k in out):
        raise ValueError(x)
    return out


def costs_to_json(c: CostModel) -> dict[str, object]:
    """`c` as JSON values (see costs_from_json)."""
    return {
        "verify": {str(n): _ema_json(e) for n, e in c.verify.items()},
        "checkpoint": _ema_json(c.checkpoint),
        "restore": _ema_json(c.restore),
        "drafters": {
            kind: {
                "first": _ema_json(d.first),
                "step": _ema_json(d.step),
                "catchup_per_token": _ema_json(d.catchup_per_token),
                "accepted": d.accepted,
                "trials": d.trials,
                "idle_rounds": d.idle_rounds,
                "flat": d.flat,
                "blocks": {str(n): _ema_json(e) for n, e in d.blocks.items()},
            }
            for kind, d in c.drafters.items()
        },
    }


def costs_from_json(x: object) -> CostModel | None:
    """What costs_to_json wrote, or None for anything else (a hand edit, another version, a
    hostile file): never an exception, never a NaN or a negative time in the model."""
    try:
        if not isinstance(x, dict) or not isinstance(x.get("drafters"), dict):
            return None
        drafters: dict[str, DraftCosts] = {}
        for kind, d in x["drafters"].items():
            if not isinstance(kind, str) or not isinstance(d, dict) or len(kind) > 64:
                return None
            accepted, trials = _finite(d["accepted"]), _finite(d["trials"])
            idle = d["idle_rounds"]
            if (
                trials <= 0
                or accepted > trials
                or not isinstance(idle, int)
                or isinstance(idle, bool)
                or idle < 0
            ):
                return None
            drafters[kind] = DraftCosts(
                first=_ema_from(d["first"]),
                step=_ema_from(d["step"]),
                catchup_per_token=_ema_from(d["catchup_per_token"]),
                accepted=accepted,
                trials=trials,
                idle_rounds=idle,
                flat=d["flat"] is True,
                blocks=_sizes(d["blocks"]),
            )
        return CostModel(
            verify=_sizes(x["verify"]),
            drafters=drafters,
            checkpoint=_ema_from(x["checkpoint"]),
            restore=_ema_from(x["restore"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def _block_time(blocks: dict[int, _Ema], k: int) -> float:
    """A block pass for k tokens: a weighted least-squares line through the sizes seen (never
    falling with size), or the one size's cost."""
    seen = [(size, e.value, e.weight) for size, e in blocks.items() if e.known]
    if len(seen) == 1:
        return seen[0][1]
    total = sum(w for _, _, w in seen)
    mx = sum(x * w for x, _, w in seen) / total
    my = sum(y * w for _, y, w in seen) / total
    sxx = sum(w * (x - mx) ** 2 for x, _, w in seen)
    slope = max(0.0, sum(w * (x - mx) * (y - my) for x, y, w in seen) / sxx)
    return max(my + slope * (k - mx), 1e-6)


def expected_tokens(alpha: float, k: int) -> float:
    """Mean tokens per round with K drafts, acceptance probability alpha per token."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def model_pays(lookup_share: float, plain_s: float, model_s_per_token: float, catchup_s: float) -> bool:
    """Whether the draft model earns its keep when prompt lookup supplies `lookup_share` of
    the text (the auto drafter).

    Every token lookup supplies must later be decoded by the draft model too (its catch-up
    batch), but only if the model drafts again. When most of the text is copied from the
    context that debt costs more than the model saves on the rest, and lookup alone (plain
    target steps where it has no match) is faster. Per token of answer, compare what the
    model saves on the tokens lookup does not supply with the catch-up it costs on those it
    does:  (1 - f) * (plain step - model's time per token)  vs  f * catch-up per token."""
    f = min(1.0, max(0.0, lookup_share))
    return (1.0 - f) * (plain_s - model_s_per_token) > f * catchup_s


class FixedPolicy:
    """Always draft K (clipped by the round's budget)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def plan(self, budget: int, debt_per_token: float = 0.0, owed_s: float = 0.0) -> tuple[int, float]:
        return min(self.k, budget), 0.0

    def observe(self, drafted: int, accepted: int) -> None:
        pass


class AdaptivePolicy:
    """Plan K each round to maximise expected tokens per second, for one drafter.

    α is estimated from this generation's rounds (forgetting old ones, since it follows the
    text), starting from the drafter's long-run acceptance on this pair. Two estimates plan:

    * the point estimate says what pays now;
    * the optimistic one (estimate + one standard error) is cheap insurance against a run of
      bad luck switching drafting off for good: where it chooses another K than the point
      estimate, the round *explores*, and its expected loss (under the point estimate, against
      the best K there) is charged to an exploration budget. Over budget, the point estimate
      decides. The budget is a share of the time spent so far plus a few plain steps: larger
      while the pair is new (5%, 7 steps: nothing is known yet, exploring is worth most; early
      rejections must not end drafting for an answer the draft then gets right), tight once
      its long-run α is measured (1%, 2 steps), so where drafting does not pay it costs at most
      about that much (replayed: docs/results/history.md, "Never slower").

    Rounds without drafting carry no evidence, so uncertainty grows while K = 0 until drafting
    is tried again (fast while the pair is new, slowly once its long-run α is measured:
    `_idle_forget`); across generations too, since the next generation's prior weighs the
    long-run α less the longer nothing was drafted (a short answer may end before the pause
    does). The memory follows familiarity as well: the last ~14 rounds count for a new pair
    (early rejections must not hold drafting off for the answer), the last ~50 for a known one
    (a steadier α drafts the best K more often).
    """

    # Per round, the evidence kept: a new pair's (about the last 14 rounds count) and a known
    # pair's (about 50).
    _FORGET_NEW = 0.93
    _FORGET_KNOWN = 0.98
    # A round without drafting keeps this much of the evidence once the pair is known
    # (see _idle_forget).
    _FORGET_IDLE_KNOWN = 0.99
    _PRIOR_STRENGTH = 8.0  # the long-run α is worth this many draft tokens ...
    # ... times this per round since the drafter last drafted (down to half a token).
    _IDLE_FADE = 0.97
    # The exploration budget: (share of the time so far, plain steps) for a known pair, and what
    # a new pair adds (see the class docstring).
    _EXPLORE_KNOWN = (0.01, 2.0)
    _EXPLORE_NEW = (0.04, 5.0)

    def __init__(self, k_max: int, costs: CostModel, kind: str, k_start: int = 4) -> None:
        self.k_max = k_max
        self.costs = costs
        self.kind = kind
        self.k_start = min(k_start, k_max)
        # Start from the long-run α, held less firmly the longer ago the drafter last
        # drafted: after answers without drafting the optimistic α is high again and drafting
        # is retried, so a bad start (early rejections in a short answer, then a pause that
        # never paid to end) cannot switch drafting off for the session. Only this prior
        # fades; the long-run α itself keeps its weight, so one unlucky round cannot move it.
        long_run = costs.of(kind)
        self._trials = max(0.5, self._PRIOR_STRENGTH * self._IDLE_FADE**long_run.idle_rounds)
        self._accepted = long_run.alpha * self._trials
        # Seconds the rounds cost (as planned), what exploring cost of them, and the last plan:
        # its cost per K and its exploration's loss (charged if the round runs it).
        self._spent = 0.0
        self._explored = 0.0
        self._costs: list[float] = []
        self._exploring: tuple[int, float] | None = None  # (K, expected loss)

    @property
    def alpha(self) -> float:
        return self._accepted / self._trials

    def optimistic_alpha(self) -> float:
        a = self.alpha
        return min(1.0, a + math.sqrt(a * (1.0 - a) / self._trials))

    def plan(self, budget: int, debt_per_token: float = 0.0, owed_s: float = 0.0) -> tuple[int, float]:
        """(K, expected tokens per second) for this round; rate 0.0 while costs are unknown.

        `debt_per_token` (prompt lookup, while a draft model is in use): what each drafted
        token will cost the draft model later, when it catches up on it. `owed_s` (the draft
        model): the extra catch-up it already owes, for tokens it skipped (plain or lookup
        rounds) beyond a usual round's one or two; its next draft pays it."""
        k_cap = min(self.k_max, budget)
        self._exploring = None
        self._costs = []
        if not self.costs.plain_step_known and self.costs.verify_time(2) is not None:
            # Drafting is measured but a plain step is not: take one, to know what drafting
            # must beat (once per pair; see CostModel.verify_time).
            return 0, 0.0
        costs = self._costs_by_k(k_cap)
        if costs is None:
            return min(self.k_start, k_cap), 0.0  # not measured yet: use the starting K
        point = self._table(costs, self.alpha, debt_per_token, owed_s, budget + 1)
        hope = self._table(costs, self.optimistic_alpha(), debt_per_token, owed_s, budget + 1)
        k_point, k = _best(point), _best(hope)
        if k != k_point:  # exploring: within the budget, else what pays now
            e, cost = point[k]
            loss = max(0.0, cost - e * point[k_point][1] / point[k_point][0])
            share, steps = self._budget()
            if self._explored + loss <= share * self._spent + steps * point[0][1]:
                self._exploring = (k, loss)
            else:
                k = k_point
        self._costs = [cost for _, cost in point]
        return k, hope[k][0] / hope[k][1]

    def _costs_by_k(self, k_cap: int) -> list[float] | None:
        """Drafting K and verifying K + 1 tokens, in seconds, for K in 0..k_cap; None while a
        cost is unmeasured. (Asked once a round: both estimates of α price with it.)"""
        out = []
        for k in range(k_cap + 1):
            draft, verify = self.costs.draft_time(self.kind, k), self.costs.verify_time(k + 1)
            if draft is None or verify is None:
                return None
            out.append(draft + verify)
        return out

    def _table(
        self, costs: list[float], alpha: float, debt_per_token: float, owed_s: float, horizon: int
    ) -> list[tuple[float, float]]:
        """(expected tokens, seconds) of a round drafting K, for each K priced in `costs`."""
        checkpoint, restore = self.costs.rollback_parts()
        out = []
        e, power = 0.0, 1.0  # E(α, K) = 1 + α + ... + α^K, and α^K
        for k, cost in enumerate(costs):
            e += power
            if k:
                cost += checkpoint + (1.0 - power) * restore  # (rollback_time, α^k = power)
                if debt_per_token:
                    cost += e * debt_per_token
                if owed_s:
                    # Drafting again pays what is owed once, and every later round then drafts
                    # at the usual cost: spread the payment over the tokens still to come (all
                    # of it when the answer is nearly done). Charging it all to this round
                    # instead makes a long pause ever costlier to end: drafting never resumes.
                    cost += owed_s * min(1.0, e / horizon)
            out.append((e, cost))
            power *= alpha
        return out

    def _budget(self) -> tuple[float, float]:
        new = 1.0 - self.costs.of(self.kind).familiarity
        (share, steps), (more_share, more_steps) = self._EXPLORE_KNOWN, self._EXPLORE_NEW
        return share + more_share * new, steps + more_steps * new

    def observe(self, drafted: int, accepted: int) -> None:
        """One round's outcome: `accepted` of `drafted` tokens before the first rejection."""
        if self._costs:
            self._spent += self._costs[min(drafted, len(self._costs) - 1)]
        if drafted and self._exploring is not None and self._exploring[0] == drafted:
            self._explored += self._exploring[1]
        self._exploring = None
        trials = accepted + (1 if accepted < drafted else 0)
        forget = self._forget() if drafted else self._idle_forget()
        self._accepted = self._accepted * forget + accepted
        self._trials = self._trials * forget + trials
        if trials:
            self.costs.observe_acceptance(self.kind, accepted, trials)
        elif not drafted:
            self.costs.of(self.kind).idle()

    def _forget(self) -> float:
        known = self.costs.of(self.kind).familiarity
        return self._FORGET_NEW + (self._FORGET_KNOWN - self._FORGET_NEW) * known

    def _idle_forget(self) -> float:
        """How much of the evidence a round without drafting keeps.

        A pause carries no evidence, so the doubt about α grows until drafting is retried; how
        fast is the choice between two mistakes. In a process's first answer, with nothing
        known of the pair, a few early rejections must not end drafting for the answer: doubt
        grows at the drafting rate. A pair whose long-run α is measured and low (a draft that
        is often wrong) would then retry every dozen rounds, each retry paying for the draft
        model's catch-up on the pause, and run 11-18% slower than the target alone on a CPU
        (replayed: docs/results/history.md); there doubt grows at 1% a round."""
        known = self.costs.of(self.kind).familiarity
        return self._FORGET_NEW + (self._FORGET_IDLE_KNOWN - self._FORGET_NEW) * known


def _best(table: list[tuple[float, float]]) -> int:
    """The K of the highest expected rate (the shortest among equals)."""
    return max(range(len(table)), key=lambda k: (table[k][0] / table[k][1], -k))
