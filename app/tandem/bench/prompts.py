"""Benchmark prompt sets: JSONL files of {"category", "prompt"}, or text files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tandem.engine import TandemError
from tandem.shipped import shipped

DEFAULT_PROMPTS = shipped("assets/bench")


@dataclass(frozen=True)
class BenchPrompt:
    category: str
    text: str


def load_prompts(paths: Sequence[Path]) -> list[BenchPrompt]:
    """Prompts from files or folders (every *.jsonl / *.txt inside, sorted).

    JSONL: one object per line with "prompt" and optionally "category" (default: the file's
    name); objects without "prompt" are comments. Text: one prompt per line, "category: text"
    allowed, `#` comments, `\\n` for a newline.
    """
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".txt"))
        elif path.exists():
            files.append(path)
        else:
            raise TandemError(f"prompt file not found: {path}")
    prompts: list[BenchPrompt] = []
    for file in files:
        prompts += _load_file(file)
    if not prompts:
        raise TandemError(f"no prompts in {', '.join(str(p) for p in paths)}")
    return prompts


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TandemError(f"cannot read the prompt file {path}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TandemError(
            f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}): save the file as UTF-8, "
            "e.g. with iconv -t UTF-8"
        ) from None


def _load_file(path: Path) -> list[BenchPrompt]:
    out: list[BenchPrompt] = []
    for lineno, raw in enumerate(_read_text(path).splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if path.suffix == ".jsonl":
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise TandemError(f"{path}:{lineno}: not valid JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise TandemError(f'{path}:{lineno}: expected an object with a "prompt"')
            if "prompt" in obj:
                out.append(BenchPrompt(str(obj.get("category", path.stem)), str(obj["prompt"])))
            continue
        category, sep, text = line.partition(":")
        if sep and category.strip().isidentifier() and len(category) <= 24:
            out.append(BenchPrompt(category.strip(), text.strip().replace("\\n", "\n")))
        else:
            out.append(BenchPrompt(path.stem, line.replace("\\n", "\n")))
    return out
