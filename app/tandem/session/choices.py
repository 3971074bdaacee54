"""The user's choices, layered over a catalog pair's settings and the engine's defaults.

Each setting comes from the first of: what the user chose (a flag, the app's settings), the
catalog pair in use (its `context`, `draft_max` and `p_min`), the engine's default
(`GenerationConfig`, `LoadOptions`, `SamplerSettings`). `tandem run --pair`, `tandem chat
--pair` and the app's picker all go through `generation_config` / `load_options` here, so a
pair means the same wherever it is chosen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tandem.engine.config import DrafterChoice, GenerationConfig, LoadOptions
from tandem.engine.drafters import registry
from tandem.engine.errors import TandemError
from tandem.engine.sampling import SamplerSettings

if TYPE_CHECKING:
    from tandem.catalog.spec import PairSpec


@dataclass(frozen=True)
class Choices:
    """What the user asked for. None: not chosen (the pair's setting, else the default)."""

    max_tokens: int | None = None
    draft_max: int | None = None
    adaptive: bool = True
    drafter: DrafterChoice = "auto"
    p_min: float | None = None
    sampler: SamplerSettings = field(default_factory=SamplerSettings)
    stop: tuple[str, ...] = ()
    n_ctx: int | None = None
    n_gpu_layers: int | None = None
    n_threads: int | None = None
    # rpc-server endpoints for the target (HOST:PORT each); empty: it runs on this machine.
    rpc_servers: tuple[str, ...] = ()
    # Exact output (GenerationConfig.exact): None wherever the target allows it, True required,
    # False off.
    exact: bool | None = None
    # A thinking model: think (True) or not (False) where its chat template has a switch;
    # None: the model's default. Used when the prompt is built (prompts.py), not by the engine.
    think: bool | None = None

    def validate(self) -> None:
        """Raise TandemError with one sentence naming the first bad value (NaN included)."""
        if self.p_min is not None and not math.isfinite(self.p_min):
            raise TandemError("p-min must be a number in [0, 1)")
        generation_config(self).validate()
        registry.check_choice(self.drafter)
        load_options(self).validate()


def generation_config(c: Choices, pair: PairSpec | None = None) -> GenerationConfig:
    cfg = GenerationConfig(
        adaptive=c.adaptive, drafter=c.drafter, sampler=c.sampler, stop=c.stop, exact=c.exact
    )
    if c.max_tokens is not None:
        cfg = replace(cfg, max_tokens=c.max_tokens)
    draft_max = c.draft_max
    # A pair's draft_max is the most its adaptive drafting may draft; a fixed K, unless the
    # user gives one, stays the engine's (FIXED_K).
    if draft_max is None and pair is not None and cfg.drafts_adaptively:
        draft_max = pair.draft_max
    p_min = c.p_min if c.p_min is not None else (pair.p_min if pair is not None else cfg.p_min)
    return replace(cfg, draft_max=draft_max, p_min=p_min)


def load_options(c: Choices, pair: PairSpec | None = None) -> LoadOptions:
    opts = LoadOptions()
    n_ctx = c.n_ctx if c.n_ctx is not None else (pair.context if pair is not None else opts.n_ctx)
    n_gpu_layers = c.n_gpu_layers if c.n_gpu_layers is not None else opts.n_gpu_layers
    return replace(
        opts, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=c.n_threads, rpc_servers=c.rpc_servers
    )
