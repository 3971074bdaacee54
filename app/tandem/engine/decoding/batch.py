"""Parallel sequences: several answers advanced together, one verify batch a round.

`tandem serve --parallel N` loads each model with N sequences (sequences.py) and runs one
`BatchEngine` loop in a thread of its own. Requests join and leave between rounds (continuous
batching). A round:

    1. admit   a new request takes a free sequence, the one whose cache shares the longest
               prefix with its prompt (the rest of the cache is dropped);
    2. choose  K per decoding sequence from the costs learnt as functions of the whole batch
               (batch_costs.py): with enough sequences drafting stops paying, and K is 0;
    3. draft   each kind's proposer for the sequences it drafts for this round, at once (the
               draft model in ONE batch per draft step, its catch-up in the first; a draft may
               be finished by a free kind that continues it: prompt lookup after a model step);
    4. verify  every decoding sequence's [last, d1..dK], and a bounded share of the prompts
               still being read, in ONE llama_decode;
    5. accept  per sequence with its own sampler settings and random stream (round.py's rules),
               roll back each sequence's caches to what its target kept.

Each sequence's events are those of a single generation (StartEvent, PrefillEvent, tokens and
a RoundEvent a round, DoneEvent), told to its `emit`. The engine names no kind: it drafts with
the proposers of the kinds that serve several sequences (drafters/batched.py), and its
scheduler (batch_costs.py) picks one per sequence and round, by what each offers; a request for
a kind that does not (its spec says why) is refused with that reason.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np
import numpy.typing as npt

from ..config import GenerationConfig
from ..drafters import registry
from ..drafters.batched import BatchOffer, BatchProposer, BatchSetup, Lane
from ..errors import TandemError
from ..events import GenerationStats, PrefillEvent, RoundEvent, StartEvent, StopReason
from ..llama import exact
from ..llama.exact import ExactPlan
from ..llama.model import GOVERNOR, LoadedModel
from ..llama.sequences import Piece, SeqContext
from ..llama.threads import release_team
from ..sampling import NonFiniteLogits
from .answer import AnswerTracker
from .batch_costs import DRAFT, VERIFY, BatchCosts, Bid, Want, pick
from .inbox import Inbox, SeqRequest
from .round import accept_greedy, accept_sampled
from .speedup import SpeedupMeter, with_speedup

# Prompts are read while other sequences decode: one with at most WHOLE_PROMPT tokens to read
# is read whole in a round (a chat's new turn: in pieces, each round would pay for them again),
# and longer ones in a bounded share, a round of the answers being decoded taking at most
# PREFILL_SLOWDOWN times its time without them (by the costs measured: batch_costs.py), so
# that those answers keep half the machine and the prompts get the rest (a token a round at
# the least). (128 tokens of every prompt a round made a short answer beside a 3,760-token
# prompt 23x slower, beside three of them 30x: the Qwen2.5-Coder pair, one thread.)
WHOLE_PROMPT = 128
PREFILL_SLOWDOWN = 2.0
# Rounds of events a client may leave unread before its sequence waits (its buffer is bounded;
# the others go on).
MAX_UNREAD = 64
# (Acceptance per draft before a sequence has drafted: each proposer's prior, then an average
# over its rounds.)
ALPHA_KEEP = 0.9  # the weight an acceptance estimate keeps per round drafted


@dataclass
class _Seq:
    """A request being answered in sequence `seq`."""

    req: SeqRequest
    seq: int
    history: list[int]
    answer: AnswerTracker
    rng: random.Random
    base: GenerationStats
    kind: str  # the drafter choice as run ("" none)
    proposers: list[BatchProposer]  # those of its choice
    continuer: BatchProposer | None  # the free one of them that may finish another's draft
    prefill_at: int  # prompt tokens in the target's cache (the last one is decoded in round one)
    reused: int
    t_admitted: float
    t_start: float = 0.0
    llama_s: float = 0.0
    # The speedup against the target alone, timed in this answer's rounds that decoded nothing
    # else (speedup.py: as for a single generation; beside others, no round is the target's
    # alone, and none is timed). t_mark: when its last round ended.
    meter: SpeedupMeter = field(default_factory=SpeedupMeter)
    t_mark: float = 0.0
    alpha: dict[str, float] = field(default_factory=dict)
    # This round's plan and drafts: the proposer chosen and its lane (None: no drafts).
    proposer: BatchProposer | None = None
    lane: Lane | None = None

    @property
    def short(self) -> bool:
        """Whether its prompt's new part is read whole in a round (WHOLE_PROMPT)."""
        return len(self.req.prompt) - 1 - self.reused <= WHOLE_PROMPT

    @property
    def decoding(self) -> bool:
        return self.prefill_at >= len(self.req.prompt) - 1

    def no_drafts(self) -> None:
        """This round's plan: nothing drafted (until _plan gives it K)."""
        self.proposer, self.lane = None, None

    @property
    def drafts(self) -> list[int]:
        return self.lane.drafts if self.lane is not None else []


