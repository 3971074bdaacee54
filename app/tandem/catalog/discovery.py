"""GGUF files already on this machine, and which of them can draft for which.

Looked for in:
* the Hugging Face cache (HF_HUB_CACHE / HF_HOME / ~/.cache/huggingface/hub): every GGUF in
  `models--*/snapshots/*/`, named `owner/repo/file.gguf`;
* LM Studio's models folder: `~/.lmstudio/models` (or the home named in
  `~/.lmstudio-home-pointer`, which LM Studio writes when its home is moved, plus the
  `downloadsFolder` of `~/.lmstudio/settings.json` when it is set), and the older
  `~/.cache/lm-studio/models`; files are `publisher/repo/file.gguf`;
* Ollama's store ($OLLAMA_MODELS when set, else ~/.ollama/models and the Linux service's
  /usr/share/ollama/.ollama/models): each manifest under `manifests/<registry>/<namespace>/
  <model>/<tag>` lists layers; the `application/vnd.ollama.image.model` layer is a GGUF blob
  at `blobs/sha256-<hex>`; named like Ollama does (`llama3.2:1b`);
* any files or folders the caller names.

Only headers are read (read_gguf), never weights. Files that are not readable GGUFs (partial
downloads, other formats) are skipped; the parts after the first of a split model are folded
into the first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tandem.engine.drafters import registry
from tandem.engine.errors import ModelFileError, TandemError
from tandem.engine.files.compat import compatibility_problems, cross_problems
from tandem.engine.files.gguf_file import GGUFInfo, read_gguf
from tandem.engine.files.small_files import read_small_text

from .companions import Companion, companions_of
from .hub_cache import hub_cache_dir
from .spec import split_info, split_parts

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_REGISTRY = "registry.ollama.ai"
SAME_MODEL_SIZE_RATIO = 0.9
# A layer's digest names its blob file: only a sha256 can (`sha256:<hex>`, or `sha256-<hex>`, the
# file's own spelling, which the scan has always accepted). Anything else could be a path.
_OLLAMA_DIGEST = re.compile(r"sha256[:-]([0-9a-f]{64})")
_MAX_SCAN_DEPTH = 6  # LM Studio and user folders: publisher/repo/file is depth 3


@dataclass(frozen=True)
class LocalGGUF:
    path: Path  # the file to hand to llama.cpp (the first part of a split model)
    source: str  # "hf-cache" | "lm-studio" | "ollama" | "path"
    name: str
    architecture: str
    size_bytes: int  # all parts together
    quantization: str
    n_params: int
    n_vocab: int
    context_length: int | None
    has_chat_template: bool
    # Multi-token-prediction blocks (heads.py): > 0, the model drafts for itself, alone.
    mtp_layers: int = 0
    # A trained drafter (EAGLE-3, DFlash: "EAGLE-3 drafter"), not a model: it drafts beside the
    # target it was trained for (companions.py), never on its own. "" for a model.
    sidecar: str = ""


@dataclass(frozen=True)
class SkippedFile:
    path: Path
    reason: str


def discover_ggufs(extra_paths: Sequence[Path] = ()) -> list[LocalGGUF]:
    """Every readable GGUF found in the known places and in `extra_paths` (files or folders)."""
    return scan(extra_paths)[0]


def scan(extra_paths: Sequence[Path] = ()) -> tuple[list[LocalGGUF], list[SkippedFile]]:
    """discover_ggufs, plus the files that were found but could not be read (and why)."""
    found: list[LocalGGUF] = []
    skipped: list[SkippedFile] = []
    seen: set[Path] = set()
    candidates: list[tuple[Path, str, str]] = [
        *_hf_cache_files(hub_cache_dir()),
        *_lm_studio_files(),
        *_ollama_files(),
    ]
    for p in extra_paths:
        p = Path(p).expanduser()
        if p.is_dir():
            candidates += [(f, "path", str(f.relative_to(p))) for f in _walk_ggufs(p)]
        else:
            candidates.append((p, "path", p.name))
    for path, source, name in candidates:
        try:
            real = path.resolve()
        except OSError:
            real = path
        if real in seen:
            continue  # the same bytes reached twice (two snapshots, a link, a repeated path)
        seen.add(real)
        info = split_info(path.name)
        if info and info[0] != 1:
            continue  # later parts are counted with the first one
        try:
            found.append(_describe(path, source, name))
        except ModelFileError as exc:
            skipped.append(SkippedFile(path, str(exc)))
    return found, skipped


def drafts_for(target: LocalGGUF, candidates: Sequence[LocalGGUF]) -> list[LocalGGUF]:
    """Candidates that can draft for `target`: smaller (fewer parameters, or as many but fewer
    bytes: a lower-bit quantization), with the same tokenizer (the engine's own check) or one
    it can draft across (engine/drafters/cross.py; `cross_tokenizer` tells which). The same
    tokenizer first, as it drafts for less; each group smallest first: the cheaper the draft,
    the more it can guess per target pass. A trained drafter (EAGLE-3, DFlash) drafts for its
    own target only (companions_for)."""
    if target.sidecar:
        return []
    out: list[tuple[bool, LocalGGUF]] = []
    for c in candidates:
        if c.path == target.path or c.sidecar or not _smaller(c, target):
            continue
        verdict = _tokenizers(target.path, c.path)
        if verdict is not None:
            out.append((verdict, c))
    return [c for _, c in sorted(out, key=lambda vc: (vc[0], vc[1].size_bytes, vc[1].name))]


def cross_tokenizer(target: LocalGGUF, draft: LocalGGUF) -> bool:
    """Whether `draft` drafts for `target` across tokenizers (its text re-encoded each round)."""
    return _tokenizers(target.path, draft.path) is True


def _tokenizers(target: Path, draft: Path) -> bool | None:
    """How the draft's tokenizer relates to the target's: False the same, True another one it
    can draft across, None neither (or a file that cannot be read)."""
    try:
        t_info, d_info = _header(target), _header(draft)
    except ModelFileError:
        return None
    if not compatibility_problems(t_info, d_info):
        return False
    return None if cross_problems(t_info, d_info) else True


def companions_for(target: LocalGGUF) -> list[Companion]:
    """The trained drafters shipped beside `target` (companions.py), usable ones first."""
    if target.sidecar:
        return []
    return companions_of(target.path, header=_header)


def _smaller(c: LocalGGUF, t: LocalGGUF) -> bool:
    if c.n_params and t.n_params and c.n_params != t.n_params:
        return c.n_params < t.n_params
    # The same model: only a clearly lower-bit quantization is worth drafting with (a copy
    # or a near-identical quantization costs as much as the target itself).
    return c.size_bytes < t.size_bytes * SAME_MODEL_SIZE_RATIO


@lru_cache(maxsize=64)
def _cached_header(path: Path, size: int, mtime_ns: int) -> GGUFInfo:
    return read_gguf(path)


def _header(path: Path) -> GGUFInfo:
    """read_gguf, remembered while the file is unchanged: the compatibility matrix of `tandem
    models` compares every file with every other one."""
    try:
        st = path.stat()
    except OSError as exc:
        raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return _cached_header(path, st.st_size, st.st_mtime_ns)


def _describe(path: Path, source: str, name: str) -> LocalGGUF:
    info = _header(path)
    size, n_params = info.file_size, info.n_params
    if info.split_count > 1:
        for part in split_parts(path.name)[1:]:
            part_path = path.with_name(part)
            if not part_path.is_file():
                raise ModelFileError(f"{path.name} is part 1 of {info.split_count} but {part} is missing")
            part_info = _header(part_path)
            size += part_info.file_size
            n_params += part_info.n_params
    template = info.chat_template
    sidecar = ""
    if (kind := registry.classify(info)) is not None and kind.files is not None:
        try:
            sidecar = kind.files.read(info).label
        except TandemError:
            sidecar = kind.files.label
    return LocalGGUF(
        path=path,
        source=source,
        name=name,
        architecture=info.architecture,
        size_bytes=size,
        quantization=info.quantization,
        n_params=n_params,
        n_vocab=len(info.tokens),
        context_length=info.context_length,
        has_chat_template=bool(template),
        mtp_layers=info.mtp_layers,
        sidecar=sidecar,
    )


# ----------------------------------------------------------------------------- the places
def _walk_ggufs(root: Path, depth: int = _MAX_SCAN_DEPTH) -> Iterator[Path]:
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if depth > 0:
                yield from _walk_ggufs(entry, depth - 1)
        elif entry.suffix.lower() == ".gguf" and entry.is_file():
            yield entry


def _hf_cache_files(cache: Path) -> Iterator[tuple[Path, str, str]]:
    try:
        repos = sorted(cache.glob("models--*"))
    except OSError:
        return
    for repo in repos:
        repo_id = repo.name.removeprefix("models--").replace("--", "/", 1)
        snapshots = repo / "snapshots"
        if not snapshots.is_dir():
            continue
        # Newest snapshot first, so a file present in several commits is named from the newest.
        for commit in sorted(snapshots.iterdir(), key=_mtime, reverse=True):
            for f in _walk_ggufs(commit):
                yield f, "hf-cache", f"{repo_id}/{f.relative_to(commit).as_posix()}"


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0


# LM Studio's settings and pointer, Ollama's manifests: a few KiB each.
_SMALL_FILE = 1 << 20


def lm_studio_dirs() -> list[Path]:
    home = Path.home()
    dirs: list[Path] = []
    pointer = home / ".lmstudio-home-pointer"
    # (read as files of another app: no pipe, link or device, a bounded size: small_files.py)
    with contextlib.suppress(OSError, ValueError):
        dirs.append(Path(read_small_text(pointer, _SMALL_FILE).strip()).expanduser() / "models")
    dirs.append(home / ".lmstudio" / "models")
    try:
        settings = json.loads(read_small_text(home / ".lmstudio" / "settings.json", _SMALL_FILE))
        folder = settings.get("downloadsFolder") if isinstance(settings, dict) else None
        if isinstance(folder, str) and folder:
            dirs.append(Path(folder).expanduser())
    except (OSError, ValueError):
        pass
    dirs.append(home / ".cache" / "lm-studio" / "models")
    return _unique_dirs(dirs)


def _lm_studio_files() -> Iterator[tuple[Path, str, str]]:
    for root in lm_studio_dirs():
        for f in _walk_ggufs(root):
            yield f, "lm-studio", f.relative_to(root).as_posix()


def ollama_dirs() -> list[Path]:
    # OLLAMA_MODELS, when set, is where Ollama keeps its store (and the only place it looks).
    if os.environ.get("OLLAMA_MODELS"):
        return _unique_dirs([Path(os.environ["OLLAMA_MODELS"]).expanduser()])
    return _unique_dirs([Path.home() / ".ollama" / "models", Path("/usr/share/ollama/.ollama/models")])


def _ollama_files() -> Iterator[tuple[Path, str, str]]:
    for root in ollama_dirs():
        manifests = root / "manifests"
        if not manifests.is_dir():
            continue
        for manifest in sorted(p for p in manifests.rglob("*") if p.is_file()):
            rel = manifest.relative_to(manifests).parts  # registry, namespace, model, tag
            if len(rel) != 4:
                continue
            try:
                layers = json.loads(read_small_text(manifest, _SMALL_FILE)).get("layers", [])
            except (OSError, ValueError, AttributeError):
                continue
            for layer in layers if isinstance(layers, list) else []:
                if not isinstance(layer, dict) or layer.get("mediaType") != OLLAMA_MODEL_LAYER:
                    continue
                digest = _OLLAMA_DIGEST.fullmatch(str(layer.get("digest", "")))
                if digest is None:
                    continue  # not a blob Ollama could have written: no model of ours
                blob = root / "blobs" / f"sha256-{digest.group(1)}"
                if blob.is_file():
                    yield blob, "ollama", _ollama_name(*rel)


def _ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """Ollama's own short names: `llama3.2:1b`, `user/model:tag`, `host/ns/model:tag`."""
    if registry == OLLAMA_DEFAULT_REGISTRY:
        return f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
    return f"{registry}/{namespace}/{model}:{tag}"


def _unique_dirs(dirs: Iterable[Path]) -> list[Path]:
    out: list[Path] = []
    for d in dirs:
        if d.is_dir() and all(not _same(d, o) for o in out):
            out.append(d)
    return out


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b
