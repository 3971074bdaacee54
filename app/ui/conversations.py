"""Conversations: what was said, which tokens came from where, saved as one JSON file each.

An answer keeps its token origins as run-length spans of characters, so a reopened chat shows
the same colours it had while streaming. Files are replaced atomically on every save.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from app.engine import ChatMessage, Origin
from app.ui.storage import read_json, write_json

Role = Literal["user", "assistant"]
_ORIGIN_CODE = {Origin.DRAFT: "d", Origin.TARGET: "t", Origin.BONUS: "b"}
_CODE_ORIGIN = {v: k for k, v in _ORIGIN_CODE.items()}
TITLE_CHARS = 60


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
        except (KeyError, ValueError, TypeError, IndexError):
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

    def pieces(self) -> list[tuple[str, Origin]]:
        return decode_spans(self.content, self.spans)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.spans:
            d["spans"] = self.spans
        if self.stats:
            d["stats"] = self.stats
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Turn | None:
        role, content = d.get("role"), d.get("content")
        if role not in ("user", "assistant") or not isinstance(content, str):
            return None
        spans = d.get("spans") if isinstance(d.get("spans"), list) else []
        stats = d.get("stats") if isinstance(d.get("stats"), dict) else {}
        return cls(role, content, spans or [], stats or {})


def new_id() -> str:
    # Sortable by creation time, unique without coordination.
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class Conversation:
    id: str = field(default_factory=new_id)
    system_prompt: str = ""
    turns: list[Turn] = field(default_factory=list)
    pair: str = ""  # display name of the pair used last
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
        msgs += [ChatMessage(t.role, t.content) for t in self.turns]
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
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Conversation | None:
        if not isinstance(d, dict) or not isinstance(d.get("id"), str):
            return None
        raw_turns = d.get("turns") if isinstance(d.get("turns"), list) else []
        turns = [t for t in (Turn.from_json(x) for x in raw_turns or [] if isinstance(x, dict)) if t]
        return cls(
            id=d["id"],
            system_prompt=str(d.get("system_prompt") or ""),
            turns=turns,
            pair=str(d.get("pair") or ""),
            created=float(d.get("created") or 0.0),
            updated=float(d.get("updated") or 0.0),
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

    A file that cannot be read as a conversation (a crash of another tool, a disk error, a
    hand edit gone wrong) is never deleted or overwritten: it is moved to `damaged/` beside the
    others, with the time in its name, and reported once through `damaged`, so the user can
    recover it while the rest of the chats keep working.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.damaged: list[Path] = []  # backups made by the last list(), for the app to report

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
        safe = "".join(c for c in conv_id if c.isalnum() or c in "-_")
        return self.directory / f"{safe}.json"

    def save(self, conv: Conversation) -> None:
        if not conv.turns:  # an empty chat is not worth a file
            return
        conv.updated = time.time()
        write_json(self._path(conv.id), conv.to_json())

    def load(self, conv_id: str) -> Conversation | None:
        data = read_json(self._path(conv_id))
        return Conversation.from_json(data) if isinstance(data, dict) else None

    def delete(self, conv_id: str) -> None:
        self._path(conv_id).unlink(missing_ok=True)

    def list(self) -> list[ConversationSummary]:
        """Saved conversations, the most recently updated first."""
        out: list[ConversationSummary] = []
        if not self.directory.is_dir():
            return out
        for path in self.directory.glob("*.json"):
            data = read_json(path)
            conv = Conversation.from_json(data) if isinstance(data, dict) else None
            if conv is None:
                if path.exists():  # unreadable, not merely deleted meanwhile
                    self._set_aside(path)
                continue
            if conv.turns:
                out.append(ConversationSummary(conv.id, conv.title, conv.pair, conv.updated, len(conv.turns)))
        out.sort(key=lambda s: s.updated, reverse=True)
        return out
