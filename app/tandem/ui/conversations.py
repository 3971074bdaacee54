"""Conversations: what was said, which tokens came from where, saved as one JSON file each.

An answer keeps its token origins as run-length spans of characters, so a reopened chat shows
the same colours it had while streaming. Files are replaced atomically on every save.

A file is read only if every field has the type and range Tandem writes (a hand edit, another
tool or a disk error can put anything there): anything else would crash the app later, when
the chat is listed, drawn or saved again. Such a file is set aside, never used half-read.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

from tandem.engine import ChatMessage, Origin, read_small_text
from tandem.session.files import is_plausible_time, write_json
from tandem.ui.storage import MAX_CHAT_BYTES

Role = Literal["user", "assistant"]
_ORIGIN_CODE = {Origin.DRAFT: "d", Origin.TARGET: "t", Origin.BONUS: "b"}
_CODE_ORIGIN = {v: k for k, v in _ORIGIN_CODE.items()}
TITLE_CHARS = 60


def _is_text(v: object) -> TypeGuard[str]:
    """A str that can be written back: json.loads accepts lone surrogates ("\\ud800"), which
    would make every later save of the chat fail."""
    if not isinstance(v, str):
        return False
    if v.isascii():
        return True
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _is_count(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_amount(v: object) -> bool:
    """A finite number >= 0 (json.loads reads Infinity and NaN; an int may be any size)."""
    if isinstance(v, float):
        return math.isfinite(v) and v >= 0
    return _is_count(v)


def _is_timestamp(v: object) -> bool:
    """Saved times are shown as dates (time.localtime): only one Tandem could have written."""
    return is_plausible_time(v)


def _is_scalar(v: object) -> bool:
    return v is None or isinstance(v, int) or (isinstance(v, float) and math.isfinite(v)) or _is_text(v)


# What stats_summary (session.py) writes, and what answer_footer formats.
_STATS_FIELDS: dict[str, Callable[[object], bool]] = {
    "mode": _is_text,
    "stop_reason": _is_text,
    "generated": _is_count,
    "prefill_tokens": _is_count,
    "tokens_per_s": _is_amount,
    "acceptance": _is_amount,
    "tokens_per_round": _is_amount,
    "reasoning_tokens": _is_count,
}


def _valid_spans(spans: object) -> bool:
    return isinstance(spans, list) and all(
        isinstance(s, list)
        and len(s) == 2
        and _is_count(s[0])
        and isinstance(s[1], str)
        and s[1] in _CODE_ORIGIN
        for s in spans
    )


def _valid_stats(stats: object) -> bool:
    # Fields of later versions are kept if they are plain values.
    return isinstance(stats, dict) and all(
        _is_text(k) and _STATS_FIELDS.get(k, _is_scalar)(v) for k, v in stats.items()
    )


def _safe_name(conv_id: str) -> str:
    """The file name (without .json) a conversation id is saved under."""
    return "".join(c for c in conv_id if c.isalnum() or c in "-_")


def encode_spans(pieces: Iterable[tuple[str, Origin]]) -> list[list[Any]]:
    """[(text, origin), ...] -> [[n_chars, code], ...] with equal neighbours merged."""
    out: list[list[Any]] = []
    for text, origin in pieces:
        if not text:
            continue
        code = _ORIGIN_CODE[origin]
        if out and out[-1][1] == code:
            out[-1][0] += len(text)
        else:
            out.append([len(text), code])
    return out


def decode_spans(text: str, spans: list[list[Any]]) -> list[tuple[str, Origin]]:
    """The inverse of encode_spans; text not covered by spans counts as the target's."""
    out: list[tuple[str, Origin]] = []
    pos = 0
    for item in spans:
        try:
            n, code = int(item[0]), _CODE_ORIGIN[str(item[1])]
        except (KeyError, ValueError, TypeError, IndexError, OverflowError):  # OverflowError: Infinity
            continue
        if n > 0 and pos < len(text):
            out.append((text[pos : pos + n], code))
            pos += n
    if pos < len(text):
        out.append((text[pos:], Origin.TARGET))
    return out


@dataclass
class Turn:
    role: Role
    content: str
    spans: list[list[Any]] = field(default_factory=list)  # assistant answers: origins
    stats: dict[str, Any] = field(default_factory=dict)  # assistant answers: a stats summary
    # A reasoning model's thinking before the answer (kept, shown folded; templates decide
    # whether later turns see it), with its origins like the answer's.
    reasoning: str = ""
    reasoning_spans: list[list[Any]] = field(default_factory=list)

    def pieces(self) -> list[tuple[str, Origin]]:
        return decode_spans(self.content, self.spans)

    def reasoning_pieces(self) -> list[tuple[str, Origin]]:
        return decode_spans(self.reasoning, self.reasoning_spans)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.spans:
            d["spans"] = self.spans
        if self.stats:
            d["stats"] = self.stats
        if self.reasoning:
            d["reasoning"] = self.reasoning
            if self.reasoning_spans:
                d["reasoning_spans"] = self.reasoning_spans
        return d

    @classmethod
    def from_json(cls, d: object) -> Turn | None:
        """The turn, or None if any field is missing, of the wrong type or out of range."""
        if not isinstance(d, dict):
            return None
        role, content = d.get("role"), d.get("content")
        spans, stats = d.get("spans", []), d.get("stats", {})
        reasoning, reasoning_spans = d.get("reasoning", ""), d.get("reasoning_spans", [])
        if role not in ("user", "assistant") or not _is_text(content) or not _is_text(reasoning):
            return None
        if not _valid_spans(spans) or not _valid_stats(stats) or not _valid_spans(reasoning_spans):
            return None
        return cls(role, content, spans, stats, reasoning, reasoning_spans)


