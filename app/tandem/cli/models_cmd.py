"""`tandem models [PATH...]`: GGUF files already on this machine and which can draft for which."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tandem.catalog import Companion, LocalGGUF, companions_for, cross_tokenizer, drafts_for
from tandem.catalog.discovery import lm_studio_dirs, ollama_dirs, scan
from tandem.catalog.hub_cache import hub_cache_dir
from tandem.catalog.units import format_bytes, format_params
from tandem.cli.options import ModelsOptions, models_options
from tandem.engine import describe_state, drafter_of_own_heads, rollback_of, state_kind


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "models",
        help="list GGUF files on this machine and which can draft for which",
        description="Find GGUF models in the Hugging Face cache, LM Studio's and Ollama's model "
        "folders and the paths you give (files or folders), read their metadata (no weights "
        "are loaded) and show which ones can draft for which: smaller, with the same tokenizer or one "
        "they draft across (marked *).",
    )
    p.add_argument(
        "paths", nargs="*", metavar="PATH", type=Path, help="more GGUF files or folders to look at"
    )
    p.add_argument("--json", action="store_true", help="print the models and their drafts as JSON")
    p.set_defaults(func=models, options=models_options)


def _json(m: LocalGGUF, drafts: list[LocalGGUF], companions: list[Companion]) -> dict[str, Any]:
    return {
        "path": str(m.path),
        "source": m.source,
        "name": m.name,
        "architecture": m.architecture,
        # attention / hybrid / recurrent, and how a rejected draft is undone on it
        "state": state_kind(m.architecture),
        "rollback": rollback_of(m.architecture),
        "size_bytes": m.size_bytes,
        "quantization": m.quantization,
        "n_params": m.n_params,
        "n_vocab": m.n_vocab,
        "context_length": m.context_length,
        "has_chat_template": m.has_chat_template,
        # Multi-token-prediction blocks: > 0, it drafts for itself (--drafter mtp, or auto alone).
        "mtp_layers": m.mtp_layers,
        # A trained drafter (EAGLE-3, DFlash), not a model to chat with: its label, else "".
        "sidecar": m.sidecar,
        "drafts": [str(d.path) for d in drafts],
        # Of those, the drafts of another tokenizer (they draft across tokenizers).
        "cross_tokenizer_drafts": [str(d.path) for d in drafts if cross_tokenizer(m, d)],
        # Trained drafters found beside it, each with why it cannot draft for it ("": it can).
        "companions": [
            {"path": str(c.path), "kind": c.kind, "label": c.label, "usable": c.usable, "problem": c.problem}
            for c in companions
        ],
    }


def _drafts_cell(m: LocalGGUF, numbers: list[str], trained: list[str], target_of: str) -> str:
    """The DRAFTS cell: "built-in" for the model's own heads, the trained drafters beside it
    ("3 (EAGLE-3)"), then the numbers of the draft models (`*`: of another tokenizer); a trained
    drafter's own row says whose it is ("for 1")."""
    if m.sidecar:
        return f"for {target_of}" if target_of else "-"
    return ", ".join([*(["built-in"] if m.mtp_layers else []), *trained, *numbers]) or "-"


def _short(label: str) -> str:
    return label.removesuffix(" drafter").removesuffix(" heads")


