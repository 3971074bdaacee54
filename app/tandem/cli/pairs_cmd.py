"""`tandem pairs` (the catalog, what is downloaded, what fits) and `tandem pull PAIR`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tandem.catalog import (
    Catalog,
    DownloadCancelled,
    FitVerdict,
    ModelFile,
    PairSpec,
    device_memory,
    load_catalog,
    local_file,
    pair_fit,
    unconfirmed_note,
)
from tandem.catalog.companions import draft_label
from tandem.catalog.hub_cache import hub_cache_dir
from tandem.catalog.spec import BUILTIN_DRAFT
from tandem.catalog.units import format_bytes
from tandem.cli.fetch import download_with_progress
from tandem.cli.options import PairsOptions, PullOptions, pairs_options, pull_options
from tandem.engine import MIN_CONTEXT, TandemError
from tandem.session import measured

# The DRAFT column of a pair drafted by the target's own heads.
BUILTIN_DRAFT_CELL = "built-in (MTP)"


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "pairs",
        help="list the catalog's model pairs, what is downloaded and what fits",
        description="List the curated target + draft pairs (models.toml, plus --catalog / "
        "TANDEM_CATALOG files), and targets that draft with their own heads (MTP): sizes, whether "
        "they are downloaded, and whether they fit in this machine's GPU or memory.",
    )
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.add_argument("--catalog", metavar="PATH", type=Path, help="also read pairs from this TOML file")
    p.add_argument(
        "--ctx", type=int, metavar="N", help="judge the fit at this context size (default: each pair's)"
    )
    p.set_defaults(func=pairs, options=pairs_options)

    q = sub.add_parser(
        "pull",
        help="download a pair's models into the Hugging Face cache",
        description="Download a catalog pair (target and draft) into the Hugging Face cache, "
        "with progress. Interrupted downloads resume where they stopped.",
    )
    q.add_argument("pair", metavar="PAIR", help="a pair name from `tandem pairs`")
    q.add_argument("--catalog", metavar="PATH", type=Path, help="also read pairs from this TOML file")
    q.set_defaults(func=pull, options=pull_options)


# ------------------------------------------------------------------------------ tandem pairs
def _file_json(f: ModelFile) -> dict[str, Any]:
    path = local_file(f)
    return {
        "repo_id": f.repo_id,
        "filename": f.filename,
        "parts": list(f.parts),
        "size_bytes": f.size_bytes,
        "quantization": f.quantization,
        "license": f.license,
        "gated": f.gated,
        "confirmed": f.confirmed,
        "downloaded": path is not None,
        "path": str(path) if path else None,
    }


def _fit_json(v: FitVerdict) -> dict[str, Any]:
    return {
        "verdict": v.verdict,
        "need_bytes": v.need_bytes,
        "available_bytes": v.available_bytes,
        "device": v.device,
    }


def pairs_json(catalog: Catalog, ctx: int | None) -> dict[str, Any]:
    memory, device = device_memory()
    out: list[dict[str, Any]] = []
    for p in catalog.pairs:
        target = _file_json(p.target)
        # A pair drafted by the target's own heads: "draft": "mtp", as the catalog says it.
        draft: dict[str, Any] | str = _file_json(p.draft) if p.draft is not None else BUILTIN_DRAFT
        if isinstance(draft, dict) and p.draft is not None:
            # A trained drafter (EAGLE-3, DFlash) in place of a draft model: its label, else "".
            draft["kind"] = draft_label(p.draft.filename, local_file(p.draft))
        out.append(
            {
                "name": p.name,
                "default": p.name == catalog.default,
                "description": p.description,
                "shines_on": p.shines_on,
                "target": target,
                "draft": draft,
                "draft_max": p.draft_max,
                "p_min": p.p_min,
                "context": p.context,
                "gpu_memory_bytes": p.gpu_memory_bytes,
                "hybrid": p.hybrid,
                "cross_tokenizer": p.cross_tokenizer,
                "total_bytes": p.total_bytes,
                "downloaded": target["downloaded"] and (not isinstance(draft, dict) or draft["downloaded"]),
                "fit": _fit_json(pair_fit(p, ctx)),
                "measured_here": _measured_json(p),
            }
        )
    return {
        "default": catalog.default,
        "sources": [str(s) for s in catalog.sources],
        "device": {"memory_bytes": memory, "description": device},
        "hub_cache": str(hub_cache_dir()),
        "pairs": out,
    }


def _measured(p: PairSpec) -> measured.Measurement | None:
    """What `tandem bench` measured here for the pair's files (on disk), if it did."""
    target = local_file(p.target)
    draft = local_file(p.draft) if p.draft is not None else None
    if target is None or (p.draft is not None and draft is None):
        return None
    return measured.lookup(target, draft)


def _measured_json(p: PairSpec) -> dict[str, Any] | None:
    m = _measured(p)
    if m is None:
        return None
    name, result = m.headline
    return {"setting": name, "speedup": result.speedup, "summary": m.summary(), **asdict(m)}


def _here_cell(p: PairSpec) -> str:
    m = _measured(p)
    if m is None:
        return "–"
    name, result = m.headline
    return f"{result.speedup:.2f}x {name}"


def _downloaded_label(target: bool, draft: bool) -> str:
    if target and draft:
        return "yes"
    if target or draft:
        return "target" if target else "draft"
    return "no"


