"""GET /health, /v1/models and /v1/models/{name}: what is served, and how busy it is."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends

from ..served import Served, served

router = APIRouter()
Server = Annotated[Served, Depends(served)]


@router.get("/health")
async def health(server: Server) -> dict[str, Any]:
    slot = server.slot
    return {
        "status": "ok",
        "model": server.settings.model_id,
        "busy": slot.busy,
        "waiting": slot.waiting,
        "parallel": slot.n_seq,  # requests answered at once (--parallel)
        "preparing": server.prompts.running,  # prompts being built (rendered, tokenized)
        "answers": dict(slot.ended),  # by how they ended: eog, max_tokens, cancelled...
    }


@router.get("/v1/models")
async def models(server: Server) -> dict[str, Any]:
    return {"object": "list", "data": [server.model_entry()]}


@router.get("/v1/models/{name:path}")
async def model(name: str, server: Server) -> dict[str, Any]:
    server.check_model(name)
    return server.model_entry()