def models(args: ModelsOptions) -> int:
    found, skipped = scan(args.paths)
    # Largest first: targets at the top, their drafts below.
    found.sort(key=lambda m: (-m.n_params, -m.size_bytes, m.name))
    drafts = {m.path: drafts_for(m, found) for m in found}
    companions = {m.path: companions_for(m) for m in found}
    given = {p.expanduser().resolve() for p in args.paths}
    problems = [
        s for s in skipped if s.path.resolve() in given or any(g in s.path.resolve().parents for g in given)
    ]
    if args.json:
        out = {
            "models": [_json(m, drafts[m.path], companions[m.path]) for m in found],
            "skipped": [{"path": str(s.path), "reason": s.reason} for s in skipped],
            "searched": {
                "hf-cache": str(hub_cache_dir()),
                "lm-studio": [str(d) for d in lm_studio_dirs()],
                "ollama": [str(d) for d in ollama_dirs()],
            },
        }
        print(json.dumps(out, indent=2))
        return 0
    for s in problems:
        print(f"note: skipped {s.path}: {s.reason}", file=sys.stderr)
    if not found:
        print(
            f"No GGUF models found (looked in {hub_cache_dir()}, LM Studio's and Ollama's folders). "
            "Give files or folders as arguments, or download a pair with `tandem pull PAIR`."
        )
        return 0
    index = {m.path: i for i, m in enumerate(found, 1)}
    by_real = {_real(m.path): i for m, i in ((m, index[m.path]) for m in found)}
    target_of: dict[Path, list[str]] = {}
    trained: dict[Path, list[str]] = {}
    for m in found:
        for c in companions[m.path]:
            if not c.usable:
                continue
            i = by_real.get(_real(c.path))
            trained[m.path] = [*trained.get(m.path, []), f"{i if i else c.path.name} ({_short(c.label)})"]
            target_of.setdefault(_real(c.path), []).append(str(index[m.path]))
    rows = [("#", "SOURCE", "NAME", "ARCH", "PARAMS", "QUANT", "SIZE", "DRAFTS")]
    for m in found:
        rows.append(
            (
                str(index[m.path]),
                m.source,
                m.name,
                m.architecture
                + (
                    f" ({m.sidecar or describe_state(m.architecture)})"
                    if m.sidecar or describe_state(m.architecture)
                    else ""
                ),
                format_params(m.n_params),
                m.quantization,
                format_bytes(m.size_bytes),
                _drafts_cell(
                    m,
                    [f"{index[d.path]}{'*' * cross_tokenizer(m, d)}" for d in drafts[m.path]],
                    trained.get(m.path, []),
                    ", ".join(target_of.get(_real(m.path), [])),
                ),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    print("\nDRAFTS: models with fewer parameters (or fewer bits), the same tokenizer first, smallest first.")
    if any(cross_tokenizer(m, d) for m in found for d in drafts[m.path]):
        print(
            "*: another tokenizer: it drafts across tokenizers, its text re-encoded into the target's "
            "tokens each round\n   (the same output; drafting costs more than with a draft of the same "
            "tokenizer)."
        )
    heads = [m for m in found if m.mtp_layers]
    if heads:
        print(
            "built-in: the model's own draft heads (multi-token prediction layers): it drafts for "
            f"itself, e.g. tandem run --target {shlex.quote(str(heads[0].path))} "
            f"--drafter {drafter_of_own_heads()}"
        )
    with_trained = [m for m in found if trained.get(m.path)]
    if with_trained:
        print(
            "EAGLE-3, DFlash, DSpark, MTP: drafters shipped beside their target (its folder or "
            "repository);\n"
            "the target alone finds them, e.g. tandem run --target "
            f'{shlex.quote(str(with_trained[0].path))} "..."'
        )
    if any(state_kind(m.architecture) != "attention" for m in found if not m.sidecar):
        print(
            "Hybrid and recurrent models work as target and draft: llama.cpp keeps snapshots of the "
            "state for some,\nthe others are checkpointed each drafting round (dearer: shorter drafts)."
        )
    runnable = [m for m in found if drafts[m.path] and not m.sidecar]
    if runnable:
        # The largest target with a draft of its own tokenizer, else the largest at all.
        t = next((m for m in runnable if not cross_tokenizer(m, drafts[m.path][0])), runnable[0])
        d = drafts[t.path][0]
        print("Try the largest pair:")
        print(f"  tandem run --target {shlex.quote(str(t.path))} \\")
        print(f'             --draft {shlex.quote(str(d.path))} "Hello"')
    return 0


def _real(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path
