"""A target's companions: the drafters shipped beside it (EAGLE-3, DFlash and DSpark GGUFs, and
its MTP heads in a file of their own; the drafter kinds say what they are: registry.classify).

ggml-org's conversions put them in the target's repository as `eagle3-*.gguf`, `dflash-*.gguf`,
`dspark-*.gguf` (and `mtp-*.gguf`: the target's own heads in a file of their own), so they are
looked for in the target's folder and, for a file in the Hugging Face cache, in every snapshot
of its repository (a companion downloaded later lands in a newer one). A GGUF there is a
companion when its header says it is an EAGLE-3 or DFlash drafter or MTP heads without a
trunk; it is offered when its
header also matches the target's (width, layers: registry.check_file), and listed with the
reason otherwise. Only headers are read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tandem.engine.drafters import registry
from tandem.engine.drafters.spec import Files
from tandem.engine.errors import TandemError
from tandem.engine.files.gguf_file import GGUFInfo, read_gguf


@dataclass(frozen=True)
class Companion:
    path: Path
    kind: str  # the drafter kind that drafts with it (registry.classify)
    label: str  # "EAGLE-3 drafter", "DSpark drafter"...
    problem: str = ""  # why it cannot draft for this target; "" when it can

    @property
    def usable(self) -> bool:
        return not self.problem


Header = Callable[[Path], GGUFInfo]


def companions_of(target: Path, *, header: Header = read_gguf) -> list[Companion]:
    """The trained drafters beside `target` (usable ones first, EAGLE-3 before DFlash), each
    checked against it. Unreadable files are left out; a named companion (`eagle3-...`) that
    is not one, or belongs to another target, is listed with the reason. `header`: how a
    file's header is read (discovery.py's remembers them)."""
    try:
        t_info = header(target)
    except TandemError:
        return []
    if registry.classify(t_info) is not None:
        return []  # a drafter has no companions of its own
    found: list[tuple[Files, Companion]] = []
    for path in _beside(target):
        named = registry.named(path.name)
        try:
            info = header(path)
        except TandemError as exc:
            if named is not None and named.files is not None:
                found.append((named.files, Companion(path, named.name, named.files.label, str(exc))))
            continue
        kind = registry.classify(info)
        if kind is None or kind.files is None:
            if named is not None and named.files is not None:
                problem = f"it is a {info.architecture} model"
                found.append((named.files, Companion(path, named.name, named.files.label, problem)))
            continue
        try:
            label = kind.files.read(info).label
            registry.check_file(t_info, info)
            found.append((kind.files, Companion(path, kind.name, label)))
        except TandemError as exc:
            found.append((kind.files, Companion(path, kind.name, kind.files.label, _reason(str(exc)))))
    # Usable first; then the kind a target drafts with when it has several (Files.rank: a
    # trained drafter before MTP heads in a file of their own), then by name.
    found.sort(key=lambda fc: (not fc[1].usable, fc[0].rank, fc[1].path.name))
    return [c for _, c in found]


def usable_companion(target: Path, kind: str | None = None) -> Companion | None:
    """The companion a target drafts with when none is named: the first usable one (of `kind`
    when given)."""
    return next(iter(usable_companions(target, kind)), None)


def usable_companions(target: Path, kind: str | None = None) -> list[Companion]:
    """The usable companions of `target` (of `kind` when given), in the order they are tried."""
    return [c for c in companions_of(target) if c.usable and kind in (None, c.kind)]


def draft_label(filename: str, path: Path | None = None) -> str:
    """What a catalog pair's draft file is when its name says it is a drafter of its own
    (`eagle3-...`, `dflash-...`, `dspark-...`, `mtp-...`): "EAGLE-3 drafter", "DSpark drafter"
    (from its header once downloaded, else from the name); "" for a draft model. (Curated
    names: the headers of every downloaded draft are not read for `tandem pairs`.)"""
    kind = registry.named(filename)
    if kind is None or kind.files is None:
        return ""
    if path is not None:
        try:
            return registry.read_file(read_gguf(path, check_data=False)).label
        except TandemError:
            pass  # (not what its name says, or unreadable: the preflight will say)
    return kind.files.label


def _beside(target: Path) -> list[Path]:
    """GGUFs in the target's folder, and in the other snapshots of its Hugging Face repository."""
    folder = target.parent
    folders = [folder]
    snapshots = folder.parent
    if snapshots.name == "snapshots" and snapshots.parent.name.startswith("models--"):
        folders += sorted(p for p in snapshots.iterdir() if p.is_dir() and p != folder)
    out: list[Path] = []
    seen = {_real(target)}
    for f in folders:
        try:
            entries = sorted(f.iterdir())
        except OSError:
            continue
        for path in entries:
            if path.suffix.lower() != ".gguf" or path.name.startswith(".") or not path.is_file():
                continue
            real = _real(path)
            if real not in seen:
                seen.add(real)
                out.append(path)
    return out


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _reason(message: str) -> str:
    """The part of a refusal that says why ("it was trained on ..."), without the file's name."""
    for sep in (" for another target: ", "drafter: "):
        if sep in message:
            return message.split(sep, 1)[1].split(". Use the one", 1)[0]
    return message
