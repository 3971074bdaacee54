"""The HTTP routes of `tandem serve` (FastAPI): OpenAI's chat and text completions, the model
list, and a health check, over one loaded pair.

A request goes: Host and body size checked (guards.py) → body checked (schema.py) → prompt
built in a thread the server can stop (prompts.py), then checked by the engine → its turn in the
queue (slot.py) → the generation's rounds as chunks (chunks.py), or one answer.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from tandem import __version__
from tandem.engine import (
    BatchEngine,
    ChatPrompt,
    ChatTemplateError,
    ContextOverflowError,
    DoneEvent,
    GenerationStats,
    ReasoningSplit,
    TandemError,
    TokenEvent,
)
from tandem.session.choices import Choices, generation_config
from tandem.session.drafting import drafts_itself, offered
from tandem.session.prompts import build_chat, system_folded_note

from .chunks import DONE, Answer, Kind, sse
from .errors import (
    ApiError,
    api_error_handler,
    bad_request,
    http_error_handler,
    quoted,
    unexpected_error_handler,
    validation_error_handler,
)
from .guards import BodyGuard, HostCheck, HostGuard, KeyGuard
from .parallel_slot import ParallelSlot
from .prompts import PromptBuilds, StoppedBuilding
from .schema import ChatCompletionRequest, CompletionRequest
from .slot import ClientGone, Generation, Slot

if TYPE_CHECKING:
    from tandem.engine import ModelPair

log = logging.getLogger("tandem.serve")
T = TypeVar("T")


@dataclass(frozen=True)
class ServeSettings:
    """What `tandem serve` was started with."""

    model_id: str  # the name clients use (`model`), listed by /v1/models
    choices: Choices  # the server's generation settings, which request fields override
    speculative: bool = True  # False: the target alone (--baseline)
    api_key: str | None = None
    max_waiting: int = 32
    spec: Any = None  # the catalog pair (its settings apply), when serving one
    host: str = "127.0.0.1"  # the address it listens on: which Host headers it answers to
    allowed_hosts: tuple[str, ...] = ()  # more names it answers to (--allow-host; "*": any)
    max_body: int | None = None  # bytes; None: body_limit(context)
    read_timeout_s: float = 30.0  # for a request to arrive, headers and body (run.py)
    max_connections: int | None = None  # None: connection_limit(max_waiting) (run.py)
    parallel: int = 1  # requests answered at once (--parallel; the models hold as many sequences)


# A request body is refused past this many bytes per token of context, and never below the
# floor: a prompt that fills the context is a few characters a token (at most 6 bytes each as
# JSON escapes), so this leaves room for any real one while a hostile body is refused early.
BODY_BYTES_PER_TOKEN = 64
MIN_BODY_LIMIT = 4 * 2**20


def body_limit(context: int) -> int:
    return max(MIN_BODY_LIMIT, BODY_BYTES_PER_TOKEN * context)


def make_slot(pair: ModelPair, settings: ServeSettings) -> Slot | ParallelSlot:
    """With `settings.parallel` > 1 the batched engine (engine/decoding/batch.py), which drafts with a
    draft model of the target's tokenizer and prompt lookup (the kinds it leaves out are said in
    the log; a recurrent target falls back to one at a time); with 1, one request at a time on
    the one-sequence engine (every kind, exactly as `tandem run`)."""
    if settings.parallel == 1:
        return Slot(pair, settings.max_waiting)
    lost = BatchEngine.left_out(pair.target, pair.draft) if settings.speculative else []
    draft = pair.draft if settings.speculative else None
    if draft is not None and draft.foreign_tokenizer:
        draft = None  # (drafting across tokenizers runs one sequence: batch.py)
    try:
        engine = BatchEngine(pair.target, draft)
    except TandemError as exc:
        log.warning("%s; answering one request at a time", exc)
        return Slot(pair, settings.max_waiting)
    if lost:
        log.warning(
            "parallel sequences draft with a draft model and prompt lookup, not with %s "
            "(--parallel 1 keeps them)",
            ", ".join(lost),
        )
    return ParallelSlot(pair, engine, settings.max_waiting)


def create_app(pair: ModelPair, settings: ServeSettings) -> FastAPI:
    slot = make_slot(pair, settings)
    told: set[str] = set()  # notes logged once per server
    prompts = PromptBuilds()
    _ = pair.special_tokens.longest  # read once now, rather than by the first request
    app = FastAPI(title="Tandem", version=__version__, docs_url="/docs", redoc_url=None)
    app.state.slot = slot
    app.state.prompts = prompts

    app.add_exception_handler(ApiError, api_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(Exception, unexpected_error_handler)
    target_name = pair.target.path.name

    def check_model(name: str | None) -> None:
        if name is None or name in (settings.model_id, target_name, target_name.removesuffix(".gguf")):
            return
        raise ApiError(
            404,
            f"model '{quoted(name)}' is not served here: this server serves '{settings.model_id}' "
            "(GET /v1/models)",
            param="model",
            code="model_not_found",
        )

    def model_entry() -> dict[str, Any]:
        draft = pair.draft_file.name if pair.draft_file is not None and settings.speculative else None
        return {
            "id": settings.model_id,
            "object": "model",
            "created": int(pair.target.path.stat().st_mtime),
            "owned_by": "tandem",
            "tandem": {
                "target": target_name,
                "draft": draft,
                # Whether the target's own draft heads (multi-token prediction) are loaded: the
                # mtp drafter (and auto) draft with them.
                "draft_heads": drafts_itself(pair),
                "drafters": offered(pair),  # the kinds it can draft with (auto ranks them)
                "drafter": settings.choices.drafter if settings.speculative else "",
                "speculative": settings.speculative,
                "context": pair.context_size,
            },
        }

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "model": settings.model_id,
            "busy": slot.busy,
            "waiting": slot.waiting,
            "parallel": slot.n_seq,  # requests answered at once (--parallel)
            "preparing": prompts.running,  # prompts being built (rendered, tokenized)
            "answers": dict(slot.ended),  # by how they ended: eog, max_tokens, cancelled...
        }

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_entry()]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str) -> dict[str, Any]:
        check_model(name)
        return model_entry()

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response:
        body.unsupported()
        check_model(body.model)
        messages = body.chat_messages()
        think = body.think(settings.choices.think)
        variables = body.chat_template_kwargs

        def build(cancel: threading.Event) -> ChatPrompt:
            return build_chat(
                pair, messages, think=think, variables=variables, cancel=cancel, within_context=True
            )

        try:
            chat = await _prompt(request, build, "messages")
        except ClientGone:
            return Response(status_code=499)  # nobody reads it: the client left
        if chat.system_folded and "system" not in told:
            told.add("system")
            log.warning("%s", system_folded_note(pair))
        choices = body.request_choices(settings.choices)
        return await answer(request, "chat", chat.tokens, choices, body, chat.reasoning)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Response:
        body.unsupported()
        check_model(body.model)
        text = body.text
        if not text:
            raise bad_request("the prompt is empty", param="prompt")
        try:
            prompt = await _prompt(request, lambda _: pair.raw_prompt(text, within_context=True), "prompt")
        except ClientGone:
            return Response(status_code=499)
        return await answer(request, "text", prompt, body.request_choices(settings.choices), body)

    async def answer(
        request: Request,
        kind: Kind,
        prompt: Sequence[int],
        choices: Choices,
        body: ChatCompletionRequest | CompletionRequest,
        reasoning: ReasoningSplit | None = None,
    ) -> Response:
        if choices.max_tokens is None:  # not asked for, here or by the server: until the context is full
            choices = replace(choices, max_tokens=pair.context_size)
        config = replace(generation_config(choices, settings.spec), reasoning=reasoning)
        try:  # refused now, not after waiting for the pair: the engine's own checks
            config = slot.prepare(prompt, config, speculative=settings.speculative)
        except ContextOverflowError as exc:
            param = "messages" if kind == "chat" else "prompt"
            raise ApiError(400, str(exc), param=param, code="context_length_exceeded") from None
        except TandemError as exc:
            raise bad_request(str(exc)) from None
        try:
            await slot.acquire(_disconnected(request))
        except ClientGone:
            return Response(status_code=499)  # nobody reads it: the client left while waiting
        gen = slot.start(prompt, config, speculative=settings.speculative)
        frame = Answer(kind, settings.model_id)
        if body.stream:
            return _EventStream(_stream(gen, frame, body.include_usage), gen)
        return await _whole(request, gen, frame)

    async def _prompt(request: Request, build: Callable[[threading.Event], T], param: str) -> T:
        """Render and tokenize off the event loop (a long history takes milliseconds), stopped if
        the client leaves (ClientGone) or the server stops."""
        try:
            return await prompts.build(build, _disconnected(request))
        except StoppedBuilding:
            raise _shutdown_error() from None
        except ContextOverflowError as exc:  # refused by its length, before tokenizing all of it
            raise ApiError(400, str(exc), param=param, code="context_length_exceeded") from None
        except ChatTemplateError as exc:  # a template that fails on these messages
            hint = "send the text as a plain prompt to /v1/completions instead"
            raise bad_request(f"{exc.problem}; {hint}" if exc.hint else str(exc), param=param) from None
        except TandemError as exc:  # text that is not Unicode...
            raise bad_request(str(exc), param=param) from None

    # Added last, run first: the Host, then the body's size, then the key (KeyGuard).
    limit = settings.max_body if settings.max_body is not None else body_limit(pair.context_size)
    if settings.api_key:
        app.add_middleware(KeyGuard, key=settings.api_key)
    app.add_middleware(BodyGuard, limit=limit, stopping=slot.stopping)
    app.add_middleware(HostGuard, check=HostCheck(settings.host, settings.allowed_hosts))
    return app


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away (reading the request's remaining messages)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class _EventStream(StreamingResponse):
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
            self._gen.cancel.set()


async def _stream(gen: Generation, frame: Answer, include_usage: bool) -> AsyncIterator[str]:
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
                _log_answer(frame, stats)
                if stats.stop_reason == "cancelled":  # not the client's doing: the server is stopping
                    yield sse(_shutdown_error().body())
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


async def _whole(request: Request, gen: Generation, frame: Answer) -> Response:
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
        _log_answer(frame, stats)
    if stats is None or stats.stop_reason == "cancelled":
        # The client left (nobody reads this) or the server is stopping.
        raise _shutdown_error()
    return JSONResponse(frame.whole(text, tokens, stats, reasoning))


async def _cancel_when_gone(request: Request, gen: Generation) -> None:
    await _disconnected(request)
    gen.cancel.set()


def _log_answer(frame: Answer, stats: GenerationStats) -> None:
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


def _shutdown_error() -> ApiError:
    return ApiError(
        503, "the server is shutting down; the answer was stopped", type="server_error", code="shutting_down"
    )