class BatchEngine:
    """N sequences of one pair; `submit` from any thread, `run` in the engine's thread."""

    def __init__(
        self, target: LoadedModel, draft: LoadedModel | None, costs: BatchCosts | None = None
    ) -> None:
        """`costs`: what an earlier engine of this pair learnt on this machine (session/learnt.py),
        the tables it calibrated not timed again; None: all timed at start."""
        self.target = target
        self.draft = draft
        self.t_ctx = SeqContext(target)
        self.n_seq = self.t_ctx.n_seq
        self.costs = costs if costs is not None else BatchCosts()
        self.proposers = registry.batch_proposers(
            BatchSetup(target, draft, self.t_ctx, self.costs.record_for)
        )
        # Acceptance per draft by kind, over every sequence's rounds: where a new one starts.
        self.alpha = {p.kind: p.alpha_prior for p in self.proposers}
        self._inbox: Inbox[SeqRequest] = Inbox()
        self._active: dict[int, _Seq] = {}
        self._free = list(range(self.n_seq))
        self._groups: list[str | None] = [None] * self.n_seq  # whose tokens each cache holds
        self._admitted = [0] * self.n_seq  # when each sequence last took a request (a count)
        self._reread: list[Piece] = []  # this round's tokens to decode again (see _accept)
        self._alone = False  # this round decodes one answer's rows and nothing else (its meter)
        self._changes = GOVERNOR.changes  # (the thread count followed the machine: meters told)
        # Set once the loop takes requests (after calibrate): a server says it is ready then.
        self.ready = threading.Event()

    @staticmethod
    def left_out(target: LoadedModel, draft: LoadedModel | None) -> list[str]:
        """The kinds this pair drafts with that a parallel sequence does not, with the reason."""
        return registry.not_batched(target, draft)

    @property
    def kinds(self) -> list[str]:
        """The kinds its sequences draft with."""
        return [p.kind for p in self.proposers]

    # ------------------------------------------------------------------ requests
    def check(self, config: GenerationConfig, speculative: bool) -> GenerationConfig:
        """`config` as a parallel sequence runs it, or TandemError for what it cannot."""
        why = registry.batch_refusal(config.drafter, self.kinds, self.target, self.draft)
        if speculative and why is not None:
            raise TandemError(why)
        plan = self.target.exact_plan
        if plan.possible and self.n_seq > 1:
            # Even with kernels that do not depend on the batch (exact.py), a sequence's attention
            # does: llama.cpp's shared KV cache places its next tokens in the first free cells,
            # and after a neighbour's rollback those lie before its own, and the attention sums
            # a sequence's cells in cell order, not position order (0.04-0.08 logit on SmolLM2
            # Q4_1: near-ties flipped in 9 of 34 answers beside three sampling neighbours).
            plan = ExactPlan(
                why_not="parallel sequences share one KV cache, where a sequence's tokens are not "
                "kept in position order (start tandem serve with --parallel 1 for exact answers)"
            )
        return exact.resolve(config, plan, "with parallel sequences")

    def submit(self, req: SeqRequest) -> None:
        self._inbox.put(req)

    def withdraw(self, req: SeqRequest) -> bool:
        """Take a request that has not been admitted out of the inbox; False once it has."""
        return self._inbox.withdraw(req)

    def stop(self) -> None:
        self._inbox.stop()

    @property
    def active(self) -> int:
        return len(self._active)

    def close(self) -> None:
        self.t_ctx.close()
        for p in self.proposers:
            p.close()

    # ------------------------------------------------------------------ the loop
    def calibrate(self) -> None:
        """Time each model's decodes at the sizes rounds use (verifies of 1 to 48 rows, one row
        per sequence and the rest on the first, as a round with drafts has them; each proposer
        its own: the draft model's steps and catch-ups of 1 to 64 tokens) so that the first
        rounds are planned on this machine's costs, not on priors: a draft model's catch-up of
        a prompt can cost more than the answer's first tokens (SmolLM2 Q4_1 on a 2-core CPU:
        2 ms a token), and a kernel's step up can make one more row cost 5 ms. Runs in the free
        sequences, left empty; stops early when the engine is stopped (a Ctrl+C while it
        measures: the Qwen2.5-Coder pair's take 17 s on a 2-core CPU). A table an earlier engine
        calibrated (`costs.calibrated`, kept between processes) is not timed again: a server
        restarted on the same pair and machine is ready at once."""
        seqs = list(self._free)
        costs = self.costs

        def stopped() -> bool:
            return self._inbox.stopped

        if VERIFY not in costs.calibrated:
            # A verify: one row in each of the sequences, the rest on the first.
            sizes = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48)
            self.t_ctx.time_decodes(seqs, sizes, "all", costs.verify.add, stopped)
            if not stopped():
                costs.calibrated.add(VERIFY)
        for p in self.proposers:
            name = p.table or DRAFT
            if p.free or name in costs.calibrated:  # (a free kind times nothing)
                continue
            p.calibrate(seqs, stopped)
            if not stopped():
                costs.calibrated.add(name)

    def run(self) -> None:
        """Rounds until stopped; cancelled and waiting requests are ended when it stops."""
        try:
            with contextlib.suppress(Exception):  # (a failure here leaves the priors: no harm)
                self.calibrate()
        finally:
            self.ready.set()
        while True:
            inbox = self._inbox
            if not inbox.stopped and not inbox.items and not self._active:
                # Idle: this thread's OpenMP workers go (threads.release_team); outside the
                # lock, since their exit is waited for and a submitter takes that lock.
                release_team()
            with inbox.wake:
                while not inbox.stopped and not inbox.items and not self._active:
                    inbox.wake.wait()
                if inbox.stopped:
                    break
                while inbox.items and self._free:
                    self._admit(inbox.items.popleft())
            try:
                if not self.step():
                    with self._inbox.wake:  # every sequence waits for its reader
                        self._inbox.wake.wait(0.005)
            except BaseException as exc:  # every sequence of the failed batch is told
                for s in list(self._active.values()):
                    self._release(s)
                    s.req.fail(exc)
                if not isinstance(exc, Exception):
                    raise
        for s in list(self._active.values()):
            s.req.cancel.set()
        with contextlib.suppress(Exception):
            self.step()  # ends the cancelled ones with their DoneEvent
        for req in self._inbox.drain():
            req.fail(TandemError("the server is shutting down"))

    def _admit(self, req: SeqRequest) -> None:
        prompt = list(req.prompt)
        head = prompt[:-1]
        group = req.cache_group

        def reusable(seq: int, ctx: SeqContext, tokens: list[int]) -> int:
            same = group is not None and self._groups[seq] == group
            return ctx.common_prefix(seq, tokens) if same else 0

        # The free sequence whose cache shares the most with this prompt (a chat's next turn),
        # else the one least recently used (its cache the least likely to be asked for again).
        seq = max(self._free, key=lambda s: (reusable(s, self.t_ctx, head), -self._admitted[s]))
        self._admitted[seq] = max(self._admitted) + 1
        self._free.remove(seq)
        reused = reusable(seq, self.t_ctx, head)
        self.t_ctx.keep(seq, reused)  # (a recurrent state may go back further: read the rest)
        reused = len(self.t_ctx.cached[seq])
        same = group is not None and self._groups[seq] == group
        self._groups[seq] = group
        config = req.config
        proposers: list[BatchProposer] = []
        if req.speculative and config.k_max > 0:
            chosen = {s.name for s in registry.chosen(config.drafter)}
            proposers = [p for p in self.proposers if p.kind in chosen]
        for p in proposers:
            p.admit(seq, prompt, same)
        # The choice as run: auto with one kind to draft with is that kind.
        kind = proposers[0].kind if len(proposers) == 1 else config.drafter if proposers else ""
        start = StartEvent(
            "speculative" if req.speculative else "baseline",
            kind,
            config.k_max if kind else 0,
            config.drafts_adaptively and bool(kind),
        )
        base = start.stats(len(prompt), self.target.device_label, config.exact is True)
        history = list(prompt)
        s = _Seq(
            req=req,
            seq=seq,
            history=history,
            answer=AnswerTracker(self.target, config, history),
            rng=random.Random(config.sampler.seed),
            base=base,
            kind=kind,
            proposers=proposers,
            continuer=next((p for p in proposers if p.continues), None),
            prefill_at=reused,
            reused=reused,
            t_admitted=time.perf_counter(),
            alpha=dict(self.alpha),
        )
        self._active[seq] = s
        req.emit([start])
        if s.decoding:
            self._prefilled(s)

    def _prefilled(self, s: _Seq) -> None:
        now = time.perf_counter()
        prompt = s.req.prompt
        prefilled = len(prompt) - 1 - s.reused + 1
        s.base = replace(s.base, prefill_tokens=prefilled, prefill_s=now - s.t_admitted)
        s.t_start = s.t_mark = now
        s.req.emit([PrefillEvent(len(prompt), prefilled, now - s.t_admitted)])

    def _release(self, s: _Seq) -> None:
        del self._active[s.seq]
        self._free.append(s.seq)
        for p in s.proposers:
            p.release(s.seq)

    def step(self) -> bool:
        """One round for every active sequence; False when there was nothing to do (every
        sequence waits for its reader)."""
        decoding: list[_Seq] = []
        prefilling: list[_Seq] = []
        n_ctx = self.t_ctx.n_ctx
        for s in list(self._active.values()):
            if s.req.cancel.is_set():
                self._end(s, "cancelled")
            elif s.prefill_at < len(s.req.prompt) - 1:  # (not s.decoding, inlined: once a round)
                prefilling.append(s)
            elif n_ctx - len(s.history) < 0:
                self._end(s, "context_full")
            elif s.req.unread() < MAX_UNREAD:
                decoding.append(s)
        if not decoding and not prefilling:
            return False
        # Plan with the prompt chunks the round would carry, then give the chunks what room
        # the verify rows leave in the micro-batch.
        # (With no answer waiting on the round, prompts take the whole micro-batch: bigger
        # matrix products read a prompt faster.)
        budget = self._prompt_budget(len(decoding)) if decoding and prefilling else self.t_ctx.capacity
        wanted = 0
        if prefilling:
            short = sum(len(s.req.prompt) - 1 - s.prefill_at for s in prefilling if s.short)
            long = sum(len(s.req.prompt) - 1 - s.prefill_at for s in prefilling if not s.short)
            wanted = short + min(max(0, budget - short), long)
        self._plan(decoding, wanted)
        t0 = time.perf_counter()
        spent = self._draft(decoding)
        pieces = [Piece(s.seq, [s.history[-1], *s.drafts], "all") for s in decoding]
        verify_rows = sum(len(p.tokens) for p in pieces)
        room = self.t_ctx.capacity - verify_rows  # (the micro-batch's)
        rows_left = self.t_ctx.max_rows - verify_rows
        chunks: list[Piece] = []
        opening: list[_Seq] = []  # prompts read to their end here, with their first token
        # The shortest rest first: a short prompt beside a long one is read in this round.
        for s in sorted(prefilling, key=lambda s: len(s.req.prompt) - s.prefill_at):
            rest = len(s.req.prompt) - 1 - s.prefill_at
            n = min(rest, room) if s.short else min(rest, room, max(0, budget))
            if (
                n == rest
                and room > rest
                and rows_left > 0
                and s.req.unread() < MAX_UNREAD
                and s.req.config.drafts_adaptively
                and not s.req.config.exact
            ):
                # The rest and the last token, whose row gives the first token: the answer
                # starts in this round, not in the next. (Not for a fixed K, a seeded sampling
                # run whose answer must repeat, nor for exact output, which must be the target
                # alone's: their first token comes from a verify, as it does when the prompt is
                # cached; a prompt's chunk computes its rows with other kernels. Exact with the
                # first token in the chunk, 7 of 12 Qwen2.5-Coder answers left the target's.)
                chunks.append(Piece(s.seq, s.req.prompt[s.prefill_at :], "last"))
                room -= rest + 1
                budget -= rest + 1
                rows_left -= 1
                opening.append(s)
            elif n > 0:
                chunks.append(Piece(s.seq, s.req.prompt[s.prefill_at : s.prefill_at + n], "none"))
                room -= n
                budget -= n
        # (Exact output where check() allowed it: the reference kernels for the rows read.)
        self.target.use_reference_kernels(any(s.req.config.exact for s in (*decoding, *opening)))
        for s in opening:
            s.prefill_at = len(s.req.prompt) - 1
            s.no_drafts()
        for s in decoding:  # (a recurrent state its rejection would take back past the snapshots)
            if s.drafts and self.t_ctx.needs_checkpoint(len(s.drafts)):
                self.t_ctx.checkpoint(s.seq)
        t1 = time.perf_counter()
        rows = self.t_ctx.decode([*pieces, *chunks])
        t2 = time.perf_counter()
        n_tokens = verify_rows + sum(len(c.tokens) for c in chunks)
        target_s = t2 - t1 - self.t_ctx.listened_s  # (the heads' taking of rows is theirs)
        if not chunks:  # (a prompt's tokens cost less than rows read: the table is of rows)
            self.costs.verify.add(n_tokens, target_s)
        GOVERNOR.observe(("target", n_tokens), target_s)
        if GOVERNOR.changes != self._changes:
            self._changes = GOVERNOR.changes
            for each in self._active.values():
                each.meter.speed_changed()
        self._alone = len(decoding) + len(chunks) == 1
        first_rows = []  # (the opening prompts' rows, in their order)
        for c, logits in zip(chunks, rows[len(pieces) :], strict=True):
            if c.outputs == "last":
                first_rows.append(logits)
                continue
            s = self._active[c.seq]
            s.prefill_at += len(c.tokens)
            if s.decoding:
                self._prefilled(s)
        for s, logits in zip(decoding, rows, strict=False):
            assert logits is not None
            self._accept(s, logits, spent.get(s.seq, 0.0), t2 - t1, t1 - t0)
        for s, logits in zip(opening, first_rows, strict=True):
            assert logits is not None
            # Its first token came with the prompt's read: that decode is its prefill's time
            # (usage's prefill_s), and its answer's time starts after it.
            self._prefilled(s)
            self._accept(s, logits, 0.0, 0.0, 0.0)
        if self._reread:  # (what checkpointed states went back past, every sequence's at once)
            self.t_ctx.prefill(self._reread)
            self._reread = []
        return True

    # ------------------------------------------------------------------ a round's parts
    def _prompt_budget(self, decoding: int) -> int:
        """Prompt tokens a round may carry beside `decoding` answers (PREFILL_SLOWDOWN). The
        verify table prices them as rows, which cost more than a prompt's tokens: the bound
        holds with room."""
        table = self.costs.verify
        limit = PREFILL_SLOWDOWN * table.at(decoding)
        lo, hi = 1, self.t_ctx.capacity  # (the table rises with the tokens: a bisection)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if table.at(decoding + mid) <= limit:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _plan(self, decoding: list[_Seq], other_tokens: int) -> None:
        """Who drafts for each sequence (batch_costs.pick, from its proposers' offers) and its
        K (batch_costs.choose, for the whole round)."""
        if not any(s.proposers for s in decoding):  # (every answer decodes alone: no plan)
            for s in decoding:
                s.no_drafts()
            return
        wants: list[Want] = []
        offers: list[BatchOffer | None] = []
        # Each sequence's verify rows within the outputs one decode holds, and its rejected
        # drafts within what its state can be cut back by (a hybrid target's snapshots).
        k_cap = self.t_ctx.max_rows // max(1, len(decoding)) - 1
        if self.t_ctx.snapshots:  # (a hybrid llama.cpp rolls back itself: within its snapshots)
            k_cap = min(k_cap, self.t_ctx.snapshots)
        for s in decoding:
            config = s.req.config
            budget = min(config.max_tokens - s.answer.generated - 1, self.t_ctx.n_ctx - len(s.history), k_cap)
            k_max = max(0, min(config.k_max, budget))
            adaptive = config.drafts_adaptively
            # A probe: a plain round, timed as the target alone, when the meter asks and the
            # round would hold this answer alone (speedup.py).
            if adaptive and len(decoding) == 1 and not other_tokens and s.kind and s.meter.probe_due():
                k_max = 0
            s.no_drafts()
            bids: list[tuple[BatchProposer, BatchOffer]] = []
            if k_max:
                bids = [(p, o) for p in s.proposers if (o := p.offer(s.seq, s.history, k_max)) is not None]
            i = pick([Bid(s.alpha[p.kind], o.k_max, p.free) for p, o in bids], k_max, adaptive)
            if i < 0:
                offers.append(None)
                wants.append(Want(0.0, 0, False, None if adaptive else 0))
                continue
            proposer, offer = bids[i]
            s.proposer = proposer
            offers.append(offer)
            # (A fixed K, a seeded sampling run's, is taken as it is.)
            fixed = None if adaptive else offer.k_max
            stepped, alone = not proposer.free, not proposer.shares_steps
            wants.append(
                Want(
                    s.alpha[proposer.kind],
                    offer.k_max,
                    stepped,
                    fixed,
                    offer.lag,
                    alone,
                    proposer.table,
                    proposer.one_pass,
                )
            )
        ks = self.costs.choose(wants, other_tokens)
        for s, k, given in zip(decoding, ks, offers, strict=True):
            if k == 0 or given is None:
                s.no_drafts()
                continue
            s.lane = lane = Lane(s.seq, s.history, s.req.config, s.rng, given, k)
            finisher = s.continuer
            if finisher is not None and s.proposer is not None and s.proposer.takes_tail:
                lane.tail = partial(finisher.continuation, s.seq, s.history)
                lane.tail_max = self._tail_max(s, finisher, given.k_max)

    def _tail_max(self, s: _Seq, finisher: BatchProposer, k_max: int) -> int:
        """The most a free kind may add to another's draft for `s` (a composition: Lane.tail):
        the K it would be given drafting for `s` alone, by its acceptance and the verify's costs
        (as the single sequence's hybrid asks prompt lookup's policy). A fixed K, whose answer
        must not depend on timing: up to K."""
        if not s.req.config.drafts_adaptively:
            return k_max
        return self.costs.choose([Want(s.alpha[finisher.kind], k_max, False)])[0]

    def _draft(self, decoding: list[_Seq]) -> dict[int, float]:
        """Every proposer drafts for the sequences it was given, at once; the seconds each
        stepped proposer took (by sequence: a free one's search was the plan's)."""
        spent: dict[int, float] = {}
        for p in self.proposers:
            lanes = [s.lane for s in decoding if s.proposer is p and s.lane is not None]
            if lanes:
                took = p.propose(lanes)
                for lane in lanes:
                    spent[lane.seq] = 0.0 if p.free else took
        return spent

    def _accept(
        self, s: _Seq, logits: npt.NDArray[np.float32], draft_s: float, verify_s: float, drafting_s: float
    ) -> None:
        """The round's verdict for `s` from its rows; `draft_s`: its own drafter's time,
        `drafting_s`: the round's drafting, every sequence's (the round's wall time has it)."""
        config = s.req.config
        sampler = config.sampler
        lane = s.lane
        drafts = s.drafts
        k = len(drafts)
        try:
            if sampler.greedy and not k:  # (the target alone's every round: kept lean)
                own_token = int(logits[0].argmax())
                if not math.isfinite(logits[0, own_token]):  # (NaN and +inf win an argmax)
                    raise NonFiniteLogits("NaN or infinite logits")
                accepted = 0
            elif sampler.greedy:
                best = logits.argmax(axis=1)
                for row in range(k + 1):
                    if not np.isfinite(logits[row, best[row]]):
                        raise NonFiniteLogits("NaN or infinite logits")
                accepted, own_token = accept_greedy(drafts, best)
            else:
                qs = lane.qs if lane is not None else []
                accepted, own_token = accept_sampled(logits, drafts, qs, sampler, s.rng)
        except NonFiniteLogits:
            self._release(s)
            s.req.fail(self.target.non_finite(len(s.history)))
            return
        keep = len(s.history) + accepted
        if not self.t_ctx.keep(s.seq, keep):  # (back to its checkpoint: the rest is read again)
            kept = [*s.history, *drafts[:accepted]]
            self._reread.append(Piece(s.seq, kept[len(self.t_ctx.cached[s.seq]) :], "none"))
        for each in s.proposers:
            each.keep(s.seq, keep)
        proposer = s.proposer if k else None
        looked_up = 0
        if proposer is not None and lane is not None:
            # Each kind is credited with its own drafts: the stepped kind's first, then what a
            # free kind found (all of a free lane's; a tail's, when the drafts before it held).
            finder = proposer if proposer.free else s.continuer
            looked_up = k if proposer.free else lane.looked_up
            own = k - looked_up
            if own:
                self._learn(s, proposer.kind, min(accepted, own) / own)
            if looked_up and accepted >= own and finder is not None:
                self._learn(s, finder.kind, (accepted - own) / looked_up)
        tokens = (*drafts[:accepted], own_token)
        rnd = RoundEvent(
            drafted=k,
            accepted=accepted,
            emitted=len(tokens),
            draft_s=draft_s,
            verify_s=verify_s,
            k=lane.k if lane is not None else 0,
            drafter=proposer.kind if proposer is not None else "",
            caught_up=lane.caught_up if lane is not None else 0,
            looked_up=looked_up,
            tokens=tokens,
        )
        s.llama_s += verify_s
        reasoning_s = drafting_s + verify_s if s.answer.in_reasoning else None
        events = [*s.answer.take(rnd, reasoning_s), rnd]
        now = time.perf_counter()
        rnd.wall_s = drafting_s + verify_s
        if s.kind:  # (the first round runs cold: untimed, as a single generation's)
            timed = self._alone and s.answer.tally.rounds > 1
            s.meter.add(k, len(tokens), now - s.t_mark, timed=timed)
        s.t_mark = now
        s.req.emit(events)
        if s.answer.reason is not None:
            self._end(s, s.answer.reason, now)

    def _learn(self, s: _Seq, kind: str, rate: float) -> None:
        """A round's acceptance per draft of `kind` for `s`, and for the sequences after it."""
        s.alpha[kind] = ALPHA_KEEP * s.alpha[kind] + (1 - ALPHA_KEEP) * rate
        self.alpha[kind] = ALPHA_KEEP * self.alpha[kind] + (1 - ALPHA_KEEP) * rate

    def _end(self, s: _Seq, reason: StopReason, now: float | None = None) -> None:
        """The sequence's answer ends: its last events, and its sequence is free (its cache
        kept for a next request that shares its prefix)."""
        self._release(s)
        answer = s.answer
        if answer.reason is None:
            answer.reason = reason
        events = answer.finish()
        end = now if now is not None else time.perf_counter()
        stats = answer.record(
            s.base,
            end - s.t_start if s.t_start else 0.0,
            llama_s=s.llama_s,
            threads=GOVERNOR.level,
        )
        if s.kind:
            stats = with_speedup(stats, s.meter)
        events.append(answer.done(stats))
        s.req.emit(events)
