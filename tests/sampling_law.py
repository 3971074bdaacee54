"""The exact law of a short continuation under the target alone, and a chi-square test of
sampled continuations against it: the losslessness tests for every drafter use both."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scipy.stats import chisquare

from tandem.engine import ModelPair, SamplerSettings
from tandem.engine.sampling import distribution

if TYPE_CHECKING:
    from tandem.engine.llama.model import LoadedModel


def _joint(
    target: LoadedModel,
    logits_after: Callable[[tuple[int, ...]], Any],
    settings: SamplerSettings,
    n_tokens: int,
) -> dict[tuple[int, ...], float]:
    """P(t1 .. tn), expanding every branch: `logits_after(seq)` is the target's last row after
    the prompt and `seq`."""
    joint: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(n_tokens):
        nxt: dict[tuple[int, ...], float] = {}
        for seq, prob in joint.items():
            logits = logits_after(seq)
            assert logits is not None
            dist = distribution(logits[0], settings)
            assert dist.ids is not None
            for tok, p in zip(dist.ids.tolist(), dist.probs.tolist(), strict=True):
                assert not target.is_eog(tok), "pick a prompt whose continuations never end"
                nxt[(*seq, tok)] = prob * p
        joint = nxt
    return joint


def exact_joint(
    pair: ModelPair, prompt: list[int], settings: SamplerSettings, n_tokens: int
) -> dict[tuple[int, ...], float]:
    """P(t1 .. tn) under the target alone, from its logits along every branch."""
    target = pair.target

    def logits_after(seq: tuple[int, ...]) -> Any:
        target.reset()
        return target.decode([*prompt, *seq], "last")

    return _joint(target, logits_after, settings, n_tokens)


def stepwise_joint(
    pair: ModelPair, prompt: list[int], settings: SamplerSettings, n_tokens: int, *, exact: bool
) -> dict[tuple[int, ...], float]:
    """P(t1 .. tn) as the target alone computes it in a generation: the prompt but its last token
    prefilled, then one token at a time (`exact`: with the kernels an exact generation uses).
    exact_joint's single batch per branch rounds like a prefill, which on K-quant models is
    up to 0.5 logits away from this (docs/results/history.md, "Exact output")."""
    target = pair.target
    assert target.exact_plan.possible or not exact, target.exact_plan.why_not  # (binds its kernels)
    target.reset()
    target.decode(prompt[:-1], "none")
    base = len(target.cached)

    def logits_after(seq: tuple[int, ...]) -> Any:
        target.truncate(base)
        logits = None
        for tok in [prompt[-1], *seq]:
            logits = target.decode([tok], "last")
        return logits

    target.exact = exact
    try:
        return _joint(target, logits_after, settings, n_tokens)
    finally:
        target.exact = False


def chi_square_p(joint: dict[tuple[int, ...], float], counts: Counter[tuple[int, ...]]) -> float:
    n = sum(counts.values())
    if not set(counts) <= set(joint):
        return 0.0  # a sequence the target can never produce: certainly not its distribution
    cells = sorted(joint, key=joint.__getitem__, reverse=True)
    observed, expected = [], []
    other_o = other_e = 0.0
    for c in cells:  # pool cells expected fewer than 5 times, as chi-square requires
        e = joint[c] * n
        if e >= 5:
            observed.append(counts[c])
            expected.append(e)
        else:
            other_o += counts[c]
            other_e += e
    if other_e > 0:
        observed.append(other_o)
        expected.append(other_e)
    return float(chisquare(observed, expected).pvalue)
