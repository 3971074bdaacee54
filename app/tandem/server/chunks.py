"""The JSON `tandem serve` answers with: OpenAI's shapes, plus a `tandem` extension field that
plain clients ignore.

* Each streamed chunk (and a whole answer) carries `tandem.tokens`: every token with its origin,
  as in `tandem run --json` ("draft": a drafted token the target accepted; "target": the
  target's own, a correction after a rejected guess or a step without a draft; "bonus": the
  target's extra token after a fully accepted draft).
* The usage (a whole answer's, or the last chunk's when the stream asked for
  `stream_options.include_usage`) carries `tandem`: how the answer was drafted and how well.
* A thinking model's reasoning is `message.reasoning_content` (`delta.reasoning_content` in
  chunks), apart from the answer in `content`, as llama-server, vLLM and DeepSeek return it;
  `usage.completion_tokens_details.reasoning_tokens` counts its tokens.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tandem.engine import GenerationStats, PartStats, StopReason, TokenEvent
from tandem.session.collect import token_origins

Kind = Literal["chat", "text"]

_FINISH: dict[StopReason, str] = {
    "eog": "stop",
    "stop_string": "stop",
    "max_tokens": "length",
    "context_full": "length",
    "cancelled": "stop",  # (never sent to the client that cancelled; a shutdown says so apart)
}


def finish_reason(reason: StopReason) -> str:
    return _FINISH[reason]


def usage(stats: GenerationStats) -> dict[str, Any]:
    """OpenAI's usage, and the `tandem` field: the generation's record (GenerationStats, by the
    names `tandem run --json` has: rounds, tokens_per_round, drafters per kind...), with the
    figures this API has always had rounded, and its names for two of them (target_passes =
    rounds, tokens_per_pass = tokens_per_round)."""
    record = stats.to_dict()
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated,
        "total_tokens": stats.prompt_tokens + stats.generated,
        # What the KV cache already held from the previous request (the common prefix).
        "prompt_tokens_details": {"cached_tokens": stats.prompt_tokens - stats.prefill_tokens},
        "completion_tokens_details": {"reasoning_tokens": stats.reasoning_tokens},
        "tandem": {
            **record,
            "mode": stats.mode,
            "drafter": stats.drafter,
            "draft_max": stats.draft_max,
            "adaptive": stats.adaptive,
            "drafted": stats.drafted,
            "accepted": stats.accepted,
            "acceptance_rate": round(stats.acceptance_rate, 4),
            "target_passes": stats.rounds,
            "tokens_per_pass": round(stats.tokens_per_round, 3),
            "decode_tokens_per_s": round(stats.decode_tokens_per_s, 2),
            "decode_s": round(stats.decode_s, 4),
            "prefill_tokens": stats.prefill_tokens,
            "prefill_s": round(stats.prefill_s, 4),
            "stop_reason": stats.stop_reason,
            # Drafting in the reasoning and in the answer apart (a thinking model's).
            "reasoning": {**record["reasoning"], **_part(stats.reasoning)},
            "answer": {**record["answer"], **_part(stats.answer)},
        },
    }


def _part(p: PartStats) -> dict[str, Any]:
    return {
        "tokens": p.tokens,
        "drafted": p.drafted,
        "accepted": p.accepted,
        "acceptance_rate": round(p.acceptance_rate, 4),
        "decode_tokens_per_s": round(p.tokens_per_s, 2),
    }


@dataclass
class Answer:
    """The frame every chunk or answer of one request shares."""

    kind: Kind
    model: str
    id: str = field(default="")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            prefix = "chatcmpl" if self.kind == "chat" else "cmpl"
            self.id = f"{prefix}-{uuid.uuid4().hex}"

    def _frame(self, object_: str) -> dict[str, Any]:
        return {"id": self.id, "object": object_, "created": self.created, "model": self.model}

    # ------------------------------------------------------------------ a whole answer
    def whole(
        self, text: str, tokens: Sequence[TokenEvent], stats: GenerationStats, reasoning: str = ""
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {
            "index": 0,
            "logprobs": None,
            "finish_reason": finish_reason(stats.stop_reason),
        }
        if self.kind == "chat":
            choice["message"] = {"role": "assistant", "content": text}
            if reasoning:
                choice["message"]["reasoning_content"] = reasoning
            body = self._frame("chat.completion")
        else:
            choice["text"] = text
            body = self._frame("text_completion")
        body["choices"] = [choice]
        body["usage"] = usage(stats)
        body["tandem"] = {"tokens": token_origins(tokens)}
        return body

    # ------------------------------------------------------------------ streamed chunks
    def _chunk(
        self, delta_text: str | None, finish: str | None, *, role: bool = False, reasoning: str = ""
    ) -> dict[str, Any]:
        if self.kind == "chat":
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if reasoning:
                delta["reasoning_content"] = reasoning
            if delta_text is not None and (delta_text or not reasoning):
                delta["content"] = delta_text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            body = self._frame("chat.completion.chunk")
        else:
            choice = {"index": 0, "text": delta_text or "", "logprobs": None, "finish_reason": finish}
            body = self._frame("text_completion")
        body["choices"] = [choice]
        return body

    def opening(self) -> str | None:
        """The first chunk of a chat stream names the role (text completions have none)."""
        return sse(self._chunk("", None, role=True)) if self.kind == "chat" else None

    def tokens(self, tokens: Sequence[TokenEvent]) -> str:
        body = self._chunk(
            "".join(t.text for t in tokens), None, reasoning="".join(t.reasoning for t in tokens)
        )
        body["tandem"] = {"tokens": token_origins(tokens)}
        return sse(body)

    def finish(self, stats: GenerationStats) -> str:
        return sse(self._chunk(None if self.kind == "chat" else "", finish_reason(stats.stop_reason)))

    def usage_chunk(self, stats: GenerationStats) -> str:
        body = self._frame("chat.completion.chunk" if self.kind == "chat" else "text_completion")
        body["choices"] = []
        body["usage"] = usage(stats)
        return sse(body)


def sse(body: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


DONE = "data: [DONE]\n\n"
