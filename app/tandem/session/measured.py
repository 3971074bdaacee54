"""What a pair gave on this machine: `tandem bench`'s figures, kept per pair of files.

`tandem bench` records, for each pair it measured, each setting's overall speedup against the
target alone (alternated runs), its acceptance and tokens per pass, with the date, the device
and the size of the run; `tandem pairs` and the app's picker then say it next to the pair. A
measurement belongs to the files it ran on: the key holds each file's resolved path and size,
so a file replaced by another quantization is not credited with the old one's figure.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .files import data_dir, is_plausible_time, read_json, update_json

FILE_NAME = "measured.json"
AUTO = "auto"


def measured_file() -> Path:
    return data_dir() / FILE_NAME


@dataclass(frozen=True)
class SettingResult:
    speedup: float  # median of the per-run ratios against the target alone
    acceptance: float
    tokens_per_pass: float


@dataclass(frozen=True)
class Measurement:
    settings: dict[str, SettingResult]
    when: float  # seconds since the epoch
    device: str  # where the target ran ("CPU", "CUDA0 (…)")
    prompts: int
    runs: int
    exact: bool = False
    categories: dict[str, float] = field(default_factory=dict)  # the headline setting's

    @property
    def headline(self) -> tuple[str, SettingResult]:
        """The setting to quote: auto where it ran (what Tandem does by default), else the best."""
        if AUTO in self.settings:
            return AUTO, self.settings[AUTO]
        name = max(self.settings, key=lambda n: self.settings[n].speedup)
        return name, self.settings[name]

    def summary(self) -> str:
        """ "1.12x (auto, bench 2026-11-27 on CPU)"."""
        name, result = self.headline
        day = time.strftime("%Y-%m-%d", time.localtime(self.when))
        return f"{result.speedup:.2f}x ({name}, bench {day} on {self.device})"

    @classmethod
    def from_json(cls, d: object) -> Measurement | None:
        """None for anything this module did not write (a hand edit, another version)."""
        if not isinstance(d, dict):
            return None
        try:
            settings = {
                str(name): SettingResult(
                    *(_finite(s[k]) for k in ("speedup", "acceptance", "tokens_per_pass"))
                )
                for name, s in d["settings"].items()
            }
            categories = {str(c): _finite(v) for c, v in (d.get("categories") or {}).items()}
            m = cls(
                settings,
                _time(d["when"]),
                str(d["device"]),
                int(d["prompts"]),
                int(d["runs"]),
                bool(d.get("exact", False)),
                categories,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return m if settings else None


def _finite(x: Any) -> float:
    v = float(x)
    if not math.isfinite(v) or v < 0:
        raise ValueError(x)
    return v


def _time(x: Any) -> float:
    """A date Tandem wrote (time.time()): one past the year 5000, or not a number, would crash
    the date shown for it (time.localtime), in `tandem pairs` and in the app's picker."""
    if not is_plausible_time(x):
        raise ValueError(x)
    return float(x)


def pair_key(target: Path, draft: Path | None) -> str | None:
    """The files' identity (resolved path and size); None when one cannot be read."""
    try:
        parts = [f"{p.resolve()}:{os.stat(p).st_size}" for p in (target, draft) if p is not None]
    except OSError:
        return None
    return "|".join(parts) if draft is not None else parts[0] + "|"


def record(target: Path, draft: Path | None, m: Measurement, path: Path | None = None) -> None:
    """Keep `m` for this pair of files (replacing an older one). Raises OSError when the file
    cannot be written (a benchmark then says so, and its report is unaffected)."""
    key = pair_key(target, draft)
    if key is None:
        return

    def change(data: Any) -> dict[str, Any]:
        new: dict[str, Any] = dict(data) if isinstance(data, dict) else {}
        new[key] = asdict(m)
        return new

    update_json(path or measured_file(), change)


def lookup(target: Path, draft: Path | None, path: Path | None = None) -> Measurement | None:
    key = pair_key(target, draft)
    if key is None:
        return None
    data = read_json(path or measured_file())
    return Measurement.from_json(data.get(key)) if isinstance(data, dict) else None


def from_report(report: dict[str, Any], device: str, exact: bool) -> Measurement | None:
    """A `tandem bench` report's figures (None if it holds no setting)."""
    settings = {
        name: SettingResult(g["speedup"], g["acceptance_rate"], g["tokens_per_round"])
        for name, g in report.get("overall", {}).items()
    }
    if not settings:
        return None
    partial = Measurement(settings, time.time(), device, len(report.get("prompts", [])), 0, exact)
    headline, _ = partial.headline
    categories = {cat: group[headline]["speedup"] for cat, group in report.get("categories", {}).items()}
    runs = int(report.get("run", {}).get("runs", 0))
    return Measurement(settings, partial.when, device, partial.prompts, runs, exact, categories)