def _size(p: PairSpec, local: list[tuple[ModelFile, Path | None]]) -> str:
    """The catalog's download size; for a user pair without sizes, what is on disk."""
    if all(f.size_bytes for f, _ in local):
        return format_bytes(p.total_bytes)
    if all(path is not None for _, path in local):
        on_disk = sum(
            path.with_name(part.rsplit("/", 1)[-1]).stat().st_size
            for f, path in local
            if path is not None
            for part in f.parts
        )
        return format_bytes(on_disk)
    return format_bytes(p.total_bytes) + "+" if p.total_bytes else "?"


# What each word of the NOTES column means, printed under the table when a row uses it.
NOTE_MEANINGS = {
    "hybrid": "hybrid: attention mixed with recurrent layers (Qwen3.5's Gated DeltaNet, Nemotron-H's "
    "Mamba-2), whose state is rolled back after a rejected draft (docs/architecture.md)",
    "cross-tokenizer": "cross-tokenizer: the draft has another tokenizer; its text is re-encoded into the "
    "target's tokens each round (the same output, dearer drafting)",
    "unconfirmed": "unconfirmed: a file name was not confirmed on the hub; if it is wrong the download "
    "stops with 'not found'",
}


def pair_notes(p: PairSpec, missing: tuple[ModelFile, ...]) -> list[str]:
    """The NOTES words of a pair: `hybrid`, and `unconfirmed` while a file whose name was never
    confirmed is still to be downloaded (once it is on disk, the name was right)."""
    unconfirmed = any(not f.confirmed for f in missing)
    words = (("hybrid", p.hybrid), ("cross-tokenizer", p.cross_tokenizer), ("unconfirmed", unconfirmed))
    return [word for word, on in words if on]


def _draft_cell(p: PairSpec, path: Path | None) -> str:
    """The DRAFT cell: the draft's name, with its kind when it is a trained drafter."""
    if p.draft is None:
        return BUILTIN_DRAFT_CELL
    label = draft_label(p.draft.filename, path)
    return p.draft.display_name + (f" ({label})" if label else "")


def pairs(args: PairsOptions) -> int:
    if args.ctx is not None and args.ctx < MIN_CONTEXT:
        raise TandemError(f"--ctx must be at least {MIN_CONTEXT} tokens")
    catalog = load_catalog(args.catalog)
    if args.json:
        print(json.dumps(pairs_json(catalog, args.ctx), indent=2))
        return 0
    _, device = device_memory()
    rows = [("PAIR", "TARGET", "DRAFT", "SIZE", "LOCAL", "FIT", "HERE", "NOTES")]
    used: set[str] = set()
    for p in catalog.pairs:
        fit = pair_fit(p, args.ctx)
        name = p.name + (" *" if p.name == catalog.default else "")
        local = [(f, local_file(f)) for f in p.files]
        notes = pair_notes(p, tuple(f for f, path in local if path is None))
        used.update(notes)
        on_disk = local[0][1] is not None, all(path is not None for _, path in local[1:])
        rows.append(
            (
                name,
                p.target.display_name,
                _draft_cell(p, local[1][1] if len(local) > 1 else None),
                _size(p, local),
                _downloaded_label(*on_disk) if p.draft is not None else ("yes" if on_disk[0] else "no"),
                f"{fit.verdict} ({format_bytes(fit.need_bytes)})" if fit.need_bytes else "unknown",
                _here_cell(p),
                ", ".join(notes),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    ctx_note = f" at {args.ctx} tokens of context" if args.ctx else " at each pair's context"
    print(f"\n* default pair. Fit{ctx_note}, for {device}.")
    if any(r[6] != "–" for r in rows[1:]):
        print(
            "HERE: the speedup `tandem bench` measured for the pair on this machine (auto, alternated runs)."
        )
    if any(p.draft is None for p in catalog.pairs):
        print(
            f"{BUILTIN_DRAFT_CELL}: the target drafts with its own multi-token-prediction heads; "
            "there is no draft file."
        )
    for word, meaning in NOTE_MEANINGS.items():
        if word in used:
            print(f"{meaning}.")
    print('Download a pair with `tandem pull PAIR`; use it with `tandem run --pair PAIR "..."`.')
    return 0


# ------------------------------------------------------------------------------- tandem pull
def pull(args: PullOptions) -> int:
    catalog = load_catalog(args.catalog)
    spec = catalog.get(args.pair)
    draft = (
        f"draft {spec.draft.repo_id}/{spec.draft.filename}"
        if spec.draft is not None
        else "drafted by its own heads (MTP: no draft file)"
    )
    print(f"pair {spec.name}: target {spec.target.repo_id}/{spec.target.filename}, {draft}", file=sys.stderr)
    missing = tuple(f for f in spec.files if local_file(f) is None)
    if note := unconfirmed_note(spec, missing):
        print(f"tandem: note: {note}", file=sys.stderr)
    try:
        target, draft_path = download_with_progress(spec, need_draft=spec.draft is not None)
    except DownloadCancelled:
        print(
            f"tandem: download stopped; what was downloaded is kept: run `tandem pull {spec.name}` to resume",
            file=sys.stderr,
        )
        return 130
    print(f"target: {target}" + (f"\ndraft:  {draft_path}" if draft_path is not None else ""))
    print(f'ready: tandem run --pair {spec.name} "your prompt"', file=sys.stderr)
    return 0
