"""What the pair picker shows, gathered without Textual (it runs in worker threads).

* `catalog_rows()`: every catalog pair with its download state and memory verdict.
* `PairDownload`: progress of a pair's models (all parts of split files) from the catalog's
  per-file callbacks: two, or one for a target that drafts with its own heads (MTP).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tandem.catalog import (
    Catalog,
    Companion,
    DownloadProgress,
    FitVerdict,
    LocalGGUF,
    ModelFile,
    PairSpec,
    companions_for,
    cross_tokenizer,
    discover_ggufs,
    drafts_for,
    load_catalog,
    local_file,
    pair_fit,
)
from tandem.catalog.companions import draft_label
from tandem.catalog.units import format_bytes
from tandem.engine import TandemError
from tandem.session import measured
from tandem.session.measured import Measurement


@dataclass(frozen=True)
class CatalogRow:
    spec: PairSpec
    target_path: Path | None  # complete in the HF cache
    draft_path: Path | None  # (None also for a pair drafted by its target's own heads)
    fit: FitVerdict | None
    draft_kind: str = ""  # a trained drafter in place of a draft model: "EAGLE-3 drafter"
    measured: Measurement | None = None  # what `tandem bench` measured for these files here

    @property
    def downloaded(self) -> bool:
        return self.target_path is not None and (self.draft_path is not None or self.spec.draft is None)

    @property
    def state(self) -> str:
        if self.downloaded:
            return "✓ on disk"
        if self.target_path is not None:
            return "target only"
        if self.draft_path is not None:
            return "draft only"
        return "not downloaded"

    @property
    def missing(self) -> tuple[ModelFile, ...]:
        """The pair's files not (completely) in the cache yet."""
        paths = (self.target_path, self.draft_path)
        return tuple(f for f, path in zip(self.spec.files, paths, strict=False) if not path)

    @property
    def missing_bytes(self) -> int:
        return sum(f.size_bytes for f in self.missing)


@dataclass(frozen=True)
class CatalogListing:
    catalog: Catalog | None
    rows: list[CatalogRow]
    error: str = ""  # a CatalogError's sentence (a broken user catalog), shown in place of the list


def catalog_rows(n_ctx: int | None = None) -> CatalogListing:
    try:
        catalog = load_catalog()
    except TandemError as exc:
        return CatalogListing(None, [], str(exc))
    rows = []
    for spec in catalog.pairs:
        try:
            fit: FitVerdict | None = pair_fit(spec, n_ctx)
        except (TandemError, OSError):
            fit = None
        draft = local_file(spec.draft) if spec.draft is not None else None
        kind = draft_label(spec.draft.filename, draft) if spec.draft is not None else ""
        target = local_file(spec.target)
        here = measured.lookup(target, draft) if target is not None else None
        rows.append(CatalogRow(spec, target, draft, fit, kind, here))
    return CatalogListing(catalog, rows)


@dataclass(frozen=True)
class DiskModel:
    gguf: LocalGGUF
    drafts: tuple[LocalGGUF, ...]  # the models on disk that can draft for this one
    # Of those, the ones of another tokenizer: they draft across tokenizers (their paths).
    cross: frozenset[Path] = frozenset()
    # The trained drafters shipped beside it that can draft for it (EAGLE-3, DFlash).
    companions: tuple[Companion, ...] = ()
    # What `tandem bench` measured here with each draft file (None: drafting alone).
    measured: dict[Path | None, Measurement] = field(default_factory=dict)

    def is_cross(self, draft: LocalGGUF) -> bool:
        return draft.path in self.cross

    @property
    def drafts_alone(self) -> bool:
        """It has its own draft heads (multi-token prediction): it can be loaded alone."""
        return self.gguf.mtp_layers > 0


def disk_models() -> list[DiskModel]:
    """GGUFs already on this machine, each with the ones that can draft for it. A trained
    drafter is listed under its target (as a companion), not as a model of its own."""
    found = discover_ggufs()
    out = []
    for g in found:
        if g.sidecar:
            continue
        drafts = drafts_for(g, found)
        cross = frozenset(d.path for d in drafts if cross_tokenizer(g, d))
        usable = tuple(c for c in companions_for(g) if c.usable)
        here = {
            draft: m
            for draft in (None, *(d.path for d in drafts), *(c.path for c in usable))
            if (m := measured.lookup(g.path, draft)) is not None
        }
        out.append(DiskModel(g, tuple(drafts), cross, usable, here))
    return out


def describe_file(f: ModelFile) -> str:
    size = format_bytes(f.size_bytes) if f.size_bytes else "size unknown"
    gated = " · gated: needs HF_TOKEN" if f.gated else ""
    lic = f" · {f.license}" if f.license else ""
    return f"{f.repo_id}/{f.filename} · {f.quantization} · {size}{lic}{gated}"


@dataclass
class FileProgress:
    done_bytes: int = 0
    total: int = 0
    bytes_per_s: float = 0.0
    eta_s: float | None = None
    done: bool = False


@dataclass
class PairDownload:
    """A pair being downloaded: cancel it with `cancel.set()` (the partial files stay and the
    next download of the pair resumes them)."""

    spec: PairSpec
    cancel: threading.Event = field(default_factory=threading.Event)
    parts: dict[str, tuple[str, DownloadProgress]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def role_of(self, filename: str) -> str:
        return "target" if filename in self.spec.target.parts else "draft"

    def update(self, p: DownloadProgress) -> None:
        self.parts[p.filename] = (self.role_of(p.filename), p)

    def progress(self, role: str) -> FileProgress:
        f = self.spec.target if role == "target" else self.spec.draft
        if f is None:  # a pair drafted by its target's own heads: no draft file to fetch
            return FileProgress(done=True)
        mine = [p for r, p in self.parts.values() if r == role]
        out = FileProgress()
        out.done_bytes = sum(p.downloaded for p in mine)
        known_total = sum(p.total for p in mine)
        out.total = max(f.size_bytes, known_total) if len(mine) < len(f.parts) else known_total
        out.bytes_per_s = sum(p.bytes_per_s for p in mine if not p.done)
        left = out.total - out.done_bytes
        out.eta_s = left / out.bytes_per_s if out.bytes_per_s > 0 and left > 0 else None
        out.done = len(mine) == len(f.parts) and all(p.done for p in mine)
        return out


def progress_text(p: FileProgress) -> str:
    if p.done:
        return f"✓ {format_bytes(p.total or p.done_bytes)}"
    if not p.total and not p.done_bytes:
        return "waiting"
    total = format_bytes(p.total) if p.total else "?"
    text = f"{format_bytes(p.done_bytes)} of {total}"
    if p.bytes_per_s > 0:
        text += f" · {format_bytes(p.bytes_per_s)}/s"
    if p.eta_s is not None:
        m, s = divmod(int(p.eta_s), 60)
        text += f" · {m}:{s:02d} left"
    return text
