"""POST /v1/chat/completions and /v1/completions: a prompt built from the request, then an
answer (served.py)."""

from __future__ import annotations

import threading
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from tandem.engine import ChatPrompt
from tandem.session.prompts import build_chat, system_folded_note

from ..errors import bad_request
from ..prompts import ClientGone
from ..schema import ChatCompletionRequest, CompletionRequest
from ..served import Served, served

router = APIRouter()
Server = Annotated[Served, Depends(served)]


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(body: ChatCompletionRequest, request: Request, server: Server) -> Response:
    body.unsupported()
    server.check_model(body.model)
    pair, options = server.pair, server.settings.options
    messages = body.chat_messages()
    think = body.think(options.think)
    variables = body.chat_template_kwargs

    def build(cancel: threading.Event) -> ChatPrompt:
        return build_chat(
            pair, messages, think=think, variables=variables, cancel=cancel, within_context=True
        )

    try:
        chat = await server.prompt(request, build, "messages")
    except ClientGone:
        return Response(status_code=499)  # nobody reads it: the client left
    if chat.system_folded:
        server.tell_once("system", system_folded_note(pair))
    asked = body.request_options(options)
    return await server.answer(request, "chat", chat.tokens, asked, body, chat.reasoning)


@router.post("/v1/completions", response_model=None)
async def completions(body: CompletionRequest, request: Request, server: Server) -> Response:
    body.unsupported()
    server.check_model(body.model)
    text = body.text
    if not text:
        raise bad_request("the prompt is empty", param="prompt")
    pair = server.pair
    try:
        prompt = await server.prompt(request, lambda _: pair.raw_prompt(text, within_context=True), "prompt")
    except ClientGone:
        return Response(status_code=499)
    return await server.answer(request, "text", prompt, body.request_options(server.settings.options), body)
