"""Named drafting configurations to compare: `auto`, a kind alone, `KIND:k=5`, ...

Each spec is `DRAFTER[:k=K][:p=P]`: DRAFTER is one of the engine's drafter choices (a kind, or
auto); with k=K the draft length is fixed at K, without it adaptive drafting picks K each round
(up to the run's --draft-max); with p=P the drafter stops before a token it is less than P sure
of (the run's --p-min otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tandem.engine import DRAFT_MAX_LIMIT, DrafterChoice, GenerationConfig, TandemError, drafter_choices


@dataclass(frozen=True)
class BenchSetting:
    name: str
    config: GenerationConfig


def parse_drafters(spec: str | None, default: DrafterChoice) -> set[DrafterChoice]:
    """The drafters a comparison uses (which models it needs), before the pair is known."""
    if not spec:
        return {default}
    return {_drafter(item) for item in (s.strip() for s in spec.split(",")) if item}


def _drafter(item: str) -> DrafterChoice:
    drafter = item.partition(":")[0]
    if drafter in drafter_choices():
        return drafter
    raise TandemError(
        f"--compare: unknown drafter {drafter!r} in {item!r} (use {', '.join(drafter_choices())})"
    )


def parse_settings(spec: str | None, base: GenerationConfig) -> list[BenchSetting]:
    """`base` alone when spec is None; else one setting per comma-separated item."""
    if not spec:
        name = base.drafter + ("" if base.drafts_adaptively else f":k={base.k_max}")
        return [BenchSetting(name, base)]
    settings: list[BenchSetting] = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        options = item.partition(":")[2]
        cfg = replace(base, drafter=_drafter(item), adaptive=True)
        for option in filter(None, options.split(":")):
            cfg = _apply_option(cfg, item, option)
        settings.append(BenchSetting(item, cfg))
    if len({s.name for s in settings}) != len(settings):
        raise TandemError("--compare lists the same setting twice")
    return settings


def _apply_option(cfg: GenerationConfig, item: str, option: str) -> GenerationConfig:
    key, _, value = option.partition("=")
    if key == "k" and value.isdigit() and 0 <= int(value) <= DRAFT_MAX_LIMIT:
        return replace(cfg, adaptive=False, draft_max=int(value))
    if key == "p":
        try:
            p_min = float(value)
        except ValueError:
            p_min = -1.0
        if 0.0 <= p_min < 1.0:
            return replace(cfg, p_min=p_min)
    raise TandemError(
        f"--compare: {item!r}: write options as k=N (0 <= N <= {DRAFT_MAX_LIMIT}) or p=P (0 <= P < 1), "
        "e.g. model:k=8:p=0.2"
    )
