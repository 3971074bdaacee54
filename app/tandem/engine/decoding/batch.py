"""Parallel sequences: several answers advanced together, one verify batch a round.

`tandem serve --parallel N` loads each model with N sequences (sequences.py) and runs one
`BatchEngine` loop in a thread of its own. Requests join and leave between rounds (continuous
batching). A round:

    1. admit   a new request takes a free sequence, the one whose cache shares the longest
               prefix with its prompt (the rest of the cache is dropped);
    2. choose  K per decoding sequence from the costs learnt as functions of the whole batch
               (batch_costs.py): with enough sequences drafting stops paying, and K is 0;
    3. draft   prompt lookup per sequence; the draft model for every sequence that drafts with
               it in ONE batch per draft step (its catch-up in the first);
    4. verify  every decoding sequence's [last, d1..dK], and a bounded share of the prompts
               still being read, in ONE llama_decode;
    5. accept  per sequence with its own sampler settings and random stream (round.py's rules),
               roll back each sequence's caches to what its target kept.

Each sequence's events are those of a single generation (StartEvent, PrefillEvent, tokens and
a RoundEvent a round, DoneEvent), told to its `emit`. Drafting kinds: a draft model of the
target's tokenizer and prompt lookup (auto: per sequence, whichever is expected to add more);
the kinds that read the target's own rows (MTP, EAGLE-3, DFlash) and drafting across
tokenizers keep one sequence (their llama.cpp staging and re-encoding hold one sequence's state).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from ..config import GenerationConfig
from ..drafters import draw, registry
from ..drafters.lookup import KIND as LOOKUP
from ..drafters.lookup import LookupDrafter
from ..drafters.model import KIND as MODEL
from ..drafters.registry import AUTO
from ..errors import TandemError
from ..events import Event, GenerationStats, PrefillEvent, RoundEvent, StartEvent, StopReason
from ..llama import exact
from ..llama.exact import ExactPlan
from ..llama.model import GOVERNOR, LoadedModel
from ..llama.sequences import Piece, SeqContext
from ..sampling import Dist, NonFiniteLogits, accept_draft, distribution, residual
from .answer import AnswerTracker
from .batch_costs import BatchCosts, Want
from .inbox import Inbox

# Drafter choices a parallel sequence can run (auto: a draft model and/or prompt lookup).
PARALLEL_KINDS = (AUTO, MODEL, LOOKUP)
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
# Acceptance per draft before a sequence has drafted (then an average over its rounds).
ALPHA_PRIOR = {MODEL: 0.5, LOOKUP: 0.4}
ALPHA_KEEP = 0.9  # the weight an acceptance estimate keeps per round drafted


@dataclass
class SeqRequest:
    """One answer asked of the engine. `emit` receives its events a round at a time (it must not
    block); `unread` says how many of the batches emitted its reader has not taken yet."""

    prompt: Sequence[int]
    config: GenerationConfig
    speculative: bool
    emit: Callable[[list[Event]], None]
    fail: Callable[[BaseException], None]
    cancel: threading.Event = field(default_factory=threading.Event)
    unread: Callable[[], int] = lambda: 0
    # Who may reuse what this request leaves in a cache: a request reuses a cached prefix only
    # from one of the same group (what it reuses shows in its time and `cached_tokens`, so a
    # shared cache tells one client the beginnings of another's prompts and answers); None:
    # it reuses nothing and leaves nothing reusable.
    cache_group: str | None = ""


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
    lookup: LookupDrafter | None
    uses_model: bool
    prefill_at: int  # prompt tokens in the target's cache (the last one is decoded in round one)
    reused: int
    t_admitted: float
    t_start: float = 0.0
    llama_s: float = 0.0
    alpha: dict[str, float] = field(default_factory=lambda: dict(ALPHA_PRIOR))
    # This round's plan and drafts.
    k: int = 0
    drafter: str = ""
    drafts: list[int] = field(default_factory=list)
    qs: list[Dist | None] = field(default_factory=list)
    caught_up: int = 0

    @property
    def short(self) -> bool:
        """Whether its prompt's new part is read whole in a round (WHOLE_PROMPT)."""
        return len(self.req.prompt) - 1 - self.reused <= WHOLE_PROMPT

    @property
    def decoding(self) -> bool:
        return self.prefill_at >= len(self.req.prompt) - 1

    def no_drafts(self) -> None:
        """This round's plan: nothing drafted (until _plan gives it K)."""
        self.drafter, self.drafts, self.qs, self.caught_up, self.k = "", [], [], 0, 0


