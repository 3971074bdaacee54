"""The app factory of `tandem serve` (FastAPI): OpenAI's chat and text completions, the model
list and a health check (routes/), over one loaded pair (served.py).

A request goes: Host and body size checked (guards.py) → body checked (schema.py) → prompt
built in a thread the server can stop (prompts.py), then checked by the engine → its turn in the
queue (slot.py) → the generation's rounds as chunks (chunks.py, replies.py), or one answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from tandem import __version__

from .errors import (
    ApiError,
    api_error_handler,
    http_error_handler,
    unexpected_error_handler,
    validation_error_handler,
)
from .guards import BodyGuard, HostCheck, HostGuard, KeyGuard
from .routes import completions, models
from .served import Served, make_slot
from .settings import ServeSettings, body_limit

if TYPE_CHECKING:
    from tandem.engine import ModelPair

__all__ = ["ServeSettings", "create_app"]


def create_app(pair: ModelPair, settings: ServeSettings) -> FastAPI:
    server = Served(pair, settings, make_slot(pair, settings))
    _ = pair.special_tokens.longest  # read once now, rather than by the first request
    app = FastAPI(title="Tandem", version=__version__, docs_url="/docs", redoc_url=None)
    app.state.served = server  # (the routes' dependency; run.py stops its slot with the server)
    app.include_router(models.router)
    app.include_router(completions.router)

    app.add_exception_handler(ApiError, api_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    app.add_exception_handler(StarletteHTTPException, http_error_handler)
    app.add_exception_handler(Exception, unexpected_error_handler)

    # Added last, run first: the Host, then the body's size, then the key (KeyGuard).
    limit = settings.max_body if settings.max_body is not None else body_limit(pair.context_size)
    if settings.api_key:
        app.add_middleware(KeyGuard, key=settings.api_key)
    app.add_middleware(BodyGuard, limit=limit, stopping=server.slot.stopping)
    app.add_middleware(HostGuard, check=HostCheck(settings.host, settings.allowed_hosts))
    return app
