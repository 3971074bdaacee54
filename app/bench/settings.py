"""Named drafting configurations to compare: `model:k=5`, `auto`, `lookup`, ...

Each spec is `DRAFTER[:k=K]`: DRAFTER is model, lookup or auto; with k=K the draft length is
fixed at K, without it adaptive drafting picks K each round (up to the run's --draft-max).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from app.engine import DRAFT_MAX_LIMIT, DRAFTERS, GenerationConfig, TandemError


@dataclass(frozen=True)
class BenchSetting:
    name: str
    config: GenerationConfig

    @property
    def uses_draft_model(self) -> bool:
        return self.config.drafter in ("model", "auto")


def parse_settings(spec: str | None, base: GenerationConfig) -> list[BenchSetting]:
    """`base` alone when spec is None; else one setting per comma-separated item."""
    if not spec:
        name = base.drafter + ("" if base.adaptive else f":k={base.draft_max}")
        return [BenchSetting(name, base)]
    settings: list[BenchSetting] = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        drafter, _, option = item.partition(":")
        if drafter not in DRAFTERS:
            raise TandemError(
                f"--compare: unknown drafter {drafter!r} in {item!r} (use {', '.join(DRAFTERS)})"
            )
        cfg = replace(base, drafter=drafter, adaptive=True)  # type: ignore[arg-type]
        if option:
            key, _, value = option.partition("=")
            if key != "k" or not value.isdigit() or not 0 <= int(value) <= DRAFT_MAX_LIMIT:
                raise TandemError(
                    f"--compare: {item!r}: write the option as k=N, 0 <= N <= {DRAFT_MAX_LIMIT}"
                )
            cfg = replace(cfg, adaptive=False, draft_max=int(value))
        settings.append(BenchSetting(item, cfg))
    if len({s.name for s in settings}) != len(settings):
        raise TandemError("--compare lists the same setting twice")
    return settings
