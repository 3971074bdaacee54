"""What a front-end asks a session for, before anything loads: a pair of model files
(`PairRequest`, resolved into a `PairRef`: the files, the catalog entry they came from, the kind
of drafter the draft file is) and what its drafting needs of them (`DraftNeeds`).
pairs.py resolves and loads them; preflight.py checks them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tandem.engine.config import DrafterChoice
from tandem.engine.drafters import registry
from tandem.engine.drafters.spec import Needs
from tandem.engine.errors import TandemError

if TYPE_CHECKING:
    from tandem.catalog.spec import ModelFile, PairSpec


@dataclass(frozen=True)
class PairRef:
    """A target and (usually) a draft on disk, and the catalog pair they came from, if any. No
    draft: the target drafts alone (its own draft heads, or prompt lookup)."""

    target: Path
    draft: Path | None
    name: str = ""  # the catalog name, when the pair came from the catalog
    spec: PairSpec | None = field(default=None, compare=False)  # its entry: its settings apply
    # How the draft was chosen when the user named none (a companion found beside the target),
    # in words a front-end may print; "" otherwise.
    found: str = field(default="", compare=False)
    # The usable companions found beside the target when none was named, the draft first: they
    # are tried in order when the pair loads, and none of them is needed (load_pair).
    companions: tuple[Path, ...] = field(default=(), compare=False)
    # Why the other companions found there are not used (their headers refused), as notes.
    unused: tuple[str, ...] = field(default=(), compare=False)
    # The draft file's drafter kind when whoever found it knew it (a companion); None: read
    # from its header when first asked (draft_kind).
    known_kind: str | None = field(default=None, compare=False, repr=False)

    @property
    def draft_kind(self) -> str:
        """The drafter kind the draft file is, decided once from its header (the registry's
        classify): "" for a draft model, no draft, or a header that cannot be read (the
        preflight says why)."""
        if self.known_kind is None:
            kind = file_kind(self.draft) if self.draft is not None else ""
            object.__setattr__(self, "known_kind", kind or "")
        assert self.known_kind is not None
        return self.known_kind

    @classmethod
    def from_catalog(cls, spec: PairSpec, target: Path, draft: Path | None) -> PairRef:
        return cls(target, draft, spec.name, spec)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        t = _stem(self.target)
        if self.draft is None:
            return t
        d = _stem(self.draft)
        # "SmolLM2-135M-Instruct.F16 + SmolLM2-135M-Instruct.Q4_1" -> "SmolLM2-135M-Instruct F16 + Q4_1"
        n = 0
        for i, (a, b) in enumerate(zip(t, d, strict=False)):
            if a != b:
                break
            if a in ".-_":
                n = i + 1
        if n >= 8 and n < len(t) and n < len(d):
            return f"{t[: n - 1]} {t[n:]} + {d[n:]}"
        return f"{t} + {d}"

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "draft": str(self.draft or ""), "name": self.name}

    @classmethod
    def from_json(cls, d: Any) -> PairRef | None:
        """A pair the app saved (a target, and a draft unless the target drafts with its own
        heads: ""); None for anything else. The catalog entry is looked up again by
        `with_catalog_entry`."""
        if not isinstance(d, dict):
            return None
        target, draft, name = d.get("target"), d.get("draft"), d.get("name")
        if not (isinstance(target, str) and target and isinstance(draft, str)):
            return None
        return cls(Path(target), Path(draft) if draft else None, name if isinstance(name, str) else "")

    def with_catalog_entry(self, catalog_path: Path | None = None) -> PairRef:
        """The same files with their catalog entry (its settings), when the name is still in
        the catalog; unchanged otherwise (a catalog that cannot be read costs only that)."""
        if not self.name or self.spec is not None:
            return self
        from tandem.catalog import load_catalog

        try:
            spec = load_catalog(catalog_path).get(self.name)
        except TandemError:
            return self
        return PairRef(self.target, self.draft, self.name, spec)


def _stem(path: Path) -> str:
    return path.name.removesuffix(".gguf")


@dataclass(frozen=True)
class PairRequest:
    """The models a user asked for: a catalog pair by name, or a target (and draft) file."""

    pair: str | None = None
    target: Path | None = None
    draft: Path | None = None
    catalog: Path | None = None  # a user catalog read besides the built-in one


# Gets the files of a catalog pair that are not on disk yet, asking the user first if the
# front-end does; raises TandemError (or DownloadCancelled) when they will not be there.
Fetch = Callable[["PairSpec", Sequence["ModelFile"]], None]


@dataclass(frozen=True)
class DraftNeeds:
    """What a generation's drafting asks of the models, known before any is loaded."""

    use_draft: bool = False  # it drafts with a draft model if there is one (a pair brings its draft)
    need_draft: bool = False  # it cannot run without one (the model drafter)
    need_heads: bool = False  # it drafts with the target's own heads, and only with them
    # It drafts with the drafter file of this kind beside the target (a trained drafter), given
    # as the draft file or found beside the target, and only with it; "": not asked.
    need_sidecar: str = ""
    # A draft file that is a drafter of a kind it uses is kept even where a draft model would
    # not be (MTP heads alone, for the heads' kind).
    use_sidecar: bool = False

    @classmethod
    def of(cls, drafters: Iterable[DrafterChoice], *, speculative: bool = True) -> DraftNeeds:
        """The needs of generations with each of `drafters` (one, or a benchmark's several)."""
        choices = set(drafters) if speculative else set()
        needs = {need for choice in choices for need in registry.needs_of(choice)}
        sidecars = [c for c in choices if Needs.SIDECAR in registry.needs_of(c)]
        return cls(
            use_draft=any(registry.uses_draft_file(choice) for choice in choices),
            need_draft=Needs.DRAFT_MODEL in needs,
            need_heads=Needs.HEADS in needs,
            need_sidecar=sidecars[0] if sidecars else "",
            use_sidecar=any(registry.with_files(c) for c in choices),
        )

    @classmethod
    def of_pair(cls, ref: PairRef) -> DraftNeeds:
        """The needs of a front-end that drafts with whatever the pair brings (the app): its
        draft model, or without one the target's own heads."""
        return cls(use_draft=True, need_heads=ref.draft is None)

    def companion_kinds(self) -> set[str] | None:
        """The kinds of drafter files beside a target worth looking for (None: any): the one
        asked for, or the target's own heads in a file of their own."""
        if self.need_sidecar:
            return {self.need_sidecar}
        if self.need_heads:
            return {s.name for s in registry.KINDS if s.needs is Needs.HEADS and s.files is not None}
        return None


def file_kind(path: Path) -> str | None:
    """The drafter kind a file is from its header ("": a model); None when the header cannot
    be read (the preflight says what is wrong with it)."""
    from tandem.engine.files.gguf_file import read_gguf

    try:
        s = registry.classify(read_gguf(path, check_data=False))
    except TandemError:
        return None
    return s.name if s is not None else ""