class BatchEngine:
    """N sequences of one pair; `submit` from any thread, `run` in the engine's thread."""

    def __init__(self, target: LoadedModel, draft: LoadedModel | None) -> None:
        if target.recurrent:
            raise TandemError(
                "parallel sequences need a target without a recurrent state (this one is hybrid or "
                "recurrent): serve it with --parallel 1"
            )
        self.target = target
        self.draft = draft
        self.t_ctx = SeqContext(target)
        self.d_ctx = SeqContext(draft) if draft is not None else None
        self.n_seq = self.t_ctx.n_seq
        self.costs = BatchCosts()
        # Acceptance per draft by kind, over every sequence's rounds: where a new one starts.
        self.alpha = dict(ALPHA_PRIOR)
        self._inbox: Inbox[SeqRequest] = Inbox()
        self._active: dict[int, _Seq] = {}
        self._free = list(range(self.n_seq))
        self._groups: list[str | None] = [None] * self.n_seq  # whose tokens each cache holds
        self._admitted = [0] * self.n_seq  # when each sequence last took a request (a count)
        # Set once the loop takes requests (after calibrate): a server says it is ready then.
        self.ready = threading.Event()

    @staticmethod
    def left_out(target: LoadedModel, draft: LoadedModel | None) -> list[str]:
        """The kinds this pair drafts with that a parallel sequence does not."""
        return [s.name for s in registry.available(target, draft) if s.name not in PARALLEL_KINDS]

    # ------------------------------------------------------------------ requests
    def check(self, config: GenerationConfig, speculative: bool) -> GenerationConfig:
        """`config` as a parallel sequence runs it, or TandemError for what it cannot."""
        if speculative and config.drafter not in PARALLEL_KINDS:
            raise TandemError(
                f"drafting with {config.drafter!r} runs one sequence at a time; parallel sequences "
                f"draft with {', '.join(PARALLEL_KINDS)} (or start tandem serve with --parallel 1)"
            )
        if speculative and config.drafter == MODEL and self.draft is None:
            raise TandemError(f"this server has no draft model: ask for drafter {LOOKUP!r} or {AUTO!r}")
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
        if self.d_ctx is not None:
            self.d_ctx.close()

    # ------------------------------------------------------------------ the loop
    def calibrate(self) -> None:
        """Time each model's decodes at the sizes rounds use (verifies of 1 to 48 rows, one row
        per sequence and the rest on the first, as a round with drafts has them; draft steps and
        catch-ups of 1 to 64 tokens) so that the first rounds are planned on this machine's
        costs, not on priors: a draft model's catch-up of a prompt can cost more than the
        answer's first tokens (SmolLM2 Q4_1 on a 2-core CPU: 2 ms a token), and a kernel's step
        up can make one more row cost 5 ms. Runs in the free sequences, left empty; stops early
        when the engine is stopped (a Ctrl+C while it measures: the Qwen2.5-Coder pair's take
        17 s on a 2-core CPU)."""
        seqs = list(self._free)
        tokens = [t % self.target.n_vocab for t in range(1000, 1080)]
        for ctx, table, sizes, rows in (
            (self.t_ctx, self.costs.verify, (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48), "all"),
            (self.d_ctx, self.costs.draft, (1, 2, 3, 4, 6, 8, 16, 32, 64), "last"),
        ):
            if ctx is None:
                continue
            for seq in seqs:
                ctx.keep(seq, 0)
            # A short context in each sequence (the first decode also pays the page-ins).
            ctx.prefill([Piece(seq, tokens[:8], "none") for seq in seqs])
            for n in sizes:
                if self._inbox.stopped:
                    break
                if (n > ctx.max_rows and rows == "all") or n > ctx.capacity:
                    continue
                # A verify: one row in each of m sequences, the rest on the first; a draft step
                # or catch-up: one sequence (a step across sequences is as many tokens).
                m = min(n, len(seqs)) if rows == "all" else 1
                counts = [n - m + 1] + [1] * (m - 1)
                pieces = [Piece(seq, tokens[8 : 8 + c], rows) for seq, c in zip(seqs, counts, strict=False)]
                for _ in range(2):
                    t0 = time.perf_counter()
                    ctx.decode(pieces)
                    table.add(n, time.perf_counter() - t0)
                    for p in pieces:
                        ctx.keep(p.seq, 8)
            for seq in seqs:
                ctx.keep(seq, 0)

    def run(self) -> None:
        """Rounds until stopped; cancelled and waiting requests are ended when it stops."""
        try:
            with contextlib.suppress(Exception):  # (a failure here leaves the priors: no harm)
                self.calibrate()
        finally:
            self.ready.set()
        while True:
            inbox = self._inbox
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
        self.t_ctx.keep(seq, reused)
        if self.d_ctx is not None:
            self.d_ctx.keep(seq, reusable(seq, self.d_ctx, prompt))
        self._groups[seq] = group
        config = req.config
        kind = ""
        uses_model = False
        lookup = None
        if req.speculative and config.k_max > 0:
            kind = config.drafter
            uses_model = kind in (AUTO, MODEL) and self.d_ctx is not None
            if kind in (AUTO, LOOKUP):
                lookup = LookupDrafter(self.target.n_vocab)
            if kind == AUTO and not uses_model:
                kind = LOOKUP
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
            lookup=lookup,
            uses_model=uses_model,
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
        s.t_start = now
        s.req.emit([PrefillEvent(len(prompt), prefilled, now - s.t_admitted)])

    def _release(self, s: _Seq) -> None:
        del self._active[s.seq]
        self._free.append(s.seq)

    def step(self) -> bool:
        """One round for every active sequence; False when there was nothing to do (every
        sequence waits for its reader)."""
        for s in list(self._active.values()):
            if s.req.cancel.is_set():
                self._end(s, "cancelled")
        decoding: list[_Seq] = []
        prefilling: list[_Seq] = []
        for s in list(self._active.values()):
            if not s.decoding:
                prefilling.append(s)
            elif self.t_ctx.n_ctx - len(s.history) < 0:
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
        short = sum(len(s.req.prompt) - 1 - s.prefill_at for s in prefilling if s.short)
        long = sum(len(s.req.prompt) - 1 - s.prefill_at for s in prefilling if not s.short)
        wanted = short + min(max(0, budget - short), long)
        self._plan(decoding, wanted)
        t0 = time.perf_counter()
        self._draft(decoding)
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
            ):
                # The rest and the last token, whose row gives the first token: the answer
                # starts in this round, not in the next. (Not for a fixed K, a seeded sampling
                # run whose answer must repeat: its first token comes from a verify, as it does
                # when its prompt is cached, which a prompt's chunk computes with other kernels.)
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
        t1 = time.perf_counter()
        rows = self.t_ctx.decode([*pieces, *chunks])
        t2 = time.perf_counter()
        n_tokens = verify_rows + sum(len(c.tokens) for c in chunks)
        if not chunks:  # (a prompt's tokens cost less than rows read: the table is of rows)
            self.costs.verify.add(n_tokens, t2 - t1)
        GOVERNOR.observe(("target", n_tokens), t2 - t1)
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
            self._accept(s, logits, t1 - t0, t2 - t1)
        for s, logits in zip(opening, first_rows, strict=True):
            assert logits is not None
            # Its first token came with the prompt's read: that decode is its prefill's time
            # (usage's prefill_s), and its answer's time starts after it.
            self._prefilled(s)
            self._accept(s, logits, 0.0, 0.0)
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
        wants: list[Want] = []
        # Each sequence's verify rows within the outputs one decode holds.
        k_cap = self.t_ctx.max_rows // max(1, len(decoding)) - 1
        for s in decoding:
            config = s.req.config
            budget = min(config.max_tokens - s.answer.generated - 1, self.t_ctx.n_ctx - len(s.history), k_cap)
            k_max = max(0, min(config.k_max, budget)) if s.kind else 0
            s.no_drafts()
            if s.uses_model and self.d_ctx is not None and len(s.history) > self.d_ctx.n_ctx:
                # The draft model's context (its own, often shorter than the target's: a 32k
                # draft beside a 128k target) is full: this answer goes on without it.
                s.uses_model = False
                self.d_ctx.keep(s.seq, 0)
            found: list[int] = []
            if s.lookup is not None and k_max:
                found = s.lookup.candidates(s.history, k_max)
            # auto: the lookup when it found a run it is expected to keep more of, else the model;
            # with a fixed K (a seeded sampling run, whose output must repeat whatever runs
            # beside it) by the found run alone, never by what other sequences taught.
            if not config.drafts_adaptively:
                use_lookup = bool(found) and (not s.uses_model or len(found) >= k_max)
            else:
                use_lookup = bool(found) and (
                    not s.uses_model or s.alpha[LOOKUP] * len(found) >= s.alpha[MODEL] * k_max * 0.5
                )
            if use_lookup:
                s.drafter, s.drafts = LOOKUP, found
                k_max = len(found)
            elif s.uses_model:
                s.drafter = MODEL
                assert self.d_ctx is not None  # (its cache ends at the history's end + K - 1 drafts)
                k_max = min(k_max, self.d_ctx.n_ctx - len(s.history) + 1)
            else:
                k_max = 0
            fixed = None if config.drafts_adaptively else k_max
            # (The draft model's cache is always a prefix of the history: see _accept.)
            lag = len(s.history) - len(self.d_ctx.cached[s.seq]) if self.d_ctx else 1
            wants.append(Want(s.alpha.get(s.drafter, 0.0), k_max, s.drafter == MODEL, fixed, max(1, lag)))
        ks = self.costs.choose(wants, other_tokens)
        for s, k in zip(decoding, ks, strict=True):
            s.k = k
            if s.drafter == LOOKUP:
                s.drafts = s.drafts[:k]
                assert s.lookup is not None
                s.qs = list(s.lookup.proposal_from(s.drafts).qs) if not s.req.config.sampler.greedy else []
            if k == 0:
                s.drafter, s.drafts = "", []

    def _draft(self, decoding: list[_Seq]) -> None:
        """The draft model's steps for every sequence drafting with it: one batch a step."""
        d_ctx = self.d_ctx
        going = [s for s in decoding if s.drafter == MODEL and s.k > 0]
        if d_ctx is None or not going:
            return
        # Step one: each sequence's catch-up (what its draft cache misses of the history), the
        # part beyond its share of the micro-batch decoded first.
        share = d_ctx.capacity // len(going)
        pieces = []
        behind = []
        for s in going:
            have = len(d_ctx.cached[s.seq])  # (a prefix of the history)
            if have == len(s.history):  # (never all: the last token is decoded to draft from it)
                have -= 1
            d_ctx.keep(s.seq, have)
            cut = max(have, len(s.history) - share)
            if cut > have:
                behind.append(Piece(s.seq, s.history[have:cut], "none"))
            tail = s.history[cut:]
            s.caught_up = len(s.history) - have
            pieces.append(Piece(s.seq, tail, "last"))
        if behind:
            d_ctx.prefill(behind)
        while going:
            t0 = time.perf_counter()
            rows = d_ctx.decode(pieces)
            self.costs.draft.add(sum(len(p.tokens) for p in pieces), time.perf_counter() - t0)
            nxt: list[_Seq] = []
            pieces = []
            for s, row in zip(going, rows, strict=True):
                assert row is not None
                config = s.req.config
                try:
                    got = draw(row[-1], config.sampler, s.rng, config.p_min)
                except NonFiniteLogits:
                    got = None
                if got is None:
                    continue
                token, q = got
                s.drafts.append(token)
                s.qs.append(q)
                if len(s.drafts) < s.k:
                    nxt.append(s)
                    pieces.append(Piece(s.seq, [token], "last"))
            going = nxt

    def _accept(self, s: _Seq, logits: npt.NDArray[np.float32], draft_s: float, verify_s: float) -> None:
        config = s.req.config
        sampler = config.sampler
        drafts = s.drafts
        k = len(drafts)
        try:
            if sampler.greedy:
                best = logits.argmax(axis=1)
                for row in range(k + 1):
                    if not np.isfinite(logits[row, best[row]]):
                        raise NonFiniteLogits("NaN or infinite logits")
                accepted = 0
                while accepted < k and drafts[accepted] == best[accepted]:
                    accepted += 1
                own = int(best[accepted])
            else:
                accepted, own = k, -1
                for j in range(k):
                    p = distribution(logits[j], sampler)
                    q = s.qs[j]
                    assert q is not None
                    if not accept_draft(p, q, drafts[j], s.rng):
                        accepted, own = j, residual(p, q).sample(s.rng)
                        break
                if own < 0:
                    own = distribution(logits[k], sampler).sample(s.rng)
        except NonFiniteLogits:
            self._release(s)
            s.req.fail(self.target.non_finite(len(s.history)))
            return
        keep = len(s.history) + accepted
        self.t_ctx.keep(s.seq, keep)
        if self.d_ctx is not None:
            self.d_ctx.keep(s.seq, min(keep, len(self.d_ctx.cached[s.seq])))
        if k and s.drafter:
            rate = accepted / k
            s.alpha[s.drafter] = ALPHA_KEEP * s.alpha[s.drafter] + (1 - ALPHA_KEEP) * rate
            self.alpha[s.drafter] = ALPHA_KEEP * self.alpha[s.drafter] + (1 - ALPHA_KEEP) * rate
        tokens = (*drafts[:accepted], own)
        rnd = RoundEvent(
            drafted=k,
            accepted=accepted,
            emitted=len(tokens),
            draft_s=draft_s if s.drafter == MODEL else 0.0,
            verify_s=verify_s,
            k=s.k,
            drafter=s.drafter if k else "",
            caught_up=s.caught_up,
            looked_up=k if s.drafter == LOOKUP else 0,
            tokens=tokens,
        )
        s.llama_s += verify_s
        reasoning_s = draft_s + verify_s if s.answer.in_reasoning else None
        events = [*s.answer.take(rnd, reasoning_s), rnd]
        now = time.perf_counter()
        rnd.wall_s = draft_s + verify_s
        s.req.emit(events)
        if s.answer.reason is not None:
            self._end(s, s.answer.reason, now)

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
        events.append(answer.done(stats))
        s.req.emit(events)
