"""An answer sent back: streamed as server-sent events, or whole as one JSON body; a client that
leaves cancels its generation either way, and each answer logs one line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.types import Receive, Scope, Send

from tandem.engine import DoneEvent, GenerationStats, TandemError, TokenEvent

from .chunks import DONE, Answer, sse
from .errors import ApiError
from .slot import Generation

log = logging.getLogger("tandem.serve")


async def disconnected(request: Request) -> None:
    """Returns when the client has gone away (reading the request's remaining messages)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def shutdown_error() -> ApiError:
    return ApiError(
        503, "the server is shutting down; the answer was stopped", type="server_error", code="shutting_down"
    )


class EventStream(StreamingResponse):
    """Server-sent events that cancel their generation however the response ends (the client
    went away, the server stopped), even before the first event was sent."""

    def __init__(self, content: AsyncIterator[str], gen: Generation) -> None:
        super().__init__(
            content,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self._gen = gen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._gen.stop()


def streamed(gen: Generation, frame: Answer, include_usage: bool) -> Response:
    return EventStream(_chunks(gen, frame, include_usage), gen)


async def _chunks(gen: Generation, frame: Answer, include_usage: bool) -> AsyncIterator[str]:
    opening = frame.opening()
    if opening is not None:
        yield opening
    try:
        async for batch in gen.batches():
            tokens = [ev for ev in batch if type(ev) is TokenEvent]
            if tokens:
                yield frame.tokens(tokens)
            done = batch[-1]
            if isinstance(done, DoneEvent):
                stats = done.stats
                log_answer(frame, stats)
                if stats.stop_reason == "cancelled":  # not the client's doing: the server is stopping
                    yield sse(shutdown_error().body())
                    break
                yield frame.finish(stats)
                if include_usage:
                    yield frame.usage_chunk(stats)
    except TandemError as exc:
        yield sse(ApiError(500, str(exc), type="server_error").body())
    except Exception as exc:  # a fault of ours: one line to the client, the traceback to the log
        log.exception("generation failed")
        yield sse(
            ApiError(
                500, f"tandem serve hit an internal error ({type(exc).__name__})", type="server_error"
            ).body()
        )
    yield DONE


async def whole(request: Request, gen: Generation, frame: Answer) -> Response:
    watch = asyncio.ensure_future(_cancel_when_gone(request, gen))
    tokens: list[TokenEvent] = []
    stats: GenerationStats | None = None
    text = reasoning = ""
    try:
        async for batch in gen.batches():
            for ev in batch:
                if type(ev) is TokenEvent:
                    tokens.append(ev)
                elif isinstance(ev, DoneEvent):
                    stats, text, reasoning = ev.stats, ev.text, ev.reasoning
    except TandemError as exc:
        raise ApiError(500, str(exc), type="server_error") from None
    finally:
        watch.cancel()
    if stats is not None:
        log_answer(frame, stats)
    if stats is None or stats.stop_reason == "cancelled":
        # The client left (nobody reads this) or the server is stopping.
        raise shutdown_error()
    return JSONResponse(frame.whole(text, tokens, stats, reasoning))


async def _cancel_when_gone(request: Request, gen: Generation) -> None:
    await disconnected(request)
    gen.stop()


def log_answer(frame: Answer, stats: GenerationStats) -> None:
    """One line per answer on the server's console: what it cost and how drafting went."""
    drafting = (
        f", acceptance {stats.acceptance_rate:.0%}, {stats.tokens_per_round:.2f} tokens/pass"
        if stats.drafted
        else ""
    )
    log.info(
        "%s: %d tokens, %.1f tok/s%s; prompt %d tokens (%d cached); %s",
        "chat" if frame.kind == "chat" else "completion",
        stats.generated,
        stats.decode_tokens_per_s,
        drafting,
        stats.prompt_tokens,
        stats.prompt_tokens - stats.prefill_tokens,
        stats.stop_reason.replace("_", " "),
    )