def new_id() -> str:
    # Sortable by creation time, unique without coordination.
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class Conversation:
    id: str = field(default_factory=new_id)
    system_prompt: str = ""
    turns: list[Turn] = field(default_factory=list)
    pair: str = ""  # display name of the pair used last
    # Thinking on or off for this chat (F5); None: the setting's choice.
    think: bool | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    @property
    def title(self) -> str:
        for t in self.turns:
            if t.role == "user":
                line = " ".join(t.content.split())
                return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1] + "…"
        return "(empty chat)"

    def messages(self, pending_user: str | None = None) -> list[ChatMessage]:
        """The conversation as chat-template messages (the system prompt first, if any)."""
        msgs = [ChatMessage("system", self.system_prompt)] if self.system_prompt.strip() else []
        # Earlier answers' reasoning goes with them: each template keeps or drops it as written.
        msgs += [ChatMessage(t.role, t.content, t.reasoning) for t in self.turns]
        if pending_user is not None:
            msgs.append(ChatMessage("user", pending_user))
        return msgs

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "id": self.id,
            "pair": self.pair,
            "created": self.created,
            "updated": self.updated,
            "system_prompt": self.system_prompt,
            "turns": [t.to_json() for t in self.turns],
            **({} if self.think is None else {"think": self.think}),
        }

    @classmethod
    def from_json(cls, d: object) -> Conversation | None:
        """The conversation, or None if any field (a turn's included) has the wrong type or
        is out of range. Optional fields may be missing; unknown ones are ignored."""
        if not isinstance(d, dict):
            return None
        conv_id, version = d.get("id"), d.get("version", 1)
        system_prompt, pair = d.get("system_prompt", ""), d.get("pair", "")
        created, updated = d.get("created", 0.0), d.get("updated", 0.0)
        raw_turns, think = d.get("turns", []), d.get("think")
        if not (_is_text(conv_id) and _safe_name(conv_id)) or not (_is_count(version) and version >= 1):
            return None
        if not (
            _is_text(system_prompt) and _is_text(pair) and _is_timestamp(created) and _is_timestamp(updated)
        ):
            return None
        if not isinstance(raw_turns, list) or not (think is None or isinstance(think, bool)):
            return None
        turns = [Turn.from_json(x) for x in raw_turns]
        if any(t is None for t in turns):  # a turn dropped now would be lost at the next save
            return None
        return cls(
            id=conv_id,
            system_prompt=system_prompt,
            turns=[t for t in turns if t is not None],
            pair=pair,
            think=think,
            created=float(created),
            updated=float(updated),
        )


@dataclass(frozen=True)
class ConversationSummary:
    id: str
    title: str
    pair: str
    updated: float
    turns: int


class ConversationStore:
    """One JSON file per conversation in `directory`.

    A file that is not a conversation (a crash of another tool, a disk error, a hand edit gone
    wrong) is never deleted or overwritten: it is moved to `damaged/` beside the others, with
    the time in its name, and reported once through `damaged`, so the user can recover it while
    the rest of the chats keep working. A file that cannot be read at all right now (no
    permission, an I/O error: often passing) is not judged: it stays where it is, is skipped,
    and is reported through `unreadable`.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.damaged: list[Path] = []  # backups made by list() and load(), for the app to report
        # Files the last list() (and any load() since) could not read; left in place.
        self.unreadable: list[tuple[Path, OSError]] = []

    @property
    def backup_directory(self) -> Path:
        return self.directory / "damaged"

    def _set_aside(self, path: Path) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = self.backup_directory / f"{path.stem}.{stamp}{path.suffix}"
        n = 1
        while backup.exists():
            n += 1
            backup = self.backup_directory / f"{path.stem}.{stamp}-{n}{path.suffix}"
        try:
            self.backup_directory.mkdir(parents=True, exist_ok=True)
            os.replace(path, backup)
        except OSError:
            return  # left where it is: still not lost, and reported again next time
        self.damaged.append(backup)

    def _path(self, conv_id: str) -> Path:
        return self.directory / f"{_safe_name(conv_id)}.json"

    def _read(self, path: Path) -> Conversation | None:
        """The conversation in `path`, or None: gone (deleted meanwhile), unreadable for now
        (recorded in `unreadable`, left in place) or damaged (set aside, recorded in `damaged`)."""
        try:
            # (a pipe, a link or a device in its place, or an oversized file, is damaged: never
            # a hang or gigabytes read; small_files.py)
            data = json.loads(read_small_text(path, MAX_CHAT_BYTES))
        except FileNotFoundError:
            return None
        except OSError as exc:
            self.unreadable.append((path, exc))
            return None
        except (ValueError, RecursionError):  # not UTF-8, not JSON, nested beyond reason, no file
            data = None
        conv = Conversation.from_json(data)
        if conv is None:
            self._set_aside(path)
        return conv

    def save(self, conv: Conversation) -> None:
        if not conv.turns:  # an empty chat is not worth a file
            return
        conv.updated = time.time()
        write_json(self._path(conv.id), conv.to_json())

    def load(self, conv_id: str) -> Conversation | None:
        """The saved conversation, or None (see _read: a damaged file is set aside)."""
        return self._read(self._path(conv_id))

    def delete(self, conv_id: str) -> None:
        self._path(conv_id).unlink(missing_ok=True)

    def list(self) -> list[ConversationSummary]:
        """Saved conversations, the most recently updated first."""
        out: list[ConversationSummary] = []
        self.unreadable = []
        if not self.directory.is_dir():
            return out
        for path in self.directory.glob("*.json"):
            conv = self._read(path)
            if conv is not None and conv.turns:
                out.append(ConversationSummary(conv.id, conv.title, conv.pair, conv.updated, len(conv.turns)))
        out.sort(key=lambda s: s.updated, reverse=True)
        return out
