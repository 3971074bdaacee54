"""A target's companions: the drafters shipped beside it (EAGLE-3, DFlash and DSpark GGUFs, and
its MTP heads in a file of their own; engine/sidecar.py says what they are).

ggml-org's conversions put them in the target's repository as `eagle3-*.gguf`, `dflash-*.gguf`,
`dspark-*.gguf` (and `mtp-*.gguf`: the target's own heads in a file of their own), so they are
looked for in the target's folder and, for a file in the Hugging Face cache, in every snapshot
of its repository (a companion downloaded later lands in a newer one). A GGUF there is a
companion when its header says it is an EAGLE-3 or DFlash drafter or MTP heads without a
trunk; it is offered when its
header also matches the target's (width, layers: sidecar.check_sidecar), and listed with the
reason otherwise. Only headers are read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tandem.engine.errors import TandemError
from tandem.engine.gguf_file import GGUFInfo, read_gguf
from tandem.engine.sidecar import DFLASH, EAGLE3, MTP, check_sidecar, kind_from_name, read_facts, sidecar_kind

# Which kind is offered first when a target has several (auto then drafts with that one):
# EAGLE-3's single layer is the cheapest step, DFlash's block the cheapest pass; MTP heads in a
# file of their own are the target's own heads.
PREFERENCE = (EAGLE3, DFLASH, MTP)

KIND_LABELS = {EAGLE3: "EAGLE-3 drafter", DFLASH: "DFlash drafter", MTP: "MTP heads"}


@dataclass(frozen=True)
class Companion:
    path: Path
    kind: str  # the drafter kind that drafts with it: "eagle3", "dflash", "mtp" (heads alone)
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
    if sidecar_kind(t_info) is not None:
        return []  # a drafter has no companions of its own
    found: list[Companion] = []
    for path in _beside(target):
        named = kind_from_name(path.name)
        try:
            info = header(path)
        except TandemError as exc:
            if named is not None:
                found.append(Companion(path, named, KIND_LABELS[named], str(exc)))
            continue
        kind = sidecar_kind(info)
        if kind is None:
            if named is not None:
                found.append(Companion(path, named, KIND_LABELS[named], f"it is a {info.architecture} model"))
            continue
        try:
            label = read_facts(info).label
            check_sidecar(t_info, info)
            found.append(Companion(path, kind, label))
        except TandemError as exc:
            found.append(Companion(path, kind, KIND_LABELS[kind], _reason(str(exc))))
    order = {k: i for i, k in enumerate(PREFERENCE)}
    return sorted(found, key=lambda c: (not c.usable, order.get(c.kind, len(order)), c.path.name))


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
    kind = kind_from_name(filename)
    if kind is None:
        return ""
    if path is not None:
        try:
            return read_facts(read_gguf(path, check_data=False)).label
        except TandemError:
            pass  # (not what its name says, or unreadable: the preflight will say)
    return KIND_LABELS[kind]


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
